"""What a target's oversubscription costs in this run: where its busy threads' CPU goes.

While a target's verdict is oversubscribed, the one loop (`run.session.follow`) asks for its
busy processes' cost (`WaitCosts.request`): for each process due by the cadence
(`perfpc.GAPS_S`: windows at 0, 1, 3, 7, 15 and 30 s of its oversubscription, then every
30 s), its busiest threads of the interval just assessed get perf
events (`probe.perfpc.start`, user space only), which sample them during the loop's own
wait; the next reading ends the windows (`collect`, before the sample is taken), maps the
program counters through the memory reader (`probe.pcmap`, the FUSE rules of
`probe.backing`) and turns each into the process's `WaitShare` (`analysis.spin`): the share
of its busy threads' CPU spent in a runtime's wait or spin code. Every later sample of that
process carries its latest share (`attach`) until the next window, and the verdict's
severity follows it (`analysis.cost`).

Never on the watched process's terms: nothing is asked of it, its memory is not read, a
process whose reads were abandoned (`probe.memreader`, quarantined) is not measured, and
where the kernel refuses perf events the share says why ("not measured"). Bounds: at most
`MAX_PROCESSES` windows at a time, `perfpc.MAX_THREADS` threads each, each window at most
as long as one interval (the rings hold `perfpc.MAX_SECONDS`; later samples are lost and
counted).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from oversub.analysis.spin import wait_share
from oversub.core.names import Verdict
from oversub.core.pcprofile import PcProfile, WaitShare
from oversub.core.results import Assessment, Interval, ProcessRates
from oversub.core.samples import TreeSample
from oversub.probe import perfpc
from oversub.probe.memreader import Readers, service
from oversub.probe.pcmap import PcMapper

MAX_PROCESSES = 4
"""Processes measured at once (the busiest of the target's finding first)."""
MAX_KNOWN = 4096
"""Processes whose latest share is kept (the oldest measured go first)."""
BUSY_SHARE = 0.25
"""A thread runnable at least this share of the interval is sampled."""


class _Open(NamedTuple):
    pid: int
    start: int
    window: perfpc.Window


class WaitCosts:
    """The cost windows of one source: open ones, and each process's latest share."""

    def __init__(
        self,
        root: str = "/",
        *,
        syscall: perfpc.Syscall | None = None,
        clock: Callable[[], float] = time.monotonic,
        gaps: tuple[float, ...] = perfpc.GAPS_S,
        readers: Readers | None = None,
        mapper: PcMapper | None = None,
    ) -> None:
        self.root = root
        self._syscall = syscall
        self._clock = clock
        self._cadence = perfpc.Cadence(gaps)
        self._readers = readers if readers is not None else service()
        self._readers.acquire()
        self._mapper = mapper if mapper is not None else PcMapper(root, files=self._readers)
        self._open: list[_Open] = []
        self._latest: dict[tuple[int, int], WaitShare] = {}
        self._closed = False

    def request(self, interval: Interval, assessment: Assessment) -> None:
        """Start windows on the busy threads of an oversubscribed target's busiest processes
        that are due (at most `MAX_PROCESSES` open at once); nothing for any other verdict,
        nor where no perf events are asked for (a fake /proc tree without a `syscall`)."""
        if self._closed or assessment.verdict is not Verdict.OVERSUBSCRIBED:
            return
        if self.root != "/" and self._syscall is None:
            return
        cited = {pid for f in assessment.findings for pid in f.pids}
        procs = [p for p in interval.processes if p.pid in cited and not p.exited]
        procs.sort(key=lambda p: -p.demand)
        now = self._clock()
        for p in procs:
            if len(self._open) >= MAX_PROCESSES:
                break
            tids = busy_threads(p, interval.t1 - interval.t0)
            if len(tids) < 2 or p.start_ticks is None:
                continue
            if not self._cadence.due(p.pid, p.start_ticks, now):
                continue
            self._start(p.pid, p.start_ticks, tids, now)

    def _start(self, pid: int, start: int, tids: list[int], now: float) -> None:
        proc = f"{self.root.rstrip('/')}/proc/{pid}"
        if self._readers.quarantined(proc, start):
            why = "its reads were abandoned (quarantined): nothing more is read of it"
            self._keep(pid, start, WaitShare(0, 0, None, now, 1, "quarantined", why))
            return
        opened = perfpc.start(pid, tids, root=self.root, mapper=self._mapper, syscall=self._syscall)
        if isinstance(opened, PcProfile):
            self._keep(pid, start, wait_share(opened, now))
            return
        self._open.append(_Open(pid, start, opened))

    def collect(self) -> None:
        """End the open windows: each process's share, kept for `attach`."""
        opened, self._open = self._open, []
        now = self._clock()
        for i, o in enumerate(opened):
            try:
                profile = o.window.finish()
            except BaseException:
                for rest in opened[i:]:
                    rest.window.close()
                raise
            self._keep(o.pid, o.start, wait_share(profile, now))

    def _keep(self, pid: int, start: int, share: WaitShare) -> None:
        key = (pid, start)
        self._latest.pop(key, None)
        if len(self._latest) >= MAX_KNOWN:
            del self._latest[next(iter(self._latest))]
        self._latest[key] = share

    def attach(self, sample: TreeSample) -> TreeSample:
        """`sample` with each measured process's latest share; processes gone are forgotten
        once the sample no longer holds them (pid and start time)."""
        if not self._latest:
            return sample
        alive = {(pid, p.start_ticks) for pid, p in sample.processes.items()}
        for key in [k for k in self._latest if k not in alive]:
            del self._latest[key]
        processes = dict(sample.processes)
        changed = False
        for pid, p in sample.processes.items():
            share = self._latest.get((pid, p.start_ticks))
            if share is not None and p.wait_share != share:
                processes[pid] = p._replace(wait_share=share)
                changed = True
        return sample._replace(processes=processes) if changed else sample

    def close(self) -> None:
        """Close open windows; the readers are released once."""
        opened, self._open = self._open, []
        for o in opened:
            o.window.close()
        if not self._closed:
            self._closed = True
            self._readers.release()


def busy_threads(p: ProcessRates, seconds: float) -> list[int]:
    """The threads of `p` runnable at least `BUSY_SHARE` of the interval, busiest first (at
    most `perfpc.MAX_THREADS`)."""
    if not p.thread_ids or len(p.thread_ids) != len(p.thread_runnable_s):
        return []
    floor = BUSY_SHARE * seconds
    pairs = zip(p.thread_runnable_s, p.thread_ids, strict=True)
    ranked = sorted(pairs, key=lambda rt: -rt[0])
    return [tid for runnable, tid in ranked if runnable >= floor][: perfpc.MAX_THREADS]
