"""Many targets at once (`watch --all`, `serve`): which hold load, their state, their order.

Pure functions of an interval's results; the one loop (`run.session.follow`) calls them.
"""

from __future__ import annotations

from oversub.core.names import Signal, Verdict
from oversub.core.results import Assessment, Interval
from oversub.core.rules import Rule

NOT_JUDGED = "not-judged"
"""The state of a target that could not be judged (docs/metrics.md)."""

STATES = ("oversubscribed", "starved", "at-risk", "ok", NOT_JUDGED)
"""Every state of a target's last interval, worst first."""


def state(assessment: Assessment, interval: Interval | None = None) -> str:
    """The verdict as a state: `not-judged` for an "ok" that is no green, when the kernel
    gave no run delay and no hazard fired (a `no-schedstat` finding) or when processes of the
    target could not be read (`processes` in the interval's `unavailable`: a hidepid /proc,
    refused task directories): an ok is never given for a target not seen whole."""
    unmeasured = any(f.rule is Rule.NO_SCHEDSTAT for f in assessment.findings)
    unseen = interval is not None and Signal.PROCESSES in interval.unavailable
    if assessment.verdict is Verdict.OK and (unmeasured or unseen):
        return NOT_JUDGED
    return assessment.verdict.value


def holds_load(interval: Interval, assessment: Assessment) -> bool:
    """Worth reporting in node mode: a thread was runnable at least `active_cpu` of the
    interval, or a rule fired (a hang holds no load and still matters)."""
    fired = any(f.rule is not Rule.NO_SCHEDSTAT for f in assessment.findings)
    return interval.totals.active_threads > 0 or fired


def rank(target: str, interval: Interval, assessment: Assessment) -> tuple[int, float, str]:
    """Sort key: worst state first, then the highest demand, then the target's name."""
    return (STATES.index(state(assessment, interval)), -interval.totals.demand, target)
