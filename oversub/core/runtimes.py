"""The runtimes that own threads, and the knob that really sizes each (docs/pools.md).

A thread's owner is found from outside (`oversub.probe.owners`): its name, or the shared
object whose code it is blocked in. This catalogue says, per owner, how to recognise it,
what its waiting threads do (spin or sleep: what oversubscribing it costs) and which knob
sizes it: only that knob is ever offered as its fix. Pure data, standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, NamedTuple

from oversub.core.libraries import (
    library_key,
    library_of,
    object_of,
    split_vendored,
    vendor_of,
    vendored_key,
)

if TYPE_CHECKING:
    from oversub.core.results import OwnerCount

UNATTRIBUTED = "unattributed"
"""The owner of a thread no evidence names (never guessed from the mapped libraries)."""

Waits = Literal["spin", "sleep", "none", "unknown"]
"""What an owner's threads do when oversubscribed: "spin" (waiting threads burn CPU: OpenMP
teams, ORT's pool; costs multiples), "sleep" (they block: costs a few percent), "none" (not
a compute pool: the interpreter, communication and allocator threads; no thread cap),
"unknown" (a library without a row: `libraries`)."""


class Runtime(NamedTuple):
    """One owner of threads."""

    key: str
    """Stable id, in samples, JSON and recordings ("polars", "onnxruntime", ...)."""
    label: str
    """Human name for messages."""
    waits: Waits
    variables: tuple[str, ...] = ()
    """Environment variables that size its pool, read at start (the first is the one
    recommended); empty when none reaches it."""
    code: str | None = None
    """The call that sizes it from inside the process, with {t} for the threads."""
    names: tuple[str, ...] = ()
    """Prefixes of the names its threads carry (`/proc/PID/task/TID/comm`)."""
    objects: tuple[str, ...] = ()
    """Basename prefixes of the shared objects whose code its threads wait in."""
    dirs: tuple[str, ...] = ()
    """Directory names (a path component) of the objects whose code its threads wait in."""
    pool: str | None = None
    """The `pools.POOL_KINDS` key of the same runtime (live sizes, mapped-library
    fallback); None when oversub had no row for it before threads were attributed."""
    measured: str = ""
    """What oversubscribing it cost, measured (2 processes on 2 vCPUs), for the wording; quoted
    only where it was measured (`measured_with`), never for another program's pool."""
    caller: bool = True
    """Its size counts the calling thread (an OpenMP team, OpenBLAS, ORT's intra-op pool:
    size n runs n - 1 threads of its own); False when it runs n threads of its own (polars,
    Arrow, numexpr) while the caller waits."""
    drives: tuple[str, ...] = ()
    """Package directories (right under site-packages) whose presence in a process makes
    the OpenMP team there this library's (`openmp_driver`): the wheels vendor one libgomp
    under one soname, so the copy a team runs says which wheel loaded first, not whose
    team it is."""
    measured_with: str = ""
    """The pool (`pools` key) every process must map for `measured` to be quoted: the
    situation it was measured in ("torch": torch's own team); "" when the runtime alone is
    the situation."""


_TPC = "threadpoolctl.threadpool_limits({t})"

RUNTIMES: tuple[Runtime, ...] = (
    Runtime(
        "libgomp",
        "GNU OpenMP (libgomp)",
        "spin",
        ("OMP_NUM_THREADS",),
        _TPC,
        objects=("libgomp.", "libgomp-"),
        pool="libgomp",
        measured="10.6x slower for torch's team",
        measured_with="torch",
    ),
    Runtime(
        "libomp",
        "LLVM OpenMP (libomp)",
        "spin",
        ("OMP_NUM_THREADS",),
        _TPC,
        objects=("libomp.", "libomp-"),
        pool="libomp",
    ),
    Runtime(
        "libiomp5",
        "Intel OpenMP (libiomp5)",
        "spin",
        ("OMP_NUM_THREADS",),
        _TPC,
        objects=("libiomp5",),
        pool="libiomp5",
    ),
    Runtime(
        "openblas",
        "OpenBLAS",
        "spin",
        ("OPENBLAS_NUM_THREADS",),
        _TPC,
        objects=("libopenblas", "libscipy_openblas"),
        pool="openblas",
    ),
    Runtime(
        "mkl",
        "Intel MKL",
        "spin",
        ("MKL_NUM_THREADS",),
        _TPC,
        objects=("libmkl_",),
        pool="mkl",
    ),
    Runtime(
        "blis",
        "BLIS",
        "spin",
        ("BLIS_NUM_THREADS",),
        _TPC,
        objects=("libblis",),
        pool="blis",
    ),
    Runtime(
        "tbb",
        "oneTBB",
        "spin",
        (),
        "tbb.global_control(tbb.global_control.max_allowed_parallelism, {t})",
        objects=("libtbb.", "libtbb-", "libtbbmalloc"),
        pool="tbb",
    ),
    Runtime(
        "torch",
        "PyTorch inter-op pool",
        "sleep",
        (),
        "torch.set_num_interop_threads({t})",
        names=("pt_",),
        objects=("libtorch_cpu", "libc10.", "libtorch_python"),
        caller=False,
    ),
    Runtime(
        "onnxruntime",
        "ONNX Runtime intra-op pool",
        "spin",
        (),
        "SessionOptions.intra_op_num_threads = {t}",
        objects=("onnxruntime_pybind11_state", "libonnxruntime"),
        pool="onnxruntime",
        measured="1.21-1.57x slower",
    ),
    Runtime(
        "polars",
        "polars (rayon)",
        "sleep",
        ("POLARS_MAX_THREADS",),
        None,
        names=("polars-",),
        objects=("_polars_runtime", "polars.abi3"),
        measured="2 % slower",
        caller=False,
    ),
    Runtime(
        "pyarrow",
        "Arrow CPU pool (pyarrow)",
        "sleep",
        ("OMP_NUM_THREADS",),
        "pyarrow.set_cpu_count({t})",
        objects=("libarrow", "libparquet"),
        measured="2 % slower",
        caller=False,
    ),
    Runtime(
        "numexpr",
        "numexpr",
        "sleep",
        ("NUMEXPR_NUM_THREADS",),
        "numexpr.set_num_threads({t})",
        dirs=("numexpr",),
        measured="2 % slower",
        caller=False,
    ),
    Runtime(
        "numba",
        "numba parallel team",
        "sleep",
        ("NUMBA_NUM_THREADS",),
        "numba.set_num_threads({t})",
        dirs=("numba",),
        pool="numba",
        measured="8 % slower",
    ),
    Runtime(
        "tokenizers",
        "HF tokenizers (rayon)",
        "sleep",
        ("RAYON_NUM_THREADS",),
        None,
        dirs=("tokenizers",),
        measured="1.01-1.11x slower",
        caller=False,
    ),
    Runtime(
        "opencv",
        "OpenCV's pool",
        "sleep",
        ("OPENCV_FOR_THREADS_NUM",),
        "cv2.setNumThreads({t})",
        dirs=("cv2",),
        measured="1.5-2.0x slower",
    ),
    Runtime(
        "xgboost",
        "XGBoost's OpenMP team",
        "spin",
        ("OMP_NUM_THREADS",),
        "nthread={t} in its parameters (n_jobs={t} in its estimators)",
        dirs=("xgboost",),
        measured="31-35x slower",
        drives=("xgboost",),
    ),
    Runtime(
        "lightgbm",
        "LightGBM's OpenMP team",
        "spin",
        ("OMP_NUM_THREADS",),
        "num_threads={t} in its parameters (n_jobs={t} in its estimators)",
        dirs=("lightgbm",),
        measured="1.4-1.7x slower",
        drives=("lightgbm",),
    ),
    Runtime(
        "faiss",
        "faiss's OpenMP team",
        "spin",
        ("OMP_NUM_THREADS",),
        "faiss.omp_set_num_threads({t})",
        dirs=("faiss",),
        measured="1.12-1.17x slower",
        drives=("faiss",),
    ),
    Runtime(
        "sklearn",
        "scikit-learn's OpenMP team",
        "spin",
        ("OMP_NUM_THREADS",),
        'threadpoolctl.threadpool_limits({t}, user_api="openmp")',
        measured="22-23x slower",
        drives=("sklearn",),
    ),
    Runtime(
        # `oversub stress`'s own team (`run.stressload`): it names its threads, waits at its
        # barrier as libgomp does, and is sized by OMP_NUM_THREADS when `--threads` is not
        # given, so its finding, `recommend`'s exports and `oversub run` work on it as on an
        # OpenMP team; no variable of its own reaches any other program's exports.
        "stress",
        "oversub stress team",
        "spin",
        ("OMP_NUM_THREADS",),
        None,
        names=("stress-team-",),
        measured="1.7-2.4x slower, 3.0-3.9x with 4 processes",
        caller=False,
    ),
    Runtime("gloo", "gloo communication (torch.distributed)", "none", names=("gloo_", "pt_gloo")),
    Runtime("jemalloc", "jemalloc background", "none", names=("jemalloc_bg_thd",)),
    Runtime(
        "python",
        "Python interpreter",
        "none",
        objects=("libpython", "python"),
    ),
    Runtime("program", "the program's own threads", "none"),
)
"""Every owner, most specific first: a thread name is matched against `names` in this order
(gloo's `pt_gloo_*` before torch's `pt_*`)."""

OPENMP: frozenset[str] = frozenset({"libgomp", "libomp", "libiomp5"})
"""The OpenMP runtimes: a copy vendored by a package is that package's OpenMP team."""


@lru_cache(maxsize=512)
def _dynamic(key: str) -> Runtime | None:
    """The row of an owner no static row names: a library without a row (`lib:PATH`: its
    name, no knob known) or an OpenMP runtime vendored by a package without a row
    (`libgomp@foo`: the runtime's knobs, labelled as the package's team)."""
    vendored = split_vendored(key)
    if vendored is not None:
        base = _STATIC.get(vendored[0])
        if base is None or base.key not in OPENMP:
            return None
        short = base.label.rsplit("(", 1)[-1].rstrip(")")
        label = f"{vendored[1]}'s OpenMP team ({short})"
        # Its cost is not the one measured for another program's team.
        return base._replace(key=key, label=label, pool=None, measured="")
    path = object_of(key)
    if path is None:
        return None
    return Runtime(key, library_of(path).name, "unknown", caller=False)


class _Catalogue(Mapping[str, Runtime]):
    """Owner key -> row: the static rows, and the rows `_dynamic` makes for the keys of
    libraries without a row (iterating gives the static rows only)."""

    def __init__(self, rows: Mapping[str, Runtime]) -> None:
        self._rows = rows

    def __getitem__(self, key: str) -> Runtime:
        row = self._rows.get(key)
        if row is None:
            row = _dynamic(key)
        if row is None:
            raise KeyError(key)
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


_STATIC: Mapping[str, Runtime] = {r.key: r for r in RUNTIMES}
RUNTIMES_BY_KEY: Mapping[str, Runtime] = _Catalogue(_STATIC)

_NAME_ORDER: tuple[Runtime, ...] = tuple(
    sorted((r for r in RUNTIMES if r.names), key=lambda r: -max(len(n) for n in r.names))
)

NOT_EVIDENCE_NAMES: tuple[str, ...] = ("pt_main_thread",)
"""Thread names that say nothing about the owner: torch renames the main thread."""

SYSTEM_OBJECTS: tuple[str, ...] = (
    "libc.so",
    "libc-",
    "libpthread",
    "ld-linux",
    "ld-musl",
    "libc.musl",
    "libstdc++",
    "libgcc_s",
    "libm.so",
    "librt.so",
    "libdl.so",
    "[vdso]",
)
"""Objects every runtime calls into to wait (the C library, the C++ runtime): a thread
blocked there is attributed by the first return address outside them."""


def owner_of_name(comm: str) -> str | None:
    """The owner a thread name proves, or None (a name inherited from the process, or one
    no runtime gives its threads)."""
    if comm.startswith(NOT_EVIDENCE_NAMES):
        return None
    for runtime in _NAME_ORDER:
        if comm.startswith(runtime.names):
            return runtime.key
    return None


def is_system_object(path: str) -> bool:
    """True for the C library and its kin (see SYSTEM_OBJECTS)."""
    return path.rsplit("/", 1)[-1].startswith(SYSTEM_OBJECTS)


_PACKAGE_ROOTS = frozenset({"site-packages", "dist-packages"})


def owner_of_object(path: str) -> str | None:
    """The owner whose code a shared object (or executable) holds, by its path."""
    base = path.rsplit("/", 1)[-1]
    # A package directory counts only right under site-packages (a user named "numba" has
    # /home/numba/... in every path).
    top = _package_tops(path)
    for runtime in RUNTIMES:
        if runtime.dirs and any(d in top for d in runtime.dirs):
            return runtime.key
    for runtime in RUNTIMES:
        if runtime.objects and base.startswith(runtime.objects):
            return runtime.key
    return None


def _package_tops(path: str) -> list[str]:
    """The path components right under site-packages (or dist-packages) in `path`."""
    parts = path.split("/")
    return [parts[i + 1] for i, p in enumerate(parts[:-2]) if p in _PACKAGE_ROOTS]


_DRIVERS: tuple[Runtime, ...] = tuple(r for r in RUNTIMES if r.drives)
_IMPORTED_BY_OTHERS = frozenset({"sklearn"})
"""Drivers that other drivers import (XGBoost's and LightGBM's estimators import
scikit-learn): beside another, not the team's."""


def openmp_driver(paths: Sequence[str]) -> str | None:
    """The library whose OpenMP team a process runs, from the paths of its mapped code: the
    one row whose `drives` package it maps (scikit-learn only when no other), None when
    there is none, several, or torch (its team keeps the runtime's key and torch's call)."""
    tops: set[str] = set()
    for path in paths:
        if path.rsplit("/", 1)[-1].startswith("libtorch_cpu"):
            return None
        tops.update(_package_tops(path))
    found = [r.key for r in _DRIVERS if any(d in tops for d in r.drives)]
    specific = [k for k in found if k not in _IMPORTED_BY_OTHERS]
    if len(specific) == 1:
        return specific[0]
    return found[0] if len(found) == 1 else None


def is_openmp_owner(key: str) -> bool:
    """An OpenMP runtime's key, or such a runtime vendored by a package (`libgomp@foo`)."""
    vendored = split_vendored(key)
    return (vendored[0] if vendored is not None else key) in OPENMP


def owner_of_row(path: str) -> str | None:
    """`owner_of_object`, with an OpenMP runtime vendored by a package without a row of its
    own (`<package>.libs/libgomp-*.so`) as that package's team (`libgomp@package`)."""
    owner = owner_of_object(path)
    if owner in OPENMP:
        vendor = vendor_of(path)
        if vendor is not None:
            return vendored_key(owner, vendor)
    return owner


PROGRAM = "program"
"""The owner of threads started by the program's own executable (not an interpreter's)."""


def owner_of_code(path: str, exe: str | None = None) -> str | None:
    """The owner of a thread whose code (its start routine, or where it waits) is the
    object at `path`: a row's key (an OpenMP runtime vendored by a package without a row
    as that package's team, `libgomp@foo`); `PROGRAM` for the program's executable `exe`
    when it is no interpreter; else the library the path names (`libraries.library_key`).
    None for the C library and its kin (`is_system_object`) and for anonymous code."""
    if not path.startswith("/") or is_system_object(path):
        return None
    owner = owner_of_row(path)
    if owner is not None:
        return owner
    if exe is not None and path == exe:
        return PROGRAM
    return library_key(path)


def label(key: str) -> str:
    """The human name of an owner key ("unattributed" and unknown keys as they are)."""
    runtime = RUNTIMES_BY_KEY.get(key)
    return runtime.label if runtime is not None else key


def waits(key: str) -> Waits | None:
    """What the owner's threads do when oversubscribed; None for unknown owners."""
    runtime = RUNTIMES_BY_KEY.get(key)
    return runtime.waits if runtime is not None else None


def describe(counts: Sequence[OwnerCount]) -> str:
    """ "ONNX Runtime intra-op pool: 2 busy, OpenBLAS: 1 idle, Python interpreter: 1"."""
    parts = []
    for c in counts:
        if c.busy and c.busy == c.threads:
            n = f"{c.busy} busy"
        elif c.busy:
            n = f"{c.threads} ({c.busy} busy)"
        elif not c.ran:
            n = f"{c.threads} idle"
        else:
            n = str(c.threads)
        parts.append(f"{label(c.owner)}: {n}")
    return ", ".join(parts)
