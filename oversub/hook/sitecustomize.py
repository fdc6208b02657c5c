"""The `sitecustomize` of every Python process `oversub run` starts: its directory is first
on PYTHONPATH, so Python imports this module at start. It installs the hook, the package
`_oversub_hook` beside it (standard library only: oversub need not be installed in that
interpreter), which then runs the `sitecustomize` this one shadows.
"""

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
