"""oversub's start-up hook: sizes every thread pool of this Python process to its share.

`oversub run` puts this file's directory first on PYTHONPATH and the plan in OVERSUB_RUN_PLAN
(JSON), so it is the `sitecustomize` of every Python process of the tree, spawned,
forkserver or forked, whether or not oversub is installed in that interpreter: it imports
the standard library only. `import oversub.auto` installs the same hook in-process
(`install`). docs/run.md is the reference; in short:

- a process's share: the plan's T (`--procs M`), or in the tree's own count (`--procs auto`
  without a launcher) the parent's share divided among the processes it runs at once;
  a forked child and a DataLoader worker get the worker plan (1 thread), and a process that
  starts workers gives up one thread per live worker;
- the thread variables oversub manages are set to the share before a library reads them
  (the first import of a library decides the share), never one the user set;
- the code-only knobs are applied when, and only if, their module is imported (a
  `sys.meta_path` finder that wraps the loader's `exec_module`): torch, ONNX Runtime
  sessions whose options leave the thread count at 0, pyarrow, OpenCV, DuckDB, numba, and
  threadpoolctl for BLAS/OpenMP pools already loaded; a setting the program makes itself
  is kept and recorded as kept;
- what it did goes to a small JSON file per process in the run's private directory, which
  `oversub run` reads at the end;
- a fault never breaks the program: one line on stderr names what could not be applied.

The `sitecustomize` this file shadows (found further on sys.path) runs after it, as Python
would have run it.
"""

from __future__ import annotations

import json
import os
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

PLAN_ENV = "OVERSUB_RUN_PLAN"
"""The variable that carries the plan (JSON) to every process of the tree."""
PLAN_VERSION = 1
MAX_PLAN_BYTES = 65536
"""A longer OVERSUB_RUN_PLAN is refused: it is no plan oversub wrote."""
MAX_VALUE = 65536
"""Thread counts above this are refused (the budget's own bound)."""

WATCHED: tuple[str, ...] = (
    "numpy",
    "scipy",
    "sklearn",
    "pandas",
    "torch",
    "onnxruntime",
    "pyarrow",
    "polars",
    "numexpr",
    "numba",
    "cv2",
    "duckdb",
    "tensorflow",
    "jax",
    "jaxlib",
    "xgboost",
    "lightgbm",
    "faiss",
)
"""Top-level modules whose first import decides this process's share: each loads a native
pool (or NumPy, which loads BLAS) that reads the thread variables when it loads."""

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

_HELPERS: tuple[bytes, ...] = (
    b"multiprocessing.resource_tracker",
    b"multiprocessing.semaphore_tracker",
    b"multiprocessing.forkserver",
    b"loky.backend.resource_tracker",
)
"""Command-line marks of processes that start beside the workers and compute nothing."""

_DATALOADER = "torch.utils.data"
"""The module of DataLoader's worker loop: a multiprocessing child running it is a worker."""

_hook: Hook | None = None
_lock = threading.RLock()


# --------------------------------------------------------------------------- plan


def parse_plan(text: str) -> dict[str, Any]:
    """The plan of OVERSUB_RUN_PLAN, checked field by field; ValueError when it is not one."""
    if len(text) > MAX_PLAN_BYTES:
        raise ValueError(f"{PLAN_ENV} is longer than {MAX_PLAN_BYTES} characters")
    plan = json.loads(text)
    if not isinstance(plan, dict) or plan.get("v") != PLAN_VERSION:
        raise ValueError(f"{PLAN_ENV} is not a version {PLAN_VERSION} plan")
    for key, low in (("n", 1), ("w", 0), ("top", 0)):
        _count(plan, key, low, required=True)
    for key, low in (("t", 1), ("pb", 1), ("pp", 1)):
        _count(plan, key, low, required=False)
    variables = plan.get("set")
    if not isinstance(variables, dict) or len(variables) > 64:
        raise ValueError(f"{PLAN_ENV}: 'set' is not a table of variables")
    for name, value in variables.items():
        if not (isinstance(name, str) and isinstance(value, str) and value.isdigit()):
            raise ValueError(f"{PLAN_ENV}: 'set' holds {name!r}")
    for key in ("dir", "role"):
        if plan.get(key) is not None and not isinstance(plan[key], str):
            raise ValueError(f"{PLAN_ENV}: {key!r} is not a string")
    if plan.get("role") not in (None, "worker"):
        raise ValueError(f"{PLAN_ENV}: unknown role {plan['role']!r}")
    return plan


def _count(plan: dict[str, Any], key: str, low: int, *, required: bool) -> None:
    value = plan.get(key)
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_VALUE:
        raise ValueError(f"{PLAN_ENV}: {key!r} is not a whole number >= {low}")


# --------------------------------------------------------------------------- /proc


def _read(path: str, limit: int = 4096) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _children(pid: int) -> list[int]:
    """The live children of `pid` (every thread's children file), at most 4,096."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks[:4096]:
        try:
            text = _read(f"/proc/{pid}/task/{tid}/children", 65536)
        except OSError:
            continue
        found += [int(word) for word in text.split() if word.isdigit()]
        if len(found) >= 4096:
            break
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return _read(f"/proc/{pid}/cmdline")
    except OSError:
        return b""


def _start_ticks() -> int | None:
    """This process's start time (field 22 of /proc/self/stat): with the pid, its identity."""
    try:
        stat = _read("/proc/self/stat", 1024)
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _is_helper(cmdline: bytes) -> bool:
    return any(mark in cmdline for mark in _HELPERS)


# --------------------------------------------------------------------------- the hook


class Hook:
    """The plan applied to this process: its role, its share and what it did."""

    def __init__(self, plan: dict[str, Any], source: str) -> None:
        self.plan = plan
        self.source = source
        self.n: int = plan["n"]
        self.cap: int | None = plan.get("t")
        self.workers: int = plan["w"]
        self.set_by_parent: dict[str, str] = dict(plan["set"])
        """The managed variables and the value oversub's plan put in them above this process."""
        self.expected: dict[str, str] = dict(self.set_by_parent)
        """The same, updated with what this process set itself."""
        self.dir: str | None = plan.get("dir")
        self.pid = os.getpid()
        self.role = "root" if os.getppid() == plan["top"] else "rank"
        if plan.get("role") == "worker":
            self.role = "worker"
        if _is_helper(_cmdline(self.pid)):
            self.role = "helper"
        self.budget: int | None = None
        self.threads: int | None = None
        self.siblings: int | None = None
        self.user: dict[str, str] = {}
        """Managed variables whose value is not the one oversub's plan set: the user's."""
        self.records: dict[str, dict[str, Any]] = {}
        self.faults: list[str] = []
        self.worker_pids: set[int] = set()
        self.resolving = False

    # ----------------------------------------------------------------- the share

    def resolve(self) -> int:
        """This process's threads, decided once (at the first library import, a fork or
        the start of a child), and the managed variables set to it."""
        if self.threads is not None:
            return self.threads
        with _lock:  # two threads importing two libraries at once decide it once
            return self._decide()

    def _decide(self) -> int:
        if self.threads is not None:
            return self.threads
        if self.role in ("worker", "helper"):
            self.budget = 1
        elif self.cap is not None:
            self.budget = self.cap + self.workers
        elif self.role == "root":
            self.budget = self.n
        else:
            parent = self.plan.get("pb") or self.n
            self.siblings = self._siblings()
            self.budget = max(1, parent // self.siblings)
        self.threads = self.own()
        self.export()
        self.record_variables()
        return self.threads

    def record_variables(self) -> None:
        """The variables this process set, as a record (they size what loads from now on)."""
        mine = [n for n in self.expected if n not in self.user]
        if mine:
            self.record("variables", f"{mine[0]} & co", self.threads, "sized")
        else:
            self.report()

    def own(self) -> int:
        assert self.budget is not None
        cap = self.cap if self.cap is not None and self.role in ("root", "rank") else self.budget
        return max(1, min(cap, self.budget - self._live_workers()))

    def _siblings(self) -> int:
        """The processes this one shares its parent's share with: itself and every live
        child of its parent that is neither a helper nor a forked copy of the parent (a
        worker)."""
        parent = os.getppid()
        mine = _cmdline(parent)
        count = 1
        for pid in _children(parent):
            if pid == self.pid:
                continue
            line = _cmdline(pid)
            if not line or _is_helper(line) or line == mine or self._registered_worker(pid):
                continue
            count += 1
        return count

    def _registered_worker(self, pid: int) -> bool:
        if self.dir is None:
            return False
        try:
            record = json.loads(_read(os.path.join(self.dir, f"{pid}.json"), 65536))
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("role") in ("worker", "helper")

    def _live_workers(self) -> int:
        if self.role not in ("root", "rank"):
            return 0
        mine = _cmdline(self.pid)
        live = 0
        for pid in _children(self.pid):
            if pid in self.worker_pids or (_cmdline(pid) == mine and mine):
                live += 1
        return live

    def export(self) -> None:
        """The managed variables at this process's share, for the libraries it loads from
        now on and for its children; the plan its children read."""
        value = str(self.threads)
        mine: dict[str, str] = {}
        for name, expected in self.expected.items():
            now = os.environ.get(name)
            if name in self.user or (now is not None and now != expected):
                self.user[name] = now or ""  # someone between oversub and here set it: theirs
                continue
            os.environ[name] = value
            self.expected[name] = value
            mine[name] = value
        child = dict(self.plan, set=mine, pb=self.budget, pp=self.pid)
        child.pop("role", None)
        os.environ[PLAN_ENV] = json.dumps(child, separators=(",", ":"))

    def regrow(self) -> None:
        """After this process started or lost workers: its own threads, applied to what is
        loaded (a parent that forks DataLoader workers gives up one thread for each)."""
        if self.threads is None or self.budget is None:
            return
        own = self.own()
        if own == self.threads:
            return
        self.threads = own
        self.export()
        self.record_variables()
        resize_loaded(self, own)

    # ----------------------------------------------------------------- records

    def record(self, runtime: str, knob: str, value: int | None, state: str, **extra: Any) -> None:
        entry: dict[str, Any] = {"knob": knob, "value": value, "state": state}
        entry.update(extra)
        self.records[runtime] = entry
        self.report()

    def fault(self, what: str, exc: BaseException) -> None:
        """One line on stderr naming what could not be applied; the program goes on."""
        reason = f"{type(exc).__name__}: {exc}"
        line = f"could not apply {what} in pid {os.getpid()}: {reason}"
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)[:300]
        self.faults.append(line)
        try:  # a closed stderr must not break the program
            sys.stderr.write(f"oversub: {line}; the program goes on\n")
            sys.stderr.flush()
        except Exception:
            pass
        self.report()

    def report(self) -> None:
        """This process's record in the run's directory (written whole: a temporary file
        renamed over the last one)."""
        if self.dir is None:
            return
        record = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "start": _start_ticks(),
            "role": self.role,
            "budget": self.budget,
            "threads": self.threads,
            "siblings": self.siblings,
            "python": ".".join(str(v) for v in sys.version_info[:3]),
            "user_vars": self.user,
            "records": self.records,
            "faults": self.faults[-20:],
        }
        path = os.path.join(self.dir, f"{os.getpid()}.json")
        temporary = f"{path}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f, separators=(",", ":"))
            os.replace(temporary, path)
        except (OSError, TypeError, ValueError):
            pass  # the directory is gone (oversub ended): nobody reads it any more


# --------------------------------------------------------------------------- knobs


def _user_var(hook: Hook, *names: str) -> str | None:
    """The first of `names` the user set (a value oversub did not put there)."""
    for name in names:
        if name in hook.user:
            return name
        if name not in hook.set_by_parent and os.environ.get(name, "").strip():
            return name
    return None


def _watch_setter(hook: Hook, module: Any, attr: str, runtime: str, knob: str) -> None:
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


def _call(function: Any, *args: Any) -> Any:
    """Call one of the watched setters as oversub (not recorded as the user's)."""
    _local.inside = True
    try:
        return function(*args)
    finally:
        _local.inside = False


def _torch(hook: Hook, torch: Any) -> None:
    n = hook.resolve()
    _watch_setter(hook, torch, "set_num_threads", "torch", "torch.set_num_threads")
    _watch_setter(
        hook, torch, "set_num_interop_threads", "torch-interop", "torch.set_num_interop_threads"
    )
    user = _user_var(hook, "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    if user:
        hook.record("torch", user, _int(os.environ.get(user)), "kept")
    else:
        _call(torch.set_num_threads, n)
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
    _watch_setter(hook, pa, "set_cpu_count", "pyarrow", "pyarrow.set_cpu_count")
    if _user_var(hook, "OMP_NUM_THREADS"):
        hook.record("pyarrow", "OMP_NUM_THREADS", _int(os.environ.get("OMP_NUM_THREADS")), "kept")
        return
    _call(pa.set_cpu_count, n)
    hook.record("pyarrow", "pyarrow.set_cpu_count", n, "sized")


def _cv2(hook: Hook, cv2: Any) -> None:
    n = hook.resolve()
    _watch_setter(hook, cv2, "setNumThreads", "opencv", "cv2.setNumThreads")
    _call(cv2.setNumThreads, n)
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
    _watch_setter(hook, numba, "set_num_threads", "numba", "numba.set_num_threads")
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
                _call(numba.set_num_threads, n)
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
    _watch_setter(hook, numexpr, "set_num_threads", "numexpr", "numexpr.set_num_threads")


def _resolving(hook: Hook, module: Any) -> None:
    hook.resolve()


def _multiprocessing(hook: Hook, module: Any) -> None:
    """multiprocessing's children: a DataLoader worker gets the worker plan in the child
    (`_bootstrap`, every start method), and its parent gives up a thread for it (`start`)."""
    process = sys.modules.get("multiprocessing.process")
    base = getattr(process, "BaseProcess", None)
    if base is None or getattr(base.start, "__oversub_original__", None):
        return
    start, bootstrap = base.start, base._bootstrap

    def started(self: Any) -> Any:
        worker = _is_worker_target(self)
        if worker:
            self._oversub_worker = True
        saved = os.environ.get(PLAN_ENV)
        if worker and saved is not None:
            hook.resolve()
            os.environ[PLAN_ENV] = json.dumps(dict(json.loads(os.environ[PLAN_ENV]), role="worker"))
        try:
            return start(self)
        finally:
            if worker and saved is not None:
                os.environ[PLAN_ENV] = saved
            if worker and self.pid:
                hook.worker_pids.add(self.pid)
                _safely(hook, "the parent's threads after starting a worker", hook.regrow)

    def bootstrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_oversub_worker", False) or _is_worker_target(self):
            _safely(hook, "the worker plan", lambda: become_worker(hook))
        elif hook.role == "worker" and hook.cap is not None and hook.pid == os.getpid():
            # A process multiprocessing forked to run anything but a DataLoader worker is
            # one of the plan's M processes (`--procs M`): T threads, not the worker plan.
            _safely(hook, "the plan's threads", lambda: become_rank(hook))
        return bootstrap(self, *args, **kwargs)

    started.__oversub_original__ = start  # type: ignore[attr-defined]
    bootstrapped.__oversub_original__ = bootstrap  # type: ignore[attr-defined]
    base.start = started
    base._bootstrap = bootstrapped


def _is_worker_target(process: Any) -> bool:
    target = getattr(process, "_target", None)
    return str(getattr(target, "__module__", "") or "").startswith(_DATALOADER)


APPLIERS: dict[str, Any] = {
    "torch": _torch,
    "onnxruntime": _onnxruntime,
    "pyarrow": _pyarrow,
    "cv2": _cv2,
    "duckdb": _duckdb,
    "numba": _numba,
    "numexpr": _numexpr,
    "multiprocessing": _multiprocessing,
}
"""module -> what is done once it has been imported (the others of WATCHED only resolve)."""


def _int(value: str | None) -> int | None:
    text = (value or "").split(",")[0].strip()
    return int(text) if text.isdigit() else None


def _safely(hook: Hook, what: str, action: Any) -> None:
    try:
        action()
    except Exception as exc:
        hook.fault(what, exc)


# --------------------------------------------------------------------------- loaded pools


def resize_loaded(hook: Hook, n: int) -> None:
    """Every pool already loaded in this process at `n` threads, except those the program
    sized itself (a forked worker, a parent that starts workers, a late `oversub.auto`)."""
    main = threading.current_thread() is threading.main_thread()
    torch = sys.modules.get("torch")
    if torch is not None and _not_kept(hook, "torch") and main:
        _safely(hook, "torch.set_num_threads", lambda: _call(torch.set_num_threads, n))
        hook.record("torch", "torch.set_num_threads", n, "sized")
    pa = sys.modules.get("pyarrow")
    if pa is not None and _not_kept(hook, "pyarrow"):
        _safely(hook, "pyarrow.set_cpu_count", lambda: _call(pa.set_cpu_count, n))
        hook.record("pyarrow", "pyarrow.set_cpu_count", n, "sized")
    numexpr = sys.modules.get("numexpr")
    if numexpr is not None and _not_kept(hook, "numexpr"):
        _safely(hook, "numexpr.set_num_threads", lambda: _call(numexpr.set_num_threads, n))
        hook.record("numexpr", "numexpr.set_num_threads", n, "sized")
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and _not_kept(hook, "opencv"):
        _safely(hook, "cv2.setNumThreads", lambda: _call(cv2.setNumThreads, n))
        hook.record("opencv", "cv2.setNumThreads", n, "sized")
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    numba = sys.modules.get("numba")
    launched = getattr(parallel, "_is_initialized", False)
    if numba is not None and launched and main and _not_kept(hook, "numba"):
        _safely(hook, "numba.set_num_threads", lambda: _call(numba.set_num_threads, n))
        hook.record("numba", "numba.set_num_threads", n, "sized")
    if main and any(name in sys.modules for name in ("numpy", "scipy", "torch", "sklearn")):
        _safely(hook, "threadpoolctl.threadpool_limits", lambda: _threadpool_limits(hook, n))


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


def become_worker(hook: Hook) -> None:
    """The worker plan in this process (a forked child, a DataLoader worker): 1 thread."""
    if hook.role == "worker" and hook.threads == 1:
        return
    hook.role = "worker"
    hook.budget, hook.threads, hook.siblings = 1, 1, None
    hook.worker_pids = set()
    hook.export()
    hook.record_variables()
    resize_loaded(hook, 1)


def become_rank(hook: Hook) -> None:
    """A forked child that is one of the plan's M processes: the plan's T threads."""
    assert hook.cap is not None
    hook.role = "rank"
    hook.budget = hook.cap + hook.workers
    hook.threads = hook.own()
    hook.export()
    hook.record_variables()
    resize_loaded(hook, hook.threads)


def _after_fork_in_child() -> None:
    hook = _hook
    if hook is None:
        return
    hook.pid = os.getpid()
    hook.records = {k: v for k, v in hook.records.items() if v.get("state") == "kept"}
    hook.faults = []
    _safely(hook, "the worker plan", lambda: become_worker(hook))


def _after_fork_in_parent() -> None:
    hook = _hook
    if hook is not None and hook.threads is not None:
        _safely(hook, "the parent's threads after a fork", hook.regrow)


# --------------------------------------------------------------------------- imports


class _Finder:
    """A sys.meta_path finder that runs the hook's applier after a watched module's own
    code, and decides the process's share before it (the library reads the variables
    then). It finds nothing itself: the other finders find the module."""

    def __init__(self, hook: Hook) -> None:
        self.hook = hook
        self.pending = set(WATCHED) | set(APPLIERS)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.pending:
            return None
        self.pending.discard(name)
        if name in WATCHED:
            _safely(self.hook, "the process's share", self.hook.resolve)
        applier = APPLIERS.get(name)
        if applier is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec
        hook = self.hook

        def exec_and_apply(module: Any) -> None:
            exec_module(module)
            _safely(hook, f"the knobs of {name}", lambda: applier(hook, module))

        try:  # noqa: SIM105 (contextlib costs every process 4 ms)
            loader.exec_module = exec_and_apply  # type: ignore[union-attr]
        except (AttributeError, TypeError):
            pass
        return spec


# --------------------------------------------------------------------------- install


def install(plan: dict[str, Any], source: str) -> Hook:
    """Apply `plan` to this process (once: a second call returns the hook in place)."""
    global _hook
    with _lock:
        if _hook is not None:
            return _hook
        hook = Hook(plan, source)
        _hook = hook
        sys.modules.setdefault("_oversub_hook", sys.modules[__name__])
        sys.meta_path.insert(0, _Finder(hook))
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(
                after_in_child=_after_fork_in_child, after_in_parent=_after_fork_in_parent
            )
        if hook.role in ("root", "worker", "helper") or hook.cap is not None:
            hook.resolve()
        else:
            hook.report()
        for name in list(APPLIERS):
            module = sys.modules.get(name)
            if module is not None:  # imported before the hook (oversub.auto late)
                _safely(hook, f"the knobs of {name}", lambda m=module, n=name: APPLIERS[n](hook, m))
        if any(name in sys.modules for name in WATCHED):
            resize_loaded(hook, hook.resolve())
        return hook


def active() -> Hook | None:
    """The hook applied in this process, if any (oversub run's, or oversub.auto's)."""
    other = sys.modules.get("_oversub_hook")
    if other is not None and other is not sys.modules.get(__name__):
        return getattr(other, "_hook", None)
    return _hook


def _chain() -> None:
    """Run the `sitecustomize` this file shadows, as Python would have (its errors are
    reported by site.py as its own)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _main() -> None:
    text = os.environ.get(PLAN_ENV)
    if text and sys.version_info >= (3, 7):
        try:
            plan = parse_plan(text)
        except (ValueError, TypeError) as exc:
            try:  # noqa: SIM105 (contextlib costs every process 4 ms)
                sys.stderr.write(f"oversub: ignoring {PLAN_ENV}: {exc}\n")
            except Exception:
                pass
        else:
            try:
                install(plan, "oversub run")
            except Exception as exc:
                try:  # noqa: SIM105 (contextlib costs every process 4 ms)
                    sys.stderr.write(f"oversub: could not install the hook: {exc!r}\n")
                except Exception:
                    pass
    _chain()


if __name__ == "sitecustomize":
    _main()
