"""One row per library that runs threads: how to spot it, what sizes it, what oversubscribing
it costs (docs/pools.md holds the measurements behind every row).

A library is found two ways, and its row says both:
- by its threads, read from outside (`oversub.probe.owners`): their names, or the shared
  object whose code they start or wait in (`names`, `objects`, `dirs`). The row's `label`,
  `waits`, `knob`, `code` and `measured` describe those threads: `core.runtimes` serves them.
- by the objects a process maps (`oversub.probe.native`), before any thread is attributed:
  `mapped` prefixes, the variables that size that pool (`reads`, first set wins) and the
  symbols that hold its live size. `core.pools` serves them.

For most rows both are the same pool. PyTorch runs two: the threads its row names (`pt_*`,
or waiting in libtorch) are its inter-op pool, while the mapped `libtorch_cpu` stands for its
intra-op pool, whose threads are its OpenMP runtime's team (attributed to `libgomp`, with
torch's measured cost: `measured_with`). Pure data, standard library only.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Waits = Literal["spin", "sleep", "none", "unknown"]
"""What a library's threads do when oversubscribed: "spin" (waiting threads burn CPU: OpenMP
teams, ORT's pool; costs multiples), "sleep" (they block: costs a few percent), "none" (not
a compute pool: the interpreter, communication and allocator threads; no thread cap),
"unknown" (a library without a row: `core.libraries`)."""

OPENMP: frozenset[str] = frozenset({"libgomp", "libomp", "libiomp5"})
"""The OpenMP runtimes: waiting team threads spin, a copy vendored by a package is that
package's OpenMP team, and a team started before `fork` hangs the child that uses it."""


class Library(NamedTuple):
    """One library that runs threads."""

    key: str
    """Stable id, in samples, JSON and recordings ("openblas", "polars", ...): a thread's owner
    and, when `mapped`, a mapped pool's key."""
    label: str
    """Human name of the threads its row names, for messages."""
    waits: Waits
    knob: str | None = None
    """The environment variable recommended to size its threads, read at start; None when
    no variable reaches them."""
    code: str | None = None
    """The call that sizes its threads from inside the process, with {t} for the threads."""
    names: tuple[str, ...] = ()
    """Prefixes of the names its threads carry (`/proc/PID/task/TID/comm`)."""
    objects: tuple[str, ...] = ()
    """Basename prefixes of the shared objects whose code its threads wait in."""
    dirs: tuple[str, ...] = ()
    """Directory names (right under site-packages) of the objects whose code its threads
    wait in."""
    measured: str = ""
    """What oversubscribing it cost, measured (2 processes on 2 vCPUs), for the wording; quoted
    only where it was measured (`measured_with`), never for another program's pool."""
    measured_with: str = ""
    """The mapped pool every process must map for `measured` to be quoted: the situation it
    was measured in ("torch": torch's own team); "" when the library alone is the situation."""
    caller: bool = True
    """Its size counts the calling thread (an OpenMP team, OpenBLAS, ORT's intra-op pool:
    size n runs n - 1 threads of its own); False when it runs n threads of its own (polars,
    Arrow, numexpr) while the caller waits."""
    drives: tuple[str, ...] = ()
    """Package directories (right under site-packages) whose presence in a process makes
    the OpenMP team there this library's (`runtimes.openmp_driver`): the wheels vendor one
    libgomp under one soname, so the copy a team runs says which wheel loaded first, not
    whose team it is."""
    mapped: tuple[str, ...] = ()
    """Basename prefixes of the objects whose presence in a process's maps means this pool
    (plain prefixes: no regex compiled at import); empty: not found that way."""
    reads: tuple[str, ...] = ()
    """With `mapped`: the environment variables that size the mapped pool, first set wins
    (empty: none reaches it)."""
    pool_label: str = ""
    """With `mapped`: the mapped pool's human name when it is not `label`."""
    pool_code: str | None = None
    """With `mapped`: the call that resizes the mapped pool from inside a process, with {t}
    for the threads; None when no call reaches it."""
    live_symbol: str | None = None
    """With `mapped`: exported int data symbol holding the pool's live size (read by
    `probe.livesizes`); None when the library keeps it hidden (docs/pools.md)."""
    live_started: str | None = None
    """With `mapped`: exported int data symbol that is non-zero while the pool's threads
    exist (OpenBLAS shuts them down around fork and starts them again at the next call)."""

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables recommended for its threads: `knob`, or none."""
        return (self.knob,) if self.knob else ()


_TPC = "threadpoolctl.threadpool_limits({t})"
"""Resizes BLAS and OpenMP runtimes already loaded in the calling process."""

CATALOGUE: tuple[Library, ...] = (
    Library(
        "libgomp",
        "GNU OpenMP (libgomp)",
        "spin",
        "OMP_NUM_THREADS",
        _TPC,
        objects=("libgomp.", "libgomp-"),
        measured="10.6x slower for torch's team",
        measured_with="torch",
        mapped=("libgomp.", "libgomp-"),
        reads=("OMP_NUM_THREADS",),
        pool_code=_TPC,
    ),
    Library(
        "libomp",
        "LLVM OpenMP (libomp)",
        "spin",
        "OMP_NUM_THREADS",
        _TPC,
        objects=("libomp.", "libomp-"),
        mapped=("libomp.", "libomp-"),
        reads=("OMP_NUM_THREADS",),
        pool_code=_TPC,
    ),
    Library(
        "libiomp5",
        "Intel OpenMP (libiomp5)",
        "spin",
        "OMP_NUM_THREADS",
        _TPC,
        objects=("libiomp5",),
        mapped=("libiomp5",),
        reads=("KMP_NUM_THREADS", "OMP_NUM_THREADS"),
        pool_code=_TPC,
    ),
    Library(
        "openblas",
        "OpenBLAS",
        "spin",
        "OPENBLAS_NUM_THREADS",
        _TPC,
        objects=("libopenblas", "libscipy_openblas"),
        mapped=("libopenblas", "libscipy_openblas"),
        reads=("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"),
        pool_code=_TPC,
        live_symbol="blas_cpu_number",
        live_started="blas_server_avail",
    ),
    Library(
        "mkl",
        "Intel MKL",
        "spin",
        "MKL_NUM_THREADS",
        _TPC,
        objects=("libmkl_",),
        mapped=("libmkl_rt", "libmkl_core", "libmkl_intel_thread", "libmkl_gnu_thread"),
        reads=("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
        pool_code=_TPC,
    ),
    Library(
        "blis",
        "BLIS",
        "spin",
        "BLIS_NUM_THREADS",
        _TPC,
        objects=("libblis",),
        mapped=("libblis",),
        reads=("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
        pool_code=_TPC,
    ),
    Library(
        "tbb",
        "oneTBB",
        "spin",
        None,
        "tbb.global_control(tbb.global_control.max_allowed_parallelism, {t})",
        objects=("libtbb.", "libtbb-", "libtbbmalloc"),
        mapped=("libtbb.", "libtbb-"),
    ),
    Library(
        "torch",
        "PyTorch inter-op pool",
        "sleep",
        None,
        "torch.set_num_interop_threads({t})",
        names=("pt_",),
        objects=("libtorch_cpu", "libc10.", "libtorch_python"),
        caller=False,
        mapped=("libtorch_cpu",),
        reads=("OMP_NUM_THREADS", "MKL_NUM_THREADS"),
        pool_label="PyTorch intra-op pool (libtorch_cpu)",
        pool_code="torch.set_num_threads({t})",
    ),
    Library(
        "onnxruntime",
        "ONNX Runtime intra-op pool",
        "spin",
        None,  # measured: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS do not reach its pool
        "SessionOptions.intra_op_num_threads = {t}",
        objects=("onnxruntime_pybind11_state", "libonnxruntime"),
        measured="1.21-1.57x slower",
        mapped=("libonnxruntime", "onnxruntime_pybind"),
        pool_label="ONNX Runtime",
        pool_code="SessionOptions.intra_op_num_threads = {t}",
    ),
    Library(
        "polars",
        "polars (rayon)",
        "sleep",
        "POLARS_MAX_THREADS",
        None,
        names=("polars-",),
        objects=("_polars_runtime", "polars.abi3"),
        measured="2 % slower",
        caller=False,
    ),
    Library(
        "pyarrow",
        "Arrow CPU pool (pyarrow)",
        "sleep",
        "OMP_NUM_THREADS",
        "pyarrow.set_cpu_count({t})",
        objects=("libarrow", "libparquet"),
        measured="2 % slower",
        caller=False,
    ),
    Library(
        "numexpr",
        "numexpr",
        "sleep",
        "NUMEXPR_NUM_THREADS",
        "numexpr.set_num_threads({t})",
        dirs=("numexpr",),
        measured="2 % slower",
        caller=False,
    ),
    Library(
        "numba",
        "numba parallel team",
        "sleep",
        "NUMBA_NUM_THREADS",
        "numba.set_num_threads({t})",
        dirs=("numba",),
        measured="8 % slower",
        mapped=("omppool.", "tbbpool.", "workqueue."),
        reads=("NUMBA_NUM_THREADS",),
        pool_code="numba.set_num_threads({t})",
    ),
    Library(
        "tokenizers",
        "HF tokenizers (rayon)",
        "sleep",
        "RAYON_NUM_THREADS",
        None,
        dirs=("tokenizers",),
        measured="1.01-1.11x slower",
        caller=False,
    ),
    Library(
        "opencv",
        "OpenCV's pool",
        "sleep",
        "OPENCV_FOR_THREADS_NUM",
        "cv2.setNumThreads({t})",
        dirs=("cv2",),
        measured="1.5-2.0x slower",
    ),
    Library(
        "xgboost",
        "XGBoost's OpenMP team",
        "spin",
        "OMP_NUM_THREADS",
        "nthread={t} in its parameters (n_jobs={t} in its estimators)",
        dirs=("xgboost",),
        measured="31-35x slower",
        drives=("xgboost",),
    ),
    Library(
        "lightgbm",
        "LightGBM's OpenMP team",
        "spin",
        "OMP_NUM_THREADS",
        "num_threads={t} in its parameters (n_jobs={t} in its estimators)",
        dirs=("lightgbm",),
        measured="1.4-1.7x slower",
        drives=("lightgbm",),
    ),
    Library(
        "faiss",
        "faiss's OpenMP team",
        "spin",
        "OMP_NUM_THREADS",
        "faiss.omp_set_num_threads({t})",
        dirs=("faiss",),
        measured="1.12-1.17x slower",
        drives=("faiss",),
    ),
    Library(
        "sklearn",
        "scikit-learn's OpenMP team",
        "spin",
        "OMP_NUM_THREADS",
        'threadpoolctl.threadpool_limits({t}, user_api="openmp")',
        measured="22-23x slower",
        drives=("sklearn",),
    ),
    Library(
        # `oversub stress`'s own team (`run.stressload`): it names its threads, waits at its
        # barrier as libgomp does, and is sized by OMP_NUM_THREADS when `--threads` is not
        # given, so its finding, `recommend`'s exports and `oversub run` work on it as on an
        # OpenMP team; no variable of its own reaches any other program's exports.
        "stress",
        "oversub stress team",
        "spin",
        "OMP_NUM_THREADS",
        None,
        names=("stress-team-",),
        measured="1.7-2.4x slower, 3.0-3.9x with 4 processes",
        caller=False,
    ),
    Library("gloo", "gloo communication (torch.distributed)", "none", names=("gloo_", "pt_gloo")),
    Library("jemalloc", "jemalloc background", "none", names=("jemalloc_bg_thd",)),
    Library("python", "Python interpreter", "none", objects=("libpython", "python")),
    Library("program", "the program's own threads", "none"),
)
"""Every library, most specific first: a thread name is matched against `names` in this order
(gloo's `pt_gloo_*` before torch's `pt_*`), and mapped pools are listed in it (OpenMP
runtimes first)."""
