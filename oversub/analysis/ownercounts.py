"""Threads by owner: counts per runtime, in words, and which runtimes' threads are busy.

The owners come from `probe.owners` (name, blocked PC, stack); this module only counts and
words them. Pure: functions of `ProcessRates` and the `runtimes` catalogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from oversub.core.results import OwnerCount, ProcessRates

_NS = 1_000_000_000


def yields(switches: tuple[int, int] | None) -> bool | None:
    """A thread gave up the CPU more often than it was preempted (voluntary switches above
    involuntary ones); None when its switches are unknown."""
    return None if switches is None else switches[0] > switches[1]


def owner_counts(
    owners: Mapping[int, str] | None,
    runnable: Mapping[int, float],
    floor_s: float,
    switches: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[OwnerCount, ...] | None:
    """Counts per owner of the threads in `owners` (tid -> owner), with each thread's
    runnable seconds from `runnable` (absent: 0); a thread is busy at `floor_s` or more
    (compared in whole nanoseconds, as `rates.interval` does). With `switches` (tid ->
    voluntary, involuntary), the runnable seconds of the threads that yield are summed.
    Most runnable first."""
    if owners is None:
        return None
    if not any(runnable.values()):  # nothing ran (most processes, most intervals)
        idle: dict[str, int] = {}
        for owner in owners.values():
            idle[owner] = idle.get(owner, 0) + 1
        return tuple(
            OwnerCount(k, n, 0, 0, 0.0, 0.0) for k, n in sorted(idle.items(), key=_by_size)
        )
    floor_ns = floor_s * _NS
    acc: dict[str, list[float]] = {}
    yielding: dict[str, float | None] = {}
    for tid, owner in owners.items():
        r = runnable.get(tid, 0.0)
        c = acc.setdefault(owner, [0, 0, 0, 0.0])
        c[0] += 1
        c[1] += 1 if r > 0 and round(r * _NS) >= floor_ns else 0
        c[2] += 1 if r > 0 else 0
        c[3] += r
        y = yielding.setdefault(owner, 0.0)
        if r > 0 and y is not None:
            gave = yields(switches.get(tid) if switches is not None else None)
            yielding[owner] = None if gave is None else y + (r if gave else 0.0)
    counts = [
        OwnerCount(k, int(v[0]), int(v[1]), int(v[2]), v[3], yielding[k]) for k, v in acc.items()
    ]
    return tuple(sorted(counts, key=lambda c: (-c.runnable_s, -c.threads, c.owner)))


def add_switches(
    into: dict[int, tuple[int, int]], process: ProcessRates
) -> dict[int, tuple[int, int]] | None:
    """`into` (tid -> voluntary, involuntary switches) plus `process`'s per-thread switches; None
    when `process` ran threads whose switches were not counted (a partial sum would undercount)."""
    if process.thread_ids and not process.thread_switches:
        return None
    for tid, (v, i) in zip(process.thread_ids, process.thread_switches, strict=True):
        was = into.get(tid, (0, 0))
        into[tid] = (was[0] + v, was[1] + i)
    return into


def _by_size(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


@dataclass
class RunOwners:
    """Threads by owner over a whole run, thread by thread: each thread counts for its last
    known owner in every interval (an owner never changes, and a thread is often attributed
    only after a few samples), busy when it was active in some interval (the interval's
    `active_threads` most runnable threads), idle when it never ran."""

    owner_of: dict[int, str] = field(default_factory=dict)
    runnable: dict[int, float] = field(default_factory=dict)
    switches: dict[int, tuple[int, int]] | None = field(default_factory=dict)
    """tid -> (voluntary, involuntary) switches summed; None once an interval lacked them."""
    busy: set[int] = field(default_factory=set)
    peak: dict[str, int] = field(default_factory=dict)
    """Owner -> most threads it had at once."""
    _last: Mapping[int, str] | None = field(default=None, repr=False, compare=False)
    """The owners added last: the same mapping again with nothing run adds nothing."""

    def add(self, process: ProcessRates) -> None:
        assert process.owners is not None
        if process.owners is self._last and not any(process.thread_runnable_s):
            return  # a kept reading (`probe.sampler`): the same threads, none ran
        self._last = process.owners
        self.owner_of.update(process.owners)
        if self.switches is not None:
            self.switches = add_switches(self.switches, process)
        ranked = sorted(
            zip(process.thread_runnable_s, process.thread_ids, strict=True), reverse=True
        )
        for i, (r, tid) in enumerate(ranked):
            self.runnable[tid] = self.runnable.get(tid, 0.0) + r
            if i < process.active_threads and r > 0:
                self.busy.add(tid)
        now: dict[str, int] = {}
        for owner in process.owners.values():
            now[owner] = now.get(owner, 0) + 1
        for owner, n in now.items():
            self.peak[owner] = max(self.peak.get(owner, 0), n)

    def counts(self) -> tuple[OwnerCount, ...]:
        acc: dict[str, list[float]] = {}
        for tid, owner in self.owner_of.items():
            c = acc.setdefault(owner, [0, 0, 0.0, 0.0])
            r = self.runnable.get(tid, 0.0)
            c[0] += 1 if tid in self.busy else 0
            c[1] += 1 if r > 0 else 0
            c[2] += r
            if r > 0 and self.switches is not None and yields(self.switches.get(tid, (0, 0))):
                c[3] += r
        counts = [
            OwnerCount(
                k,
                max(self.peak.get(k, 0), 1),
                int(v[0]),
                int(v[1]),
                v[2],
                None if self.switches is None else v[3],
            )
            for k, v in acc.items()
            if self.peak.get(k, 0) or v[1]
        ]
        return tuple(sorted(counts, key=lambda c: (-c.runnable_s, -c.threads, c.owner)))


def busy_owners(process: ProcessRates) -> dict[str, int]:
    """Owner -> busy threads of `process` (only owners with a busy thread); empty when unknown."""
    return {c.owner: c.busy for c in process.owner_counts or () if c.busy > 0}


def with_floor(process: ProcessRates, floor_ns: float) -> ProcessRates:
    """`process` with its active threads and owner counts under the floor `floor_ns` (a thread is
    active when it was runnable at least that long: `Thresholds.active_cpu` of the interval),
    from its per-thread runnable seconds alone, in whole nanoseconds as `rates.interval`
    counts them."""
    counts = process.owner_counts
    if process.owners is not None and not process.exited:
        runnable = dict(zip(process.thread_ids, process.thread_runnable_s, strict=True))
        switches = (
            dict(zip(process.thread_ids, process.thread_switches, strict=True))
            if process.thread_switches
            else None
        )
        counts = owner_counts(process.owners, runnable, floor_ns / _NS, switches)
    active = process.active_threads
    if process.thread_runnable_s:  # else exited, or no thread: nothing was active
        each = process.thread_runnable_s
        # Most threads of most processes ran for none of the interval: one max() tells.
        active = (
            0
            if round(max(each) * _NS) < floor_ns
            else sum(1 for r in each if round(r * _NS) >= floor_ns)
        )
    if counts is process.owner_counts and active == process.active_threads:
        return process
    return process._replace(owner_counts=counts, active_threads=active)
