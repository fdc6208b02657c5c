"""The threads a parent ran when it forked a child: its threads that started before the
child did (`ThreadSample.start_ticks` against `ProcessSample.start_ticks`), what
`fork-after-threads` and `fork-hang` judge (`ProcessRates.parent_threads_at_start`)."""

from __future__ import annotations

from dataclasses import replace

from oversub.core.results import ProcessRates
from oversub.core.samples import TreeSample


def with_parent_threads(r: ProcessRates, sample: TreeSample) -> ProcessRates:
    """`r` with the threads its parent (in `sample`) had started before it: those are the
    threads the parent ran when it forked `r` (a thread started since is not counted)."""
    parent = sample.processes.get(r.ppid)
    if parent is None or r.start_ticks is None or parent.pid == r.pid:
        return r
    starts = [t.start_ticks for t in parent.threads]
    if not starts or any(s is None for s in starts):
        return r
    # Strictly before: a thread started in the same clock tick as the child may have come
    # after the fork, and an accusation needs a thread known to have been there.
    before = sum(1 for s in starts if s is not None and s < r.start_ticks)
    return replace(r, parent_threads_at_start=before)
