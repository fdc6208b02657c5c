"""A recording read back and judged again: the same pure functions as a live run.

`parse` turns the records of a recording (already split into lines) into a `Recording`;
`reassess` judges it under any thresholds: each interval is counted (`rates.counted`, as a
live interval is) and assessed (`verdict.assess`), the run is folded by `summary.RunSummary`
and, for `check`, judged by `policy.judge`, exactly as the live run did. With the
recording's own thresholds the verdict and findings are the recorded ones.

`merge` joins two consecutive intervals into one (the recorder's way to stay under its size
bound): the raw deltas are sums, so every mean over the run is unchanged; peaks and the
sustained active threads are then those of the coarser intervals.
"""

from __future__ import annotations

from collections.abc import Iterable

from oversub.analysis.accumulators import most
from oversub.analysis.fields import BadRecord, loads
from oversub.analysis.ownercounts import add_switches
from oversub.analysis.policy import judge
from oversub.analysis.rates import Measures, counted, measures, tree_totals
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.core.errors import NotARecording
from oversub.core.results import CheckOutcome, HostRates, Interval, ProcessRates, Totals
from oversub.core.thresholds import Thresholds
from oversub.recording.format import Decoder, bad, ending_of, header_of
from oversub.recording.types import Ending, Recording, Replay

CUT_NOTE = "the recording ends early (the run was killed): this is the part that was written"


def parse(lines: Iterable[str], *, cut: bool = False) -> Recording:
    """A recording from its lines (without the cut last line, when `cut`).

    NotARecording (naming the line) for anything but a header, intervals and at most one
    summary, last."""
    decoder = Decoder()
    intervals: list[Interval] = []
    stamps: list[str] = []
    ending: Ending | None = None
    header = None
    number = 0
    for number, line in enumerate(lines, start=1):
        try:
            record = loads(line)
            if header is None:
                header = header_of(record)
                continue
            if ending is not None:
                raise BadRecord("a record after the summary")
            kind = record.get("type")
            if kind == "interval":
                iv, stamp = decoder.interval(record)
                if intervals and iv.t0 < intervals[-1].t1:
                    raise BadRecord("intervals out of order")
                intervals.append(iv)
                stamps.append(stamp)
            elif kind == "summary":
                ending = ending_of(record)
            else:
                raise BadRecord(f"unknown record type {kind!r}")
        except BadRecord as exc:
            raise bad(number, exc) from None
    if header is None:
        raise NotARecording("empty file: not an oversub recording")
    return Recording(header, tuple(intervals), tuple(stamps), ending, cut=cut)


def reassess(recording: Recording, thresholds: Thresholds | None = None) -> Replay:
    """The recording judged under `thresholds` (default: the recording's own)."""
    h = recording.header
    th = thresholds if thresholds is not None else h.thresholds
    ending = recording.ending
    root = recording.intervals[0].root_pid if recording.intervals else h.pid
    run = RunSummary(root_pid=root, thresholds=th)
    intervals = []
    assessments = []
    for raw in recording.intervals:
        iv = counted(raw, th)
        a = assess(iv, th)
        intervals.append(iv)
        assessments.append(a)
        run.add(iv, a)
    notes = ending.notes if ending is not None else (CUT_NOTE,)
    summary = run.result(
        h.budget, th, target_exited=ending is not None and ending.target_exited, notes=notes
    )
    if recording.check:
        outcome = judge(
            CheckOutcome(
                summary=summary,
                command=h.command,
                command_status=None if ending is None else ending.command_status,
                timed_out=ending is not None and ending.timed_out,
                interrupted=ending is not None and ending.interrupted,
            )
        )
        summary = outcome.summary
    metrics = () if ending is None else ending.metrics
    return Replay(recording, th, tuple(intervals), tuple(assessments), summary, metrics)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _add_count(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _summed(a: ProcessRates | Totals, b: ProcessRates | Totals, seconds: float) -> Measures:
    """Rates of two consecutive intervals' raw deltas added: exact, the deltas are sums."""
    return measures(
        seconds,
        a.cpu_s + b.cpu_s,
        _add(a.delay_s, b.delay_s),
        _add_count(a.involuntary_ctx, b.involuntary_ctx),
        _add_count(a.voluntary_ctx, b.voluntary_ctx),
    )


def _merge_process(a: ProcessRates | None, b: ProcessRates | None, seconds: float) -> ProcessRates:
    """One process over two consecutive intervals (seen in either or both)."""
    if a is None or b is None:
        only = a if a is not None else b
        assert only is not None
        m = measures(seconds, only.cpu_s, only.delay_s, only.involuntary_ctx, only.voluntary_ctx)
        return only._replace(**m._asdict())
    runnable: dict[int, float] = {}
    switches: dict[int, tuple[int, int]] | None = {}
    for p in (a, b):
        for tid, r in zip(p.thread_ids, p.thread_runnable_s, strict=True):
            runnable[tid] = runnable.get(tid, 0.0) + r
        if switches is not None:
            switches = add_switches(switches, p)
    m = _summed(a, b, seconds)
    # What the process is, and whether it is gone, at the end of the second interval.
    return b._replace(
        thread_ids=tuple(runnable),
        thread_runnable_s=tuple(runnable.values()),
        thread_switches=()
        if switches is None
        else tuple(switches.get(tid, (0, 0)) for tid in runnable),
        parent_threads_at_start=most(a.parent_threads_at_start, b.parent_threads_at_start),
        **m._asdict(),
    )


def _merge_host(a: HostRates, b: HostRates, sa: float, sb: float) -> HostRates:
    def mean(x: float | None, y: float | None) -> float | None:
        # Time-weighted over the part where it is known (as the run summary's host means).
        known = [(v, s) for v, s in ((x, sa), (y, sb)) if v is not None]
        if not known:
            return None
        return sum(v * s for v, s in known) / sum(s for _, s in known)

    return HostRates(
        outside_cpus=mean(a.outside_cpus, b.outside_cpus),
        steal_cpus=mean(a.steal_cpus, b.steal_cpus),
        psi_some=mean(a.psi_some, b.psi_some),
        throttled_ratio=mean(a.throttled_ratio, b.throttled_ratio),
        throttled_s=_add(a.throttled_s, b.throttled_s),
    )


def merge(a: Interval, b: Interval) -> Interval:
    """Two consecutive intervals as one (from `a.t0` to `b.t1`)."""
    seconds = b.t1 - a.t0
    before = {(p.pid, p.start_ticks): p for p in a.processes}
    after = {(p.pid, p.start_ticks): p for p in b.processes}
    processes = [
        _merge_process(before.get(key), after.get(key), seconds) for key in {**before, **after}
    ]
    live = [p for p in processes if not p.exited]
    totals = tree_totals(
        _summed(a.totals, b.totals, seconds),
        live,
        b.vcpus,
        processes=b.totals.processes,
        threads=b.totals.threads,
        active=0,
    )
    return Interval(
        t0=a.t0,
        t1=b.t1,
        root_pid=b.root_pid,
        vcpus=b.vcpus,
        processes=tuple(sorted(processes, key=lambda r: (-r.cpu_percent, r.exited, r.pid))),
        totals=totals,
        host=_merge_host(a.host, b.host, a.seconds, b.seconds),
        unavailable=tuple(dict.fromkeys((*a.unavailable, *b.unavailable))),
    )
