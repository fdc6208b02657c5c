"""Native thread pools as a process's maps reveal them, and the thread variables.

The pools are the mapped-pool facts of the catalogue's rows (`core.catalogue`), shared by the
`/proc/PID/maps` probe (patterns), the verdict (which variable controls a pool) and the
recommendation (which variables to export). Pure, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.catalogue import CATALOGUE, OPENMP

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


class PoolKind(NamedTuple):
    """A family of native thread pools, found by the objects a process maps: the mapped-pool
    facts of a `core.catalogue` row (`Library.mapped` and the fields that go with it)."""

    key: str
    """Short stable id used in samples and JSON ("libgomp", "openblas", ...)."""
    label: str
    """Human name for messages."""
    prefixes: tuple[str, ...]
    """Basename prefixes of its shared objects."""
    variables: tuple[str, ...]
    """Environment variables that size this pool, first match wins (empty: none)."""
    openmp: bool
    """An OpenMP runtime: waiting team threads spin, so oversubscription costs multiples."""
    live_symbol: str | None = None
    """Exported int data symbol holding the pool's live size (`probe.livesizes`)."""
    live_started: str | None = None
    """Exported int data symbol that is non-zero while the pool's threads exist."""
    code_fix: str | None = None
    """The call that resizes this pool from inside a process, with {t} for the threads."""


POOL_KINDS: tuple[PoolKind, ...] = tuple(
    PoolKind(
        row.key,
        row.pool_label or row.label,
        row.mapped,
        row.reads,
        row.key in OPENMP,
        row.live_symbol,
        row.live_started,
        row.pool_code,
    )
    for row in CATALOGUE
    if row.mapped
)
"""The catalogue's rows that a process's maps reveal, in its order (OpenMP runtimes first)."""

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
