"""The code-only knobs, one per runtime: applied when (and only if) the runtime's module is
imported, and to the pools already loaded when a process's share changes.

Each applier wraps what the program may call to size the pool itself (torch.set_num_threads,
an ONNX Runtime session's options, a DuckDB connection's config, ...), so that a setting the
program makes is kept and recorded as kept, never undone; a call of oversub's own is not
recorded as the program's (`call`). docs/run.md has the table.
"""

from __future__ import annotations

import os
import sys
import threading

from .share import safely

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

    from .share import Hook

KNOBS: tuple[tuple[str, str, str, str], ...] = (
    (
        "torch",
        "torch",
        "PyTorch intra-op pool",
        "torch.set_num_threads(T); the inter-op pool is left to the program (torch takes one "
        "set_num_interop_threads call, and a second raises)",
    ),
    (
        "onnxruntime",
        "onnxruntime",
        "ONNX Runtime sessions",
        "SessionOptions.intra_op_num_threads = T when the options leave it at 0",
    ),
    ("pyarrow", "pyarrow", "Arrow CPU pool", "pyarrow.set_cpu_count(T)"),
    ("cv2", "opencv", "OpenCV", "cv2.setNumThreads(T)"),
    (
        "duckdb",
        "duckdb",
        "DuckDB connections",
        "threads = T in each connection whose config does not set threads",
    ),
    ("numba", "numba", "numba parallel team", "numba.set_num_threads(T) when its threads start"),
    (
        "threadpoolctl",
        "blas",
        "BLAS and OpenMP pools already loaded",
        "threadpoolctl.threadpool_limits(T) in a forked child and in a parent that starts workers",
    ),
)
"""(module, runtime key, label, what is applied) of every code-only knob the hook applies
when the module is imported (or, for threadpoolctl, when it is installed): the rows of
`oversub run --dry-run`."""


def _user_var(hook: Hook, *names: str) -> str | None:
    """The first of `names` the user set (a value oversub did not put there)."""
    for name in names:
        if name in hook.user:
            return name
        if name not in hook.set_by_parent and os.environ.get(name, "").strip():
            return name
    return None


def _int(value: str | None) -> int | None:
    text = (value or "").split(",")[0].strip()
    return int(text) if text.isdigit() else None


def watch_setter(hook: Hook, module: Any, attr: str, runtime: str, knob: str) -> None:
    """Wrap module.attr (a setter such as torch.set_num_threads) so that a call the program
    makes is recorded as the user's value: kept, never undone."""
    original = getattr(module, attr, None)
    if original is None or getattr(original, "__oversub_original__", None) is not None:
        return

    def setter(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not getattr(_local, "inside", False):
            value = args[0] if args else next(iter(kwargs.values()), None)
            value = value if isinstance(value, int) and not isinstance(value, bool) else None
            # The plan's own value (torch's DataLoader sets 1 in its workers) is no setting
            # of the program's: recorded as sized.
            state = "sized" if value is not None and value == hook.threads else "kept"
            hook.record(runtime, knob, value, state)
        return result

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:  # noqa: SIM105 (contextlib costs every process 4 ms)
            setattr(setter, name, getattr(original, name))
        except (AttributeError, TypeError):
            pass
    setter.__oversub_original__ = original  # type: ignore[attr-defined]
    setattr(module, attr, setter)


_local = threading.local()


def call(function: Any, *args: Any) -> Any:
    """Call one of the watched setters as oversub (not recorded as the user's)."""
    _local.inside = True
    try:
        return function(*args)
    finally:
        _local.inside = False


def _torch(hook: Hook, torch: Any) -> None:
    n = hook.resolve()
    watch_setter(hook, torch, "set_num_threads", "torch", "torch.set_num_threads")
    watch_setter(
        hook, torch, "set_num_interop_threads", "torch-interop", "torch.set_num_interop_threads"
    )
    user = _user_var(hook, "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    if user:
        hook.record("torch", user, _int(os.environ.get(user)), "kept")
    else:
        call(torch.set_num_threads, n)
        hook.record("torch", "torch.set_num_threads", n, "sized")
    # torch.set_num_interop_threads takes one call per process, and a second one raises:
    # called here, it would make the program's own call fail. The inter-op pool is left to
    # the program (its threads sleep when idle); `oversub run` reports it if it is busy.


def _onnxruntime(hook: Hook, ort: Any) -> None:
    hook.resolve()
    cls = getattr(ort, "InferenceSession", None)
    init = getattr(cls, "__init__", None)
    if cls is None or init is None or getattr(init, "__oversub_original__", None):
        return

    def __init__(self: Any, path_or_bytes: Any, sess_options: Any = None, *a: Any, **k: Any) -> Any:
        given = sess_options
        if given is None and "sess_options" in k:
            given = k.pop("sess_options")
        options, before = given, None
        try:
            if options is None:
                options = ort.SessionOptions()
            before = int(options.intra_op_num_threads)
            if before == 0:
                options.intra_op_num_threads = hook.threads or hook.resolve()
        except Exception as exc:
            hook.fault("SessionOptions.intra_op_num_threads", exc)
            return init(self, path_or_bytes, given, *a, **k)
        try:
            return init(self, path_or_bytes, options, *a, **k)
        finally:
            if before == 0:
                _session(hook, options, before)
            elif before is not None:
                hook.record("onnxruntime", "SessionOptions.intra_op_num_threads", before, "kept")

    __init__.__oversub_original__ = init  # type: ignore[attr-defined]
    __init__.__qualname__ = getattr(init, "__qualname__", "__init__")
    __init__.__doc__ = getattr(init, "__doc__", None)
    cls.__init__ = __init__


def _session(hook: Hook, options: Any, before: int) -> None:
    """Count an ONNX Runtime session oversub sized, and give the options back as they were."""
    sized = options.intra_op_num_threads
    try:  # noqa: SIM105 (contextlib: 4 ms a process); the session is made; the options are the user's
        options.intra_op_num_threads = before
    except Exception:
        pass
    entry = hook.records.get("onnxruntime", {})
    count = entry.get("sessions", 0) + 1 if entry.get("state") == "sized" else 1
    hook.record(
        "onnxruntime", "SessionOptions.intra_op_num_threads", sized, "sized", sessions=count
    )


def _pyarrow(hook: Hook, pa: Any) -> None:
    n = hook.resolve()
    watch_setter(hook, pa, "set_cpu_count", "pyarrow", "pyarrow.set_cpu_count")
    if _user_var(hook, "OMP_NUM_THREADS"):
        hook.record("pyarrow", "OMP_NUM_THREADS", _int(os.environ.get("OMP_NUM_THREADS")), "kept")
        return
    call(pa.set_cpu_count, n)
    hook.record("pyarrow", "pyarrow.set_cpu_count", n, "sized")


def _cv2(hook: Hook, cv2: Any) -> None:
    n = hook.resolve()
    watch_setter(hook, cv2, "setNumThreads", "opencv", "cv2.setNumThreads")
    call(cv2.setNumThreads, n)
    hook.record("opencv", "cv2.setNumThreads", n, "sized")


def _duckdb(hook: Hook, duckdb: Any) -> None:
    n = hook.resolve()
    connect = getattr(duckdb, "connect", None)
    if connect is None or getattr(connect, "__oversub_original__", None):
        return

    def sized_connect(*args: Any, **kwargs: Any) -> Any:
        config = kwargs.get("config")
        if config is None or (isinstance(config, dict) and "threads" not in config):
            kwargs["config"] = {**(config or {}), "threads": hook.threads or n}
            hook.record("duckdb", "connect(config={'threads': T})", hook.threads or n, "sized")
        elif isinstance(config, dict):
            hook.record("duckdb", "config threads", _int(str(config["threads"])), "kept")
        return connect(*args, **kwargs)

    sized_connect.__oversub_original__ = connect  # type: ignore[attr-defined]
    sized_connect.__doc__ = connect.__doc__
    duckdb.connect = sized_connect


def _numba(hook: Hook, numba: Any) -> None:
    hook.resolve()
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    if parallel is None:
        return
    watch_setter(hook, numba, "set_num_threads", "numba", "numba.set_num_threads")
    if _user_var(hook, "NUMBA_NUM_THREADS"):
        hook.record("numba", "NUMBA_NUM_THREADS", _int(os.environ["NUMBA_NUM_THREADS"]), "kept")
        return
    launch = getattr(parallel, "_launch_threads", None)
    if launch is None or getattr(launch, "__oversub_original__", None):
        return

    def launched() -> Any:
        result = launch()
        if not getattr(_local, "numba", False) and "numba" not in hook.records:
            _local.numba = True
            try:
                limit = getattr(sys.modules.get("numba.core.config"), "NUMBA_NUM_THREADS", None)
                n = hook.threads or hook.resolve()
                n = min(n, limit) if isinstance(limit, int) else n
                call(numba.set_num_threads, n)
                hook.record("numba", "numba.set_num_threads", n, "sized")
            except Exception as exc:
                hook.fault("numba.set_num_threads", exc)
            finally:
                _local.numba = False
        return result

    launched.__oversub_original__ = launch  # type: ignore[attr-defined]
    parallel._launch_threads = launched  # type: ignore[attr-defined]


def _numexpr(hook: Hook, numexpr: Any) -> None:
    hook.resolve()
    watch_setter(hook, numexpr, "set_num_threads", "numexpr", "numexpr.set_num_threads")


APPLIERS: dict[str, Any] = {
    "torch": _torch,
    "onnxruntime": _onnxruntime,
    "pyarrow": _pyarrow,
    "cv2": _cv2,
    "duckdb": _duckdb,
    "numba": _numba,
    "numexpr": _numexpr,
}
"""module -> what is done once it has been imported."""


def resize_loaded(hook: Hook, n: int) -> None:
    """Every pool already loaded in this process at `n` threads, except those the program
    sized itself (a forked worker, a parent that starts workers, a late `oversub.auto`)."""
    main = threading.current_thread() is threading.main_thread()
    torch = sys.modules.get("torch")
    if torch is not None and _not_kept(hook, "torch") and main:
        safely(hook, "torch.set_num_threads", lambda: call(torch.set_num_threads, n))
        hook.record("torch", "torch.set_num_threads", n, "sized")
    pa = sys.modules.get("pyarrow")
    if pa is not None and _not_kept(hook, "pyarrow"):
        safely(hook, "pyarrow.set_cpu_count", lambda: call(pa.set_cpu_count, n))
        hook.record("pyarrow", "pyarrow.set_cpu_count", n, "sized")
    numexpr = sys.modules.get("numexpr")
    if numexpr is not None and _not_kept(hook, "numexpr"):
        safely(hook, "numexpr.set_num_threads", lambda: call(numexpr.set_num_threads, n))
        hook.record("numexpr", "numexpr.set_num_threads", n, "sized")
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and _not_kept(hook, "opencv"):
        safely(hook, "cv2.setNumThreads", lambda: call(cv2.setNumThreads, n))
        hook.record("opencv", "cv2.setNumThreads", n, "sized")
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    numba = sys.modules.get("numba")
    launched = getattr(parallel, "_is_initialized", False)
    if numba is not None and launched and main and _not_kept(hook, "numba"):
        safely(hook, "numba.set_num_threads", lambda: call(numba.set_num_threads, n))
        hook.record("numba", "numba.set_num_threads", n, "sized")
    if main and any(name in sys.modules for name in ("numpy", "scipy", "torch", "sklearn")):
        safely(hook, "threadpoolctl.threadpool_limits", lambda: _threadpool_limits(hook, n))


_limiter: Any = None


def _not_kept(hook: Hook, runtime: str) -> bool:
    return bool(hook.records.get(runtime, {}).get("state") != "kept")


def _threadpool_limits(hook: Hook, n: int) -> None:
    global _limiter
    import importlib
    import importlib.util

    if importlib.util.find_spec("threadpoolctl") is None:
        hook.record("blas", "threadpoolctl", None, "failed", note="threadpoolctl not installed")
        return
    threadpoolctl: Any = importlib.import_module("threadpoolctl")
    _limiter = threadpoolctl.threadpool_limits(limits=n)
    hook.record("blas", "threadpoolctl.threadpool_limits", n, "sized")
