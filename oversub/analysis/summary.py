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

A bursty run averages its bursts away, so the run also keeps its episodes (`episodes`:
stretches of intervals oversubscribed or starved, each judged on its own intervals): when
they fill enough of the run (the rule of docs/rules.md, "Episodes") and their verdict is
worse than the whole run's, it is the run's verdict, and their finding leads.
"""

from __future__ import annotations

from oversub.analysis.accumulators import Span
from oversub.analysis.episodes import Episodes, own_wait, run_finding, with_nesting
from oversub.analysis.verdict import assess
from oversub.core.model import Budget
from oversub.core.names import Signal, Verdict
from oversub.core.results import (
    Assessment,
    HostRates,
    Interval,
    ProcessRates,
    Summary,
    Totals,
)
from oversub.core.rules import Rule
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

    def __init__(self, root_pid: int | None = None, thresholds: Thresholds | None = None) -> None:
        """`root_pid`: the watched pid, so that a run with no interval still names it
        (without it, the budget's pid, which may be oversub's own). `thresholds`: those of
        the assessments `add` is given (its episodes are judged with them), the defaults
        when not given; `result` should be given the same."""
        self._span = Span()
        """The whole run (`accumulators.Span`)."""
        self._latest: dict[int, ProcessRates] = {}
        """pid -> its latest rates: who each process is and who started it (episodes)."""
        self._thresholds = thresholds if thresholds is not None else Thresholds()
        self._episodes = Episodes(self._thresholds)
        self._intervals = 0
        self._root_pid: int | None = root_pid

    def add(self, interval: Interval, assessment: Assessment | None = None) -> None:
        """Fold in one interval (in time order), with its assessment (`verdict.assess` under
        the run's thresholds; made here when not given)."""
        if interval.totals.processes > 0:
            # An interval by whose end the whole tree had exited measured nothing: counting
            # it would let `check` pass a command it never saw running.
            self._intervals += 1
        self._root_pid = interval.root_pid
        self._span.add(interval)
        latest = self._latest
        for p in interval.processes:
            latest[p.pid] = p
        if assessment is None:
            assessment = assess(interval, self._thresholds)
        worst = assessment.findings[0] if assessment.findings else None
        self._episodes.add(interval, assessment.verdict, worst, latest)

    def result(
        self,
        budget: Budget,
        thresholds: Thresholds,
        *,
        target_exited: bool,
        notes: tuple[str, ...] = (),
    ) -> Summary:
        """The run so far: means, peaks, its episodes and the verdict of the whole run.

        `samples` counts complete intervals; with none, the run is not judged: no verdict,
        and `not_judged` says that nothing could be measured. The verdict is the whole
        run's, or the verdict of its episodes when they make it (`episodes`, the rule of
        docs/rules.md) and it is worse: their finding then leads the findings.
        """
        span = self._span
        unavailable = tuple(span.unavailable)
        if self._intervals == 0 or span.t0 is None or span.t1 is None:  # nothing measured
            return unmeasured_summary(
                budget,
                self._root_pid if self._root_pid is not None else budget.pid,
                thresholds,
                target_exited=target_exited,
                unavailable=unavailable,
                notes=notes,
            )
        root = self._root_pid if self._root_pid is not None else budget.pid
        whole_run, pairs = span.whole(budget.vcpus, root)
        assessment = assess(whole_run, thresholds)
        processes = [acc.summary(rates) for acc, rates in pairs]
        if target_exited:
            # The run ended because the root exited, after the last interval saw it alive:
            # the root's line must agree with `target_exited`.
            processes = [
                p._replace(exited=True) if p.pid == whole_run.root_pid else p for p in processes
            ]
        measured = span.tree.work.seconds
        episodes, totals = self._episodes.result(self._latest, measured)
        verdict: Verdict | None = assessment.verdict
        findings = list(assessment.findings)
        by_verdict = {t.verdict: t for t in totals}
        for total in totals:  # oversubscribed first
            if total.counts and total.verdict.rank > assessment.verdict.rank:
                worst = max(
                    (e for e in episodes if e.verdict is total.verdict),
                    key=lambda e: (e.finding.severity.rank, e.seconds),
                )
                findings.insert(0, run_finding(total, worst, measured, thresholds))
                verdict = total.verdict
                break
        else:  # the whole run's verdict stands: its finding names what its episodes show
            findings = [with_nesting(f, episodes) if i == 0 else f for i, f in enumerate(findings)]
        findings = [
            own_wait(f, by_verdict.get(Verdict.OVERSUBSCRIBED), whole_run.totals.delay_s)
            if f.rule is Rule.STARVED_UNATTRIBUTED
            else f
            for f in findings
        ]
        not_judged = None
        if verdict is Verdict.OK and Signal.PROCESSES in span.unavailable:
            # Nothing judged that was not seen: an oversubscribed verdict on what was seen
            # stands (the gap is named in `unavailable`), an ok would vouch for the rest.
            verdict, not_judged = None, UNSEEN_NOTE
        return Summary(
            root_pid=whole_run.root_pid,
            budget=budget,
            verdict=verdict,
            not_judged=not_judged,
            findings=tuple(findings),
            processes=tuple(processes),
            totals=whole_run.totals,
            totals_peak=span.tree.totals_peak(),
            host=whole_run.host,
            samples=self._intervals,
            duration_s=span.t1 - span.t0,
            target_exited=target_exited,
            unavailable=unavailable,
            notes=notes,
            thresholds=thresholds,
            episodes=episodes,
            episode_totals=totals,
        )
