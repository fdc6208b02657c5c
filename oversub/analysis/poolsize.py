"""How big each native pool of a process is, and what says so.

Three sources, best first (docs/pools.md has the facts behind them):

- live: the size the pool is set to now, read from the process's memory (OpenBLAS's
  `blas_cpu_number`); it includes settings made in code (threadpoolctl, set_num_threads);
- variable: the first variable that sizes the pool in the environment the process started
  with (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, ...);
- default: no variable set, so the pool sizes itself to all N CPUs of the process.

Only a live value is proof of the size. A variable or the default may have been overridden
in code, so the latent-risk rule also wants evidence that the pool's threads exist: the
process ran >= 2 active threads at once, or (when the live value could not be read) it has
as many threads as the pool would start at load (OpenBLAS starts N - 1 beside the caller).
That stand-in holds only when the memory was refused (`live_pools` None): when it was read
but a library's file was not (replaced, hostile: `live_pools` an empty reading), the size is
unknown and the thread count is no evidence of a default-sized pool (docs/security.md).

Pure: functions of `ProcessRates` and N.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from oversub.core.pools import POOLS_BY_KEY, controlling_value, first_level
from oversub.core.results import ProcessRates

Source = Literal["live", "variable", "default"]


class PoolSize(NamedTuple):
    """One sizable pool of one process."""

    key: str
    threads: int
    """Threads it runs at once: the live value, the variable's value, or N by default."""
    source: Source
    variable: str | None
    """The variable that sizes it in the process's environment (None: unset)."""
    value: str | None
    """That variable's value as written."""


def pool_sizes(p: ProcessRates, n: int) -> tuple[PoolSize, ...] | None:
    """The sizable pools `p` maps (those a variable can size), each with its size and source;
    None when its pools or its environment are unknown."""
    if p.pools is None or p.thread_env is None:
        return None
    live = p.live_pools or {}
    out = []
    # numba's threading layer sizes the libgomp (or TBB) team it drives itself: its knob, not
    # OMP_NUM_THREADS, sizes it (measured), unless torch runs a team of its own there.
    driven = "numba" in p.pools and "torch" not in p.pools
    for key in p.pools:
        if driven and key in ("libgomp", "tbb"):
            continue
        kind = POOLS_BY_KEY.get(key)
        if kind is None or not (kind.variables or kind.code_fix):
            continue  # nothing sizes it (oneTBB): no fix to offer
        ctl = controlling_value(key, p.thread_env)
        variable, value = ctl if ctl is not None else (None, None)
        if key in live:
            out.append(PoolSize(key, live[key], "live", variable, value))
        elif value is not None:
            out.append(PoolSize(key, first_level(value) or n, "variable", variable, value))
        else:
            out.append(PoolSize(key, n, "default", None, None))
    return tuple(out)


def blamed(p: ProcessRates, n: int, limit: int) -> list[PoolSize]:
    """Pools of `p` sized above `limit`, that can explain threads beyond it.

    A mapped pool is not necessarily a used one (scikit-learn loads libgomp and may never
    start it): when the threads of the pools read live, with the calling thread, account for
    every thread the process has, no other pool has a thread, so pools known only by their
    default are not blamed beside them.
    """
    if not p.pools:
        return []  # maps no pool, or unknown: nothing to blame (most processes, every interval)
    sizes = pool_sizes(p, n) or ()
    over = [s for s in sizes if s.threads > limit and not all_idle(p, s.key)]
    live = [s for s in over if s.source == "live"]
    if live and p.live_threads is not None and 1 + sum(p.live_threads.values()) >= p.threads:
        return live
    return over


def all_idle(p: ProcessRates, key: str) -> bool:
    """A working process (half a thread runnable) whose pool's threads are all accounted for
    and none ran: the live thread count read from memory equals the threads attributed to it
    (`probe.owners`), all idle. Busy threads that could not be attributed are then not this
    pool's."""
    if p.live_threads is None or key not in p.live_threads or p.owner_counts is None:
        return False
    if p.demand < 0.5:
        return False  # an idle process's pool may run when its work starts: still a risk
    mine = [c for c in p.owner_counts if c.owner == key]
    return sum(c.threads for c in mine) == p.live_threads[key] and not any(c.ran for c in mine)


def app_threads(p: ProcessRates, n: int, limit: int) -> bool:
    """True when every sizable pool of `p` is known to run at most `limit` threads, or to
    sit idle while `p` works (`all_idle`: NumPy's OpenBLAS beside another library's pool),
    or it maps none: the busy threads beyond that are not those pools'."""
    sizes = pool_sizes(p, n)
    return sizes is not None and all(s.threads <= limit or all_idle(p, s.key) for s in sizes)


def _started(p: ProcessRates, size: PoolSize) -> bool:
    """Evidence that a pool of this size exists in `p` (see the module docstring)."""
    if size.source == "live":
        # The library says how many threads it runs, and whether they exist now (a forked
        # child has none until its first call).
        return p.live_threads is None or p.live_threads.get(size.key, 1) > 0
    if p.active_threads >= 2:
        return True
    # Memory refused (None): a pool that starts at load (OpenBLAS) shows in the thread count.
    # Memory read but the library's file not ({}): unknown, not default-sized.
    readable = POOLS_BY_KEY[size.key].live_symbol is not None
    return readable and p.live_pools is None and p.threads >= size.threads


def _never_ran(p: ProcessRates, key: str) -> bool:
    """The threads' owners show that `p` worked (kept half a thread runnable) while none of
    this pool's threads ran: the work does not use the pool, so it is no risk for it (the
    pool of an idle process stays one: it may run when the work starts)."""
    if p.owner_counts is None or p.demand < 0.5:
        return False
    return not any(c.owner == key and c.ran > 0 for c in p.owner_counts)


def latent_pools(p: ProcessRates, n: int) -> list[PoolSize]:
    """Multi-thread pools of `p` that exist (by the evidence above) and may run, largest
    first."""
    if not p.pools:
        return []  # maps no pool, or unknown (most processes, every interval)
    found = [s for s in blamed(p, n, 1) if _started(p, s) and not _never_ran(p, s.key)]
    return sorted(found, key=lambda s: -s.threads)


def pool_threads(processes: Iterable[ProcessRates], n: int) -> tuple[int, int]:
    """(threads the tree's multi-thread pools run at once, processes that have one): per
    process its largest pool that exists, summed over the tree."""
    total = count = 0
    for p in processes:
        found = latent_pools(p, n)
        if found:
            total += found[0].threads
            count += 1
    return total, count
