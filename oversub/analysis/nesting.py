"""Nested parallelism: workers of one pool that start pools of their own.

A test suite under `pytest -n 2` whose tests call `n_jobs=3`, a `multiprocessing.Pool`
whose tasks use joblib, DataLoader workers that start processes: each outer worker may run
its own inner processes, and workers x inner processes can exceed N even when each level
alone fits. `role` tells what kind of worker a process is from what it shows (its command
line, its name, its parent's command line); `nesting` finds, among the busy processes of an
episode, several workers of one pool of which at least one started busy processes of its
own, and says so with the levers that fit what was seen.

Everything read here is what the watched processes control (names, command lines): it
only chooses among fixed words, and is never printed from here except as a pid.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from oversub.analysis.wording import join_and
from oversub.core.names import WorkerRole, worker_role
from oversub.core.plural import count, noun
from oversub.core.results import Nesting

XDIST = WorkerRole.XDIST
EXECNET = WorkerRole.EXECNET
LOKY = WorkerRole.LOKY
SPAWN = WorkerRole.SPAWN
FORKSERVER = WorkerRole.FORKSERVER
FORKED = WorkerRole.FORKED
DATALOADER = WorkerRole.DATALOADER

NESTED = "Nested parallelism:"
"""How the sentence of `Nesting.message` starts."""

role = worker_role
"""What kind of worker a process is (`core.names.worker_role`, which the tables' labels
share)."""


class Seen(NamedTuple):
    """A process present in an episode, as `nesting` needs it."""

    pid: int
    ppid: int
    role: str | None
    chain: tuple[int, ...]
    """Its ancestors' pids, parent first, up to the root."""
    busy: bool
    threads: int
    """Threads active at once over the episode."""


def nesting(present: Sequence[Seen], n: int) -> Nesting | None:
    """Nested parallelism among the processes of an episode, or None.

    A pool is the workers of one role that one parent started, at least two of them
    present. It nests when the busy processes come from at least two of its workers (a
    worker busy itself, or busy processes under it) and at least one worker has busy
    processes under it, and when more processes are busy at once than N CPUs or their
    active threads exceed N. Among such pools, the one that covers the most busy processes,
    then the outermost."""
    pools: dict[tuple[int, str], list[Seen]] = {}
    for p in present:
        if p.role is not None:
            pools.setdefault((p.ppid, p.role), []).append(p)
    busy = [p for p in present if p.busy]
    best: tuple[tuple[int, int], _Pool] | None = None
    for (parent, kind), members in pools.items():
        if len(members) < 2:
            continue
        pool = _Pool(parent, kind, members, busy)
        if not pool.nests(n):
            continue
        chain = next((len(m.chain) for m in members), 0)
        key = (pool.covered, -chain)
        if best is None or key > best[0]:
            best = (key, pool)
    return None if best is None else best[1].finding(n)


class _Pool:
    """One pool's workers and the busy processes that are theirs."""

    def __init__(self, parent: int, kind: str, members: Sequence[Seen], busy: Sequence[Seen]):
        self.parent, self.role = parent, kind
        self.members = sorted(members, key=lambda m: m.pid)
        ids = {m.pid for m in members}
        self.itself: list[Seen] = []
        """Workers busy themselves."""
        self.inner: dict[int, list[Seen]] = {}
        """Worker pid -> busy processes under it."""
        for b in busy:
            if b.pid in ids:
                self.itself.append(b)
                continue
            owner = next((pid for pid in b.chain if pid in ids), None)
            if owner is not None:
                self.inner.setdefault(owner, []).append(b)

    @property
    def touched(self) -> set[int]:
        return {m.pid for m in self.itself} | set(self.inner)

    @property
    def covered(self) -> int:
        return len(self.itself) + sum(len(v) for v in self.inner.values())

    def nests(self, n: int) -> bool:
        if len(self.touched) < 2 or not self.inner:
            return False
        threads = sum(max(1, b.threads) for b in self.itself)
        threads += sum(max(1, b.threads) for v in self.inner.values() for b in v)
        return self.covered > n or threads > n

    def finding(self, n: int) -> Nesting:
        starters = sorted(self.inner.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        most = len(starters[0][1])
        inner = [b for _, v in starters for b in v]
        roles = {b.role for b in inner}
        inner_role = roles.pop() if len(roles) == 1 else None
        workers = len(self.members)
        message = f"{NESTED} {self._said(starters)}; {self._sum(n, workers, most)}"
        return Nesting(
            role=self.role,
            parent=self.parent,
            workers=workers,
            inner=most,
            inner_role=inner_role,
            message=message,
            fix=levers(self.role, workers, most, inner_role, n, _threaded(inner)),
        )

    def _said(self, starters: list[tuple[int, list[Seen]]]) -> str:
        """ "pid 11 (a pytest-xdist worker) runs beside 3 processes started by pid 12
        (another pytest-xdist worker)"."""
        role = self.role
        beside = sorted(m.pid for m in self.itself if m.pid not in self.inner)
        started = [_started(pid, procs) for pid, procs in starters]
        if beside:
            who = f"pid {beside[0]}" if len(beside) == 1 else f"pids {join_and(map(str, beside))}"
            what = f"a {role}" if len(beside) == 1 else f"{role}s"
            runs = "runs" if len(beside) == 1 else "run"
            return f"{who} ({what}) {runs} beside {join_and(started)} (another {role})"
        first, rest = started[0], started[1:]
        others = "another" if len(rest) == 1 else "others"
        return f"{first} (a {role}) run beside {join_and(rest)} ({others})"

    def _sum(self, n: int, workers: int, most: int) -> str:
        busy = self.covered
        text = f"{count(busy, 'process')} busy at once on {count(n, 'CPU')}"
        if workers * most > n:
            text += (
                f", and {workers} {noun(workers, 'worker')} x up to {most} inner "
                f"{noun(most, 'process')} each can keep {workers * most} busy"
            )
        return text + "."


def _started(pid: int, procs: Sequence[Seen]) -> str:
    """ "3 processes started by pid 12" (its children), "3 processes under pid 12" (deeper)."""
    how = "started by" if all(p.ppid == pid for p in procs) else "under"
    return f"{count(len(procs), 'process')} {how} pid {pid}"


def _threaded(inner: Sequence[Seen]) -> bool:
    """An inner process ran several threads at once."""
    return any(p.threads >= 2 for p in inner)


_INNER_LEVER: Mapping[str, str] = {
    LOKY: "n_jobs={t} where the code calls joblib (joblib.parallel_config(n_jobs={t}) sets it "
    "for the calls that pass none)",
    SPAWN: "Pool(processes={t}) for the inner pool",
    FORKED: "Pool(processes={t}) for the inner pool",
    FORKSERVER: "Pool(processes={t}) for the inner pool",
}
"""How to size an inner pool of that role to `t` processes."""

_OUTER_LEVER: Mapping[str, str] = {
    XDIST: "pytest -n {k}",
    EXECNET: "{k} execnet workers",
    LOKY: "n_jobs={k} for the outer joblib call",
    DATALOADER: "DataLoader(num_workers={k})",
    SPAWN: "Pool(processes={k}) for the outer pool",
    FORKED: "Pool(processes={k}) for the outer pool",
    FORKSERVER: "Pool(processes={k}) for the outer pool",
}


def levers(
    outer: str, workers: int, inner: int, inner_role: str | None, n: int, threaded: bool
) -> str:
    """The fix of nested parallelism: the inner pool's size, the outer worker count, the
    inner processes' threads, as fits what was seen (each lever only where it fits N)."""
    per_worker = max(1, n // workers)
    size = _INNER_LEVER.get(inner_role or "", "at most {t} inner {p} at a time")
    inner_text = size.format(t=per_worker, p=noun(per_worker, "process"))
    levers_ = [f"in each {outer}, {inner_text}"]
    fewer = n // inner if inner else n
    if 1 <= fewer < workers:
        k = _OUTER_LEVER.get(outer, "{k} workers").format(k=fewer)
        levers_.append(f"or fewer {outer}s: {k} ({fewer} x {inner} fits {count(n, 'CPU')})")
    elif fewer < 1:
        levers_.append(
            f"fewer {outer}s alone cannot fit: 1 x {inner} inner processes is more than "
            f"{count(n, 'CPU')}"
        )
    fix = f"Keep {outer}s x inner processes within {count(n, 'CPU')}: " + "; ".join(levers_)
    if threaded:
        one = (
            "joblib.parallel_config(inner_max_num_threads=1)"
            if inner_role == LOKY
            else "threadpoolctl.threadpool_limits(1) in them"
        )
        fix += f"; and one thread in each inner process: {one}"
    return fix + "."
