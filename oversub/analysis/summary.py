"""The whole run: per-process and tree means and peaks, and the run's verdict.

`RunSummary` folds intervals in as they come. It keeps one accumulator per process seen
and one for the tree, so memory grows with the number of processes, not with run length.
Each interval carries its raw deltas (CPU-seconds, delay-seconds, switches); they are
summed and divided by the time observed (`rates.measures`, the same formula as an
interval's), so means are time-weighted. An interval at the end of which no process of the
tree was alive adds nothing to the tree's means (the work done before the exit was not seen).

The run verdict is `assess()` on one whole-run `Interval` built from those sums, except
that active threads are *sustained peaks*: the most threads active at once for at least
`accumulators.SUSTAINED_SHARE` of the observed time. The at-risk rules ask what can
happen, so a mean would hide a pool that runs in bursts; a single interval would let one
hand-off spike of a helper thread (a DataLoader queue feeder waiting for a CPU) count as a
live pool.
"""

from __future__ import annotations

from oversub.analysis.accumulators import ProcessAccumulator, TreeAccumulator
from oversub.analysis.poolsize import pool_threads
from oversub.analysis.verdict import assess
from oversub.core.model import Budget
from oversub.core.names import Signal, Verdict
from oversub.core.results import (
    Assessment,
    HostRates,
    Interval,
    Summary,
    Totals,
)
from oversub.core.thresholds import Thresholds

NO_INTERVAL_NOTE = "no complete interval was sampled"
UNSEEN_NOTE = (
    "processes of the tree could not be read (hidden by /proc's hidepid, or refused): "
    "an ok would vouch for what was not seen (run as root or as their user)"
)
"""Why a run that ended before a second sample is not judged (nothing could be measured)."""


def unmeasured_summary(
    budget: Budget,
    root_pid: int,
    thresholds: Thresholds | None = None,
    *,
    note: str | None = None,
    assessment: Assessment | None = None,
    target_exited: bool = False,
    unavailable: tuple[Signal, ...] = (),
    notes: tuple[str, ...] = (),
) -> Summary:
    """A summary with no measurement behind it: a static preflight (judged by its
    `assessment`), or a run in which nothing could be measured (not judged: `note` says
    why, and is also a note of the run when given)."""
    return Summary(
        root_pid=root_pid,
        budget=budget,
        verdict=None if assessment is None else assessment.verdict,
        not_judged=(note or NO_INTERVAL_NOTE) if assessment is None else None,
        findings=() if assessment is None else assessment.findings,
        processes=(),
        totals=Totals.empty(),
        totals_peak=Totals.empty(),
        host=HostRates.unknown(),
        samples=0,
        duration_s=0.0,
        target_exited=target_exited,
        unavailable=unavailable,
        notes=notes if note is None else (*notes, note),
        thresholds=thresholds if thresholds is not None else Thresholds(),
    )


class RunSummary:
    """Accumulates intervals of one run; `result()` turns them into a `Summary`. No I/O."""

    def __init__(self, root_pid: int | None = None) -> None:
        """`root_pid`: the watched pid, so that a run with no interval still names it
        (without it, the budget's pid, which may be oversub's own)."""
        self._processes: dict[tuple[int, int | None], ProcessAccumulator] = {}
        """By process identity: pid and start time (a reused pid is another process)."""
        self._tree = TreeAccumulator()
        self._intervals = 0
        self._t0: float | None = None
        self._t1: float | None = None
        self._root_pid: int | None = root_pid
        self._vcpus: int | None = None
        self._unavailable: dict[Signal, None] = {}

    def add(self, interval: Interval) -> None:
        """Fold in one interval (in time order)."""
        seconds = interval.seconds
        if interval.totals.processes > 0:
            # An interval by whose end the whole tree had exited measured nothing: counting
            # it would let `check` pass a command it never saw running.
            self._intervals += 1
        if self._t0 is None:
            self._t0 = interval.t0
        self._t1 = interval.t1
        self._root_pid = interval.root_pid
        self._vcpus = interval.vcpus
        self._unavailable.update(dict.fromkeys(interval.unavailable))
        self._tree.add(interval)
        for p in interval.processes:
            key = (p.pid, p.start_ticks)
            acc = self._processes.get(key)
            if acc is None:
                acc = self._processes[key] = ProcessAccumulator(latest=p)
            acc.add(p, seconds)

    def result(
        self,
        budget: Budget,
        thresholds: Thresholds,
        *,
        target_exited: bool,
        notes: tuple[str, ...] = (),
    ) -> Summary:
        """The run so far: means, peaks, and the verdict of the whole run.

        `samples` counts complete intervals; with none, the run is not judged: no verdict,
        and `not_judged` says that nothing could be measured.
        """
        if self._intervals == 0 or self._t0 is None or self._t1 is None:  # nothing measured
            return unmeasured_summary(
                budget,
                self._root_pid if self._root_pid is not None else budget.pid,
                thresholds,
                target_exited=target_exited,
                unavailable=tuple(self._unavailable),
                notes=notes,
            )
        accs = list(self._processes.values())
        rates = [a.rates() for a in accs]
        order = sorted(range(len(accs)), key=lambda i: (-rates[i].cpu_percent, rates[i].pid))
        in_pools, with_pools = pool_threads(rates, budget.vcpus)
        # Pools at the end of the run (their latest live sizes), not a mean over intervals.
        totals = self._tree.totals()._replace(pool_threads=in_pools, pool_processes=with_pools)
        host = self._tree.host_rates()
        whole_run = Interval(
            t0=self._t0,
            t1=self._t1,
            root_pid=self._root_pid if self._root_pid is not None else budget.pid,
            vcpus=budget.vcpus,
            processes=tuple(rates[i] for i in order),
            totals=totals,
            host=host,
            unavailable=tuple(self._unavailable),
        )
        assessment = assess(whole_run, thresholds)
        processes = [accs[i].summary(rates[i]) for i in order]
        if target_exited:
            # The run ended because the root exited, after the last interval saw it alive:
            # the root's line must agree with `target_exited`.
            processes = [
                p._replace(exited=True) if p.pid == whole_run.root_pid else p for p in processes
            ]
        verdict: Verdict | None = assessment.verdict
        not_judged = None
        if verdict is Verdict.OK and Signal.PROCESSES in self._unavailable:
            # Nothing judged that was not seen: an oversubscribed verdict on what was seen
            # stands (the gap is named in `unavailable`), an ok would vouch for the rest.
            verdict, not_judged = None, UNSEEN_NOTE
        return Summary(
            root_pid=whole_run.root_pid,
            budget=budget,
            verdict=verdict,
            not_judged=not_judged,
            findings=assessment.findings,
            processes=tuple(processes),
            totals=totals,
            totals_peak=self._tree.totals_peak(),
            host=host,
            samples=self._intervals,
            duration_s=self._t1 - self._t0,
            target_exited=target_exited,
            unavailable=tuple(self._unavailable),
            notes=notes,
            thresholds=thresholds,
        )
