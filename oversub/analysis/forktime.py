"""The threads a parent ran when it forked a child: its threads that started before the
child did (`ThreadSample.start_ticks` against `ProcessSample.start_ticks`), what
`fork-after-threads` and `fork-hang` judge (`ProcessRates.parent_threads_at_start`)."""

from __future__ import annotations

from oversub.core.samples import TreeSample


def parent_threads(pid: int, ppid: int, start_ticks: int | None, sample: TreeSample) -> int | None:
    """The threads of process `pid`'s parent (in `sample`) that started before it did; None
    when the parent or a start time is unknown."""
    parent = sample.processes.get(ppid)
    if parent is None or start_ticks is None or parent.pid == pid:
        return None
    starts = [t.start_ticks for t in parent.threads]
    if not starts or any(s is None for s in starts):
        return None
    # Strictly before: a thread started in the same clock tick as the child may have come
    # after the fork, and an accusation needs a thread known to have been there.
    return sum(1 for s in starts if s is not None and s < start_ticks)
