"""Wording shared by the verdict rules: pid lists, pool names and thread-variable fixes.

Pure string building from `ProcessRates` and the pool table; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oversub.pools import POOL_KINDS, POOLS_BY_KEY, controlling_value
from oversub.results import ProcessRates

__all__ = [
    "at_most",
    "count_processes",
    "join_and",
    "pid_list",
    "pids_of",
    "pool_order",
    "rounded",
    "sentence",
    "thread_fix",
    "uncontrolled_pools",
    "verb",
    "who",
]


def pids_of(procs: Iterable[ProcessRates]) -> tuple[int, ...]:
    """Sorted pids of `procs`."""
    return tuple(sorted(p.pid for p in procs))


def pid_list(pids: Sequence[int]) -> str:
    """ "pid 11" or "pids 11, 12"."""
    word = "pid" if len(pids) == 1 else "pids"
    return f"{word} {', '.join(str(p) for p in pids)}"


def count_processes(count: int) -> str:
    """ "1 process" or "2 processes"."""
    return f"{count} process" if count == 1 else f"{count} processes"


def sentence(text: str) -> str:
    """`text` with its first letter capitalised (the rest untouched, unlike str.capitalize)."""
    return text[:1].upper() + text[1:]


def rounded(value: float | None, digits: int = 3) -> float | None:
    """Evidence number rounded for reports; None stays None."""
    return None if value is None else round(value, digits)


def uncontrolled_pools(p: ProcessRates) -> tuple[str, ...]:
    """Pools `p` maps that no variable sizes (they use all CPUs); () when unknown."""
    if not p.pools or p.thread_env is None:
        return ()
    env = p.thread_env
    return tuple(
        k
        for k in p.pools
        if k in POOLS_BY_KEY and POOLS_BY_KEY[k].variables and controlling_value(k, env) is None
    )


def pool_order(keys: Iterable[str]) -> list[str]:
    """Pool keys in the order of POOL_KINDS (OpenMP runtimes first), without duplicates."""
    wanted = set(keys)
    return [k.key for k in POOL_KINDS if k.key in wanted]


def who(pids: Sequence[int]) -> str:
    """ "2 processes (pids 11, 12)" or "1 process (pid 11)"."""
    return f"{count_processes(len(pids))} ({pid_list(pids)})"


def verb(count: int, singular: str, plural: str) -> str:
    """The form agreeing with `count`."""
    return singular if count == 1 else plural


def thread_fix(procs: Sequence[ProcessRates], threads: int) -> str:
    """Name each mapped pool, its variable and the value to set, for `procs`.

    Processes with the same unsized pools share one clause, so the usual case reads
    "2 processes (pids 11, 12) map GNU OpenMP (libgomp) with OMP_NUM_THREADS unset -> ...".
    """
    unset: dict[int, tuple[str, ...]] = {}
    too_high: dict[tuple[str, str, str], list[int]] = {}
    for p in procs:
        if uncontrolled_pools(p):
            unset[p.pid] = tuple(pool_order(uncontrolled_pools(p)))
        if p.pools and p.thread_env is not None:
            for key in p.pools:
                ctl = controlling_value(key, p.thread_env)
                if ctl is not None and not at_most(ctl[1], threads):
                    too_high.setdefault((POOLS_BY_KEY[key].label, *ctl), []).append(p.pid)
    by_pools: dict[tuple[str, ...], list[int]] = {}
    for pid, pools in unset.items():
        by_pools.setdefault(pools, []).append(pid)
    clauses: list[str] = []
    for keys, pids in by_pools.items():
        labels = join_and(POOLS_BY_KEY[k].label for k in keys)
        variables = list(dict.fromkeys(POOLS_BY_KEY[k].variables[0] for k in keys))
        assignments = " and ".join(f"{v}={threads}" for v in variables)
        clauses.append(
            f"{who(sorted(pids))} {verb(len(pids), 'maps', 'map')} {labels} with "
            f"{join_and(variables)} unset -> set {assignments} in {verb(len(pids), 'it', 'them')}"
        )
    for (label, var, value), pids in sorted(too_high.items()):
        clauses.append(
            f"{who(sorted(pids))} {verb(len(pids), 'runs', 'run')} {label} with "
            f"{var}={value}, more than {threads} -> lower {var} to {threads}"
        )
    if not clauses:
        return (
            f"set OMP_NUM_THREADS={threads} (and MKL_NUM_THREADS, OPENBLAS_NUM_THREADS; "
            f"`oversub recommend` prints them all) before the processes start, or cap their "
            f"pools in code: torch.set_num_threads({threads}), "
            f"threadpoolctl.threadpool_limits({threads})"
        )
    fix = "; ".join(clauses)
    if any(p.pools and "torch" in p.pools for p in procs):
        fix += f", or call torch.set_num_threads({threads}) in each"
    return fix


def join_and(items: Iterable[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    words = list(items)
    if not words:
        return ""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def at_most(value: str, limit: int) -> bool:
    """True when a thread variable's value asks for at most `limit` threads.

    OMP_NUM_THREADS may be a nested list ("4,2"): the first level sizes the team.
    """
    try:
        return int(value.split(",")[0].strip()) <= limit
    except ValueError:
        return False
