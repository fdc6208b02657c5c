"""Wording shared by the verdict rules: pid lists, counts, pool order (fixes live in `fixes`).

Pure string building from `ProcessRates` and the pool table; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oversub.core.pools import POOL_KINDS
from oversub.core.results import ProcessRates


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


def join_and(items: Iterable[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    words = list(items)
    if not words:
        return ""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def share(n: int, m: int) -> str:
    """How T = floor(N / M), never below 1, follows from N CPUs and M busy processes:
    "2 CPUs / 2", "4 CPUs / 3, rounded down", "2 CPUs / 3 is below 1: the fewest"."""
    text = f"{n} {verb(n, 'CPU', 'CPUs')} / {m}"
    if m > n:
        return text + " is below 1: the fewest"
    return text + (", rounded down" if n % m else "")
