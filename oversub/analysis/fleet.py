"""Many targets at once (`watch --all`, `serve`): which hold load, their state, their order.

Pure functions of an interval's results; the node loop (`run.node`) calls them.
"""

from __future__ import annotations

from oversub.core.names import Verdict
from oversub.core.results import Assessment, Interval
from oversub.core.rules import Rule

NOT_JUDGED = "not-judged"
"""The state of a target that could not be judged (docs/metrics.md)."""

STATES = ("oversubscribed", "starved", "at-risk", "ok", NOT_JUDGED)
"""Every state of a target's last interval, worst first."""


def state(assessment: Assessment) -> str:
    """The verdict as a state: `not-judged` when the kernel gave no run delay and no hazard
    fired (the analysis then says "ok" with a `no-schedstat` finding, which is no green)."""
    unmeasured = any(f.rule is Rule.NO_SCHEDSTAT for f in assessment.findings)
    if assessment.verdict is Verdict.OK and unmeasured:
        return NOT_JUDGED
    return assessment.verdict.value


def holds_load(interval: Interval, assessment: Assessment) -> bool:
    """Worth reporting in node mode: a thread was runnable at least `active_cpu` of the
    interval, or a rule fired (a hang holds no load and still matters)."""
    fired = any(f.rule is not Rule.NO_SCHEDSTAT for f in assessment.findings)
    return interval.totals.active_threads > 0 or fired


def rank(target: str, interval: Interval, assessment: Assessment) -> tuple[int, float, str]:
    """Sort key: worst state first, then the highest demand, then the target's name."""
    return (STATES.index(state(assessment)), -interval.totals.demand, target)


def worst_finding(assessment: Assessment) -> Rule | None:
    """The rule of the worst finding (findings come worst first), None when none fired."""
    return assessment.findings[0].rule if assessment.findings else None
