"""Threads by owner: counts per runtime, in words, and which runtimes' threads are busy.

The owners come from `probe.owners` (name, blocked PC, stack); this module only counts and
words them. Pure: functions of `ProcessRates` and the `runtimes` catalogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from oversub.results import OwnerCount, ProcessRates

_NS = 1_000_000_000


def owner_counts(
    owners: Mapping[int, str] | None,
    runnable: Mapping[int, float],
    floor_s: float,
) -> tuple[OwnerCount, ...] | None:
    """Counts per owner of the threads in `owners` (tid -> owner), with each thread's
    runnable seconds from `runnable` (absent: 0); a thread is busy at `floor_s` or more
    (compared in whole nanoseconds, as `rates.interval` does). Most runnable first."""
    if owners is None:
        return None
    floor_ns = floor_s * _NS
    acc: dict[str, list[float]] = {}
    for tid, owner in owners.items():
        r = runnable.get(tid, 0.0)
        c = acc.setdefault(owner, [0, 0, 0, 0.0])
        c[0] += 1
        c[1] += 1 if r > 0 and round(r * _NS) >= floor_ns else 0
        c[2] += 1 if r > 0 else 0
        c[3] += r
    counts = [OwnerCount(k, int(v[0]), int(v[1]), int(v[2]), v[3]) for k, v in acc.items()]
    return tuple(sorted(counts, key=lambda c: (-c.runnable_s, -c.threads, c.owner)))


def merged(
    a: tuple[OwnerCount, ...] | None, b: tuple[OwnerCount, ...] | None
) -> tuple[OwnerCount, ...] | None:
    """Counts over a run: peaks of the counts, sum of runnable seconds (unknown stays known
    once known)."""
    if a is None or b is None:
        return a if b is None else b
    acc = {c.owner: c for c in a}
    for c in b:
        d = acc.get(c.owner)
        acc[c.owner] = (
            c
            if d is None
            else OwnerCount(
                c.owner,
                max(c.threads, d.threads),
                max(c.busy, d.busy),
                max(c.ran, d.ran),
                c.runnable_s + d.runnable_s,
            )
        )
    return tuple(sorted(acc.values(), key=lambda c: (-c.runnable_s, -c.threads, c.owner)))


def busy_owners(p: ProcessRates) -> dict[str, int]:
    """Owner -> busy threads of `p` (only owners with a busy thread); empty when unknown."""
    return {c.owner: c.busy for c in p.owner_counts or () if c.busy > 0}


def with_floor(p: ProcessRates, floor_ns: float) -> ProcessRates:
    """`p` with its active threads and owner counts under the floor `floor_ns` (a thread is
    active when it was runnable at least that long: `Thresholds.active_cpu` of the interval),
    from its per-thread runnable seconds alone, in whole nanoseconds as `rates.interval`
    counts them."""
    if p.owners is not None and not p.exited:
        runnable = dict(zip(p.thread_ids, p.thread_runnable_s, strict=True))
        p = replace(p, owner_counts=owner_counts(p.owners, runnable, floor_ns / _NS))
    if not p.thread_runnable_s:  # exited, or no thread: nothing was active
        return p
    count = sum(1 for r in p.thread_runnable_s if round(r * _NS) >= floor_ns)
    return replace(p, active_threads=count)
