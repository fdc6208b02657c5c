"""The rule catalogue: every rule a finding can carry, in report order, once.

The run-time rules (`analysis.verdict.assess`, over an interval or a whole run) and the
static preflight's (`analysis.preflight.preflight`, over a plan). Reports are built from
this table (JUnit lists one test case per rule of the mode that ran), and tests check the
the two rule tables of docs/rules.md and the `assess` docstring against it, so a rule added here and
not documented fails the build.

To add a rule: a member of `Rule` (its value is the public id, in JSON and reports), an
entry in `RUNTIME_RULES` or `PREFLIGHT_RULES` at its place in report order, the function
that fires it in `oversub/analysis/`, and a row in docs/rules.md's table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.names import Name, Verdict


class Rule(Name):
    """Stable rule ids (the `rule` of every finding in JSON, JUnit, Markdown, annotations)."""

    OVERSUBSCRIBED_POOLS = "oversubscribed-pools"
    OVERSUBSCRIBED_THREADS = "oversubscribed-threads"
    OVERSUBSCRIBED_PROCESSES = "oversubscribed-processes"
    DEMAND_EXCEEDS_BUDGET = "demand-exceeds-budget"
    STARVED_QUOTA = "starved-quota"
    STARVED_OUTSIDE = "starved-outside"
    STARVED_UNATTRIBUTED = "starved-unattributed"
    BUSY_THREADS_EXCEED = "busy-threads-exceed"
    POOL_DEFAULT = "pool-default"
    FORK_HANG = "fork-hang"
    FORK_AFTER_THREADS = "fork-after-threads"
    ORPHAN = "orphan"
    NO_SCHEDSTAT = "no-schedstat"
    PREFLIGHT_OVERSUBSCRIBED = "preflight-oversubscribed"
    PREFLIGHT_WORKERS = "preflight-workers"
    PREFLIGHT_IDLE = "preflight-idle"


class RuleInfo(NamedTuple):
    """What the catalogue says of one rule."""

    rule: Rule
    severity: str
    """Its severity as docs/rules.md's table gives it ("critical", "critical when T ≥ 2, else
    warning")."""
    verdict: Verdict
    """The verdict its findings argue for."""
    summary: str
    """One line: what it means (the description of its JUnit test case)."""


def _table(*entries: RuleInfo) -> Mapping[Rule, RuleInfo]:
    return {entry.rule: entry for entry in entries}


RUNTIME_RULES: Mapping[Rule, RuleInfo] = _table(
    RuleInfo(
        Rule.OVERSUBSCRIBED_POOLS,
        "critical",
        Verdict.OVERSUBSCRIBED,
        "Demand exceeds the CPUs and processes run multi-thread native pools",
    ),
    RuleInfo(
        Rule.OVERSUBSCRIBED_THREADS,
        "warning",
        Verdict.OVERSUBSCRIBED,
        "Demand exceeds the CPUs through threads that cost little to share: application "
        "threads, pools whose threads sleep, the GIL, communication threads",
    ),
    RuleInfo(
        Rule.OVERSUBSCRIBED_PROCESSES,
        "warning",
        Verdict.OVERSUBSCRIBED,
        "More single-thread processes than CPUs keep demand above them",
    ),
    RuleInfo(
        Rule.DEMAND_EXCEEDS_BUDGET,
        "warning",
        Verdict.AT_RISK,
        "Demand exceeds the budget but threads do not wait",
    ),
    RuleInfo(
        Rule.STARVED_QUOTA,
        "warning",
        Verdict.STARVED,
        "The cgroup CPU quota throttles the tree",
    ),
    RuleInfo(
        Rule.STARVED_OUTSIDE,
        "warning",
        Verdict.STARVED,
        "Other processes or hypervisor steal take the CPUs the tree waits for",
    ),
    RuleInfo(
        Rule.STARVED_UNATTRIBUTED,
        "info",
        Verdict.STARVED,
        "The tree's threads wait for CPUs and no measured load explains it",
    ),
    RuleInfo(
        Rule.BUSY_THREADS_EXCEED,
        "warning",
        Verdict.AT_RISK,
        "More threads are busy than there are CPUs",
    ),
    RuleInfo(
        Rule.POOL_DEFAULT,
        "warning",
        Verdict.AT_RISK,
        "Pools in several processes add up to more threads than CPUs, even idle",
    ),
    RuleInfo(
        Rule.FORK_HANG,
        "critical",
        Verdict.AT_RISK,
        "A child forked after an OpenMP region sits idle: the libgomp fork hang",
    ),
    RuleInfo(
        Rule.FORK_AFTER_THREADS,
        "info",
        Verdict.OK,
        "Processes forked from a multi-threaded parent",
    ),
    RuleInfo(Rule.ORPHAN, "warning", Verdict.AT_RISK, "A busy process whose parent has exited"),
    RuleInfo(
        Rule.NO_SCHEDSTAT,
        "info",
        Verdict.OK,
        "Run delay is unavailable, so oversubscription cannot be measured",
    ),
)
"""The rules of a measured run, in report order (worst first where verdicts tie)."""

PREFLIGHT_RULES: Mapping[Rule, RuleInfo] = _table(
    RuleInfo(
        Rule.PREFLIGHT_OVERSUBSCRIBED,
        "critical when T ≥ 2, else warning",
        Verdict.OVERSUBSCRIBED,
        "The main processes' threads alone need more CPUs than the budget: M*T > N "
        "(critical when T >= 2, because OpenMP teams that share CPUs spin).",
    ),
    RuleInfo(
        Rule.PREFLIGHT_WORKERS,
        "critical when T ≥ 2, else warning",
        Verdict.OVERSUBSCRIBED,
        "The main processes fit (M*T <= N) but their workers push the total over: M*(T+W) > N.",
    ),
    RuleInfo(
        Rule.PREFLIGHT_IDLE,
        "info",
        Verdict.OK,
        "The configuration leaves CPUs idle: a larger T = floor((N - M*W) / M) would still fit.",
    ),
)
"""The rules of the static preflight (`check --procs M --threads T`): at most one fires."""

REPORT_ORDER: Mapping[Rule, int] = {
    rule: i for i, rule in enumerate([*RUNTIME_RULES, *PREFLIGHT_RULES])
}
"""Rule -> its place in reports (findings of equal verdict and severity sort by it)."""
