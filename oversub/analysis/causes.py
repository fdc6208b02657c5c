"""Whose busy threads oversubscribe the CPUs, from the threads' owners (`probe.owners`).

The cause of an oversubscription finding, when the owners of the busy processes' threads
were read: the runtimes whose pools run more threads than the target T (each named with
the one knob that sizes it), the interpreter's threads taking turns on the GIL, or
communication threads no cap reaches. None when the owners are unknown, or when the busy
threads are unattributed: the verdict then falls back to the pools mapped and their
variables (`poolsize`). Pure: functions of `ProcessRates` and the `runtimes` catalogue.

Each busy process is judged on its own threads (`groups`): a thread's name is evidence for
its own process only, so a process that names its threads `polars-0` cannot make another
process's unattributed threads polars' nor drop them out of the cause, and the finding's
severity is the worst of its processes' (docs/rules.md, "One target, several causes").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from oversub.analysis.ownercounts import busy_owners
from oversub.analysis.poolsize import app_threads, blamed
from oversub.core.results import OwnerCount, ProcessRates
from oversub.core.runtimes import RUNTIMES_BY_KEY, UNATTRIBUTED, describe, waits

Kind = Literal["spin", "sleep", "library", "fitted", "gil", "comm", "app"]

GIL_CPU_PERCENT = 130.0
"""A process whose busy threads are all the interpreter's and that uses at most this much
CPU (100 = one CPU) may run them one at a time: the GIL, not the CPUs, is what they wait
for, when most of them also yield (`gil_bound`)."""

_NOT_POOLS = frozenset({"python", "program", "jemalloc", UNATTRIBUTED})

GroupKind = Literal["pools", "mapped", "threads", "fitted", "app", "comm", "gil", "single"]
"""What a group of a target's busy processes does. From their own threads' owners: pools
(runtimes whose pools run more than T: `Cause` spin or sleep), fitted, app, comm, gil (the
`Cause` kinds). Owners unknown, or busy threads no evidence names: mapped (pools they map
sized above T, `poolsize`) or threads (every pool they map is at most T: the application's
own threads). single: one busy thread at a time."""


class Blame(NamedTuple):
    """One runtime's pool that runs more threads than the target, and where."""

    owner: str
    pids: tuple[int, ...]
    size: int
    """The largest size it shows (`pool_size`)."""


class Cause(NamedTuple):
    kind: Kind
    """spin: a blamed pool's waiting threads spin (costs multiples); sleep: every blamed
    pool's threads sleep (costs a few percent); library: no blamed pool spins and one is a
    library oversub has no row for (`runtimes.owner_of_code`: no knob known); gil: the
    interpreter's threads take turns;
    fitted: the busy pools already run at most T (their knob is applied) and the rest is
    their callers; comm: communication threads; app: the application's own Python threads
    (executors)."""
    blamed: tuple[Blame, ...]
    """The pools to size, spinning ones first (for fitted: the busy pools already at T, with
    no pids); empty for gil, comm and app."""
    owners: str
    """Threads by owner of each busy process: "pid 11: ONNX Runtime intra-op pool: 1 busy,
    OpenBLAS: 1 idle, Python interpreter: 1 busy"."""


class Group(NamedTuple):
    """Busy processes of one target that share a kind of cause, judged on their own threads."""

    kind: GroupKind
    procs: tuple[ProcessRates, ...]
    cause: Cause | None
    """The cause over `procs` (`cause`) for the kinds read from owners; None for mapped,
    threads and single."""
    kinds: tuple[tuple[int, str], ...]
    """(pid, what its own threads show) of each process: a `Cause` kind, or "mapped",
    "mapped-sleep", "threads", "single" (the evidence `causes`)."""


def pool_size(c: OwnerCount) -> int:
    """The size a pool shows: its threads busy at once, plus the caller when its size counts
    it. Busy, not all of its threads: polars keeps tokio and spill threads beside its rayon
    pool, idle, and a pool lowered in code (threadpoolctl) keeps its threads, idle."""
    runtime = RUNTIMES_BY_KEY.get(c.owner)
    return c.busy + (1 if runtime is not None and runtime.caller else 0)


def _blamed(p: ProcessRates, limit: int) -> list[OwnerCount]:
    """Pools of `p` whose threads ran and that show more than `limit` threads (`pool_size`)."""
    out = []
    for c in p.owner_counts or ():
        runtime = RUNTIMES_BY_KEY.get(c.owner)
        if runtime is None or runtime.waits == "none" or not c.ran:
            continue
        if pool_size(c) > limit:
            out.append(c)
    return out


def cause(procs: Sequence[ProcessRates], threads: int) -> Cause | None:
    """The cause over the busy multi-thread processes `procs`, at `threads` per process."""
    if not procs or any(p.owner_counts is None for p in procs):
        return None
    blames: dict[str, tuple[list[int], int]] = {}
    for p in procs:
        for c in _blamed(p, threads):
            pids, size = blames.get(c.owner, ([], 0))
            blames[c.owner] = ([*pids, p.pid], max(size, pool_size(c)))
    owners = "; ".join(f"pid {p.pid}: {describe(p.owner_counts or ())}" for p in procs)
    if blames:
        order = sorted(blames, key=lambda k: (RUNTIMES_BY_KEY[k].waits != "spin", k))
        blamed = tuple(Blame(k, tuple(sorted(blames[k][0])), blames[k][1]) for k in order)
        spin = any(RUNTIMES_BY_KEY[b.owner].waits == "spin" for b in blamed)
        rowless = any(RUNTIMES_BY_KEY[b.owner].waits == "unknown" for b in blamed)
        return Cause("spin" if spin else "library" if rowless else "sleep", blamed, owners)
    busy = {k for p in procs for k in busy_owners(p)}
    if UNATTRIBUTED in busy or not busy:
        return None  # what runs them is unknown: the mapped pools are all there is
    pools = {k for k in busy if k not in _NOT_POOLS and k != "gloo"}
    if pools:
        return Cause("fitted", tuple(Blame(k, (), 0) for k in sorted(pools)), owners)
    if "gloo" in busy:
        return Cause("comm", (), owners)
    # Left: the interpreter's threads (and idle helpers).
    return Cause("gil" if all(gil_bound(p) for p in procs) else "app", (), owners)


def gil_bound(p: ProcessRates) -> bool:
    """Several of `p`'s threads that ran are the interpreter's, the process uses about one
    CPU at most, and most of their runnable time is in threads that gave up the CPU more
    often than they were preempted: they wait for the GIL, not for a CPU. Weighed by time,
    so helpers that wake now and then (which only yield) count for little, and so 8
    threads each runnable a fifth of the time, which no thread count calls busy, do count.

    Measured, 2 processes on 2 CPUs: 8 pure-Python threads per process switch 180-190 times
    a second voluntarily against 75-115 involuntarily, every one of them; dask's task threads
    doing BLAS with the GIL released 65-110 against 155-185 (preempted: they wait for a CPU,
    and fewer threads do help), though the worker process, at 0.7 CPU and 1.5 threads
    runnable, looks like the GIL by its CPU and demand alone. Unknown switches: not the GIL.
    Threads no evidence named, none of them busy (`cause` returns no cause otherwise), count
    neither way: unknown is no other owner's work.
    """
    python = next((c for c in p.owner_counts or () if c.owner == "python"), None)
    if python is None or python.ran < 2 or python.yielding_s is None:
        return False
    others = sum(
        c.runnable_s for c in p.owner_counts or () if c.owner not in ("python", UNATTRIBUTED)
    )
    return (
        p.cpu_percent <= GIL_CPU_PERCENT
        and 2 * python.yielding_s > python.runnable_s
        and others < python.runnable_s / 2
    )


def mapped_sleeps(p: ProcessRates, n: int, threads: int) -> bool:
    """Every pool `p` maps above `threads` (`poolsize.blamed`) is one whose waiting threads
    sleep (and there is one): sharing the CPUs costs little. False for a process whose pools
    are unknown."""
    keys = [s.key for s in blamed(p, n, threads)]
    return bool(keys) and all(waits(k) == "sleep" for k in keys)


_GROUP_OF: dict[Kind, GroupKind] = {
    "spin": "pools",
    "sleep": "pools",
    "library": "pools",
    "fitted": "fitted",
    "app": "app",
    "comm": "comm",
    "gil": "gil",
}

_ORDER: tuple[GroupKind, ...] = (
    "pools",
    "mapped",
    "threads",
    "fitted",
    "app",
    "comm",
    "gil",
    "single",
)


def groups(
    contending: Sequence[ProcessRates],
    multi: Sequence[ProcessRates],
    threads: int,
    n: int,
) -> list[Group]:
    """The busy processes `contending` of one target, grouped by what their own threads
    show (`multi`: those that ran several threads at once), at `threads` per process on
    `n` CPUs. Every process of `contending` is in a group; a process whose named pools sleep
    while other busy threads of it are unattributed beside a mapped pool that spins is in
    both its named group and the mapped one (its severity is the worse). Empty groups are
    left out; the order is `_ORDER` (the rule's severity follows in `ownerfindings`)."""
    members: dict[GroupKind, list[ProcessRates]] = {}
    kinds: dict[GroupKind, list[tuple[int, str]]] = {}

    def put(kind: GroupKind, p: ProcessRates, label: str) -> None:
        members.setdefault(kind, []).append(p)
        kinds.setdefault(kind, []).append((p.pid, label))

    several = {p.pid for p in multi}
    for p in contending:
        if p.pid not in several:
            put("single", p, "single")
            continue
        own = cause([p], threads)
        if own is None:
            if app_threads(p, n, threads):
                put("threads", p, "threads")
            else:
                put("mapped", p, "mapped-sleep" if mapped_sleeps(p, n, threads) else "mapped")
            continue
        put(_GROUP_OF[own.kind], p, own.kind)
        unknown = busy_owners(p).get(UNATTRIBUTED, 0)
        if (
            own.kind == "sleep"
            and unknown
            and not app_threads(p, n, threads)
            and not mapped_sleeps(p, n, threads)
        ):
            put("mapped", p, "mapped")
    out = []
    for kind in _ORDER:
        procs = tuple(members.get(kind, ()))
        if not procs:
            continue
        owned = None if kind in ("mapped", "threads", "single") else cause(procs, threads)
        out.append(Group(kind, procs, owned, tuple(kinds[kind])))
    return out
