"""What we know about native thread pools: how to spot them and which variables size them.

Pure data shared by the `/proc/PID/maps` probe (patterns), the verdict (which variable
controls a pool) and the recommendation (which variables to export).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

THREAD_ENV_PREFIXES: tuple[str, ...] = (
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "BLIS_",
    "VECLIB_",
    "NUMEXPR_",
    "NUMBA_",
    "GOMP_",
    "KMP_",
    "TBB_",
    "POLARS_MAX_THREADS",
    "RAYON_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "OPENCV_FOR_THREADS_NUM",
)
"""Only environment variables with these prefixes are ever read from another process:
environments hold secrets, and nothing else is needed to explain a thread pool."""

RECOMMENDED_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "NUMBA_NUM_THREADS",
    "POLARS_MAX_THREADS",
)
"""The variables `oversub recommend --format env` exports, in this order (docs/pools.md:
each reaches the pool it names; NUMEXPR_MAX_THREADS goes with NUMEXPR_NUM_THREADS at the same
value, because numexpr prints an error and ignores a NUMEXPR_NUM_THREADS above an inherited
NUMEXPR_MAX_THREADS; Arrow's pool reads OMP_NUM_THREADS; ONNX Runtime reads none)."""


def is_thread_var(name: str) -> bool:
    """True for the thread-related names we may read, print and store."""
    return name.startswith(THREAD_ENV_PREFIXES)


_THREADPOOLCTL = "threadpoolctl.threadpool_limits({t})"
"""Resizes BLAS and OpenMP runtimes already loaded in the calling process."""


class PoolKind(NamedTuple):
    """A family of native thread pools."""

    key: str
    """Short stable id used in samples and JSON ("libgomp", "openblas", ...)."""
    label: str
    """Human name for messages."""
    prefixes: tuple[str, ...]
    """Basename prefixes of its shared objects (plain prefixes: no regex compiled at import)."""
    variables: tuple[str, ...]
    """Environment variables that size this pool, first match wins (empty: none)."""
    openmp: bool
    """An OpenMP runtime: waiting team threads spin, so oversubscription costs multiples."""
    live_symbol: str | None = None
    """Exported int data symbol holding the pool's live size (read by `probe.livesizes`);
    None when the library keeps it hidden (see docs/pools.md)."""
    live_started: str | None = None
    """Exported int data symbol that is non-zero while the pool's threads exist (OpenBLAS
    shuts them down around fork and starts them again at the next call)."""
    code_fix: str | None = None
    """The call that resizes this pool from inside a process, with {t} for the threads;
    None when no call reaches it."""


POOL_KINDS: tuple[PoolKind, ...] = (
    PoolKind(
        "libgomp",
        "GNU OpenMP (libgomp)",
        ("libgomp.", "libgomp-"),
        ("OMP_NUM_THREADS",),
        True,
        code_fix=_THREADPOOLCTL,
    ),
    PoolKind(
        "libiomp5",
        "Intel OpenMP (libiomp5)",
        ("libiomp5",),
        ("KMP_NUM_THREADS", "OMP_NUM_THREADS"),
        True,
        code_fix=_THREADPOOLCTL,
    ),
    PoolKind(
        "libomp",
        "LLVM OpenMP (libomp)",
        ("libomp.", "libomp-"),
        ("OMP_NUM_THREADS",),
        True,
        code_fix=_THREADPOOLCTL,
    ),
    PoolKind(
        "openblas",
        "OpenBLAS",
        ("libopenblas", "libscipy_openblas"),
        ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"),
        False,
        live_symbol="blas_cpu_number",
        live_started="blas_server_avail",
        code_fix=_THREADPOOLCTL,
    ),
    PoolKind(
        "mkl",
        "Intel MKL",
        ("libmkl_rt", "libmkl_core", "libmkl_intel_thread", "libmkl_gnu_thread"),
        ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
        False,
        code_fix=_THREADPOOLCTL,
    ),
    PoolKind(
        "blis",
        "BLIS",
        ("libblis",),
        ("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
        False,
        code_fix=_THREADPOOLCTL,
    ),
    PoolKind("tbb", "oneTBB", ("libtbb.", "libtbb-"), (), False),
    PoolKind(
        "torch",
        "PyTorch intra-op pool (libtorch_cpu)",
        ("libtorch_cpu",),
        ("OMP_NUM_THREADS", "MKL_NUM_THREADS"),
        False,
        code_fix="torch.set_num_threads({t})",
    ),
    PoolKind(
        "numba",
        "numba parallel team",
        ("omppool.", "tbbpool.", "workqueue."),
        ("NUMBA_NUM_THREADS",),
        False,
        code_fix="numba.set_num_threads({t})",
    ),
    PoolKind(
        "onnxruntime",
        "ONNX Runtime",
        ("libonnxruntime", "onnxruntime_pybind"),
        (),  # measured: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS do not reach its pool
        False,
        code_fix="SessionOptions.intra_op_num_threads = {t}",
    ),
)

POOLS_BY_KEY: Mapping[str, PoolKind] = {k.key: k for k in POOL_KINDS}


def classify_library(basename: str) -> str | None:
    """The pool key of a mapped library's file name, or None when it is no pool."""
    for kind in POOL_KINDS:
        if basename.startswith(kind.prefixes):
            return kind.key
    return None


def controlling_value(pool: str, env: Mapping[str, str]) -> tuple[str, str] | None:
    """The (variable, value) that sizes `pool` in `env`, or None when it runs at its default."""
    kind = POOLS_BY_KEY.get(pool)
    if kind is None:
        return None
    for var in kind.variables:
        value = env.get(var, "").strip()
        if value:
            return var, value
    return None


def first_level(value: str) -> int | None:
    """OMP_NUM_THREADS may be a nested list ("4,2"): the first level sizes the team."""
    try:
        count = int(value.split(",")[0].strip())
    except ValueError:
        return None
    return count if count >= 1 else None


def is_openmp(pools: tuple[str, ...]) -> bool:
    """True when any of the pools is an OpenMP runtime (spinning waiters)."""
    return any(POOLS_BY_KEY[p].openmp for p in pools if p in POOLS_BY_KEY)
