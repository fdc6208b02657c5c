"""The `sitecustomize` of every Python process `oversub run` starts: it runs the hook, the
package `_oversub_hook` beside it (`oversub.hook` says how)."""

if __name__ == "sitecustomize":
    try:
        import _oversub_hook  # type: ignore[import-not-found]  # the package beside this file
    except Exception as exc:  # the program goes on without the hook
        try:  # noqa: SIM105 (contextlib costs every process 4 ms)
            __import__("sys").stderr.write(f"oversub: could not load the hook: {exc!r}\n")
        except Exception:
            pass
    else:
        _oversub_hook.main()
