"""`check`'s pass/fail policy: which runs are judged, what fails, and the exit status.

The one place that decides it (docs/cli.md, `--fail-on`): `--fail-on costly`, the default,
fails a judged run with a critical finding, what costs multiples; `oversubscribed`,
`starved` and `at-risk` fail a judged run whose verdict is at least that bad, so
`--fail-on oversubscribed` fails on any oversubscription, cheap or not. The stderr report,
the JSON, JUnit and Markdown reports and the GitHub annotations all show the `Gate`
computed here, `exit_status` turns the outcome into the documented code (docs/guarantees.md,
"Exit codes"), `decide` makes the three one `CheckDecision`, and `merge` fails a node by
`fails`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from oversub.core.errors import ExitStatus
from oversub.core.names import FailOn, Severity, Verdict
from oversub.core.origin import NodeIdentity
from oversub.core.results import CheckDecision, CheckOutcome, Gate, Summary


class Graded(Protocol):
    """A finding as the gate sees it: a `Finding` of a run, or a `NodeFinding` of a
    report read back by `merge`."""

    @property
    def verdict(self) -> Verdict: ...

    @property
    def severity(self) -> Severity: ...


def finding_fails(finding: Graded, fail_on: FailOn) -> bool:
    """A finding of a judged run fails the build: under `costly` when its severity is
    critical (what costs multiples, docs/rules.md), else when the verdict it argues for is
    at least as bad as `--fail-on` ("ok" never fails)."""
    bar = fail_on.verdict
    if bar is None:
        return finding.severity is Severity.CRITICAL
    return finding.verdict is not Verdict.OK and finding.verdict.rank >= bar.rank


def fails(verdict: Verdict | None, findings: Iterable[Graded], fail_on: FailOn) -> bool:
    """A run (or one node's report) fails the build: it is judged (`verdict` not None) and
    either `--fail-on costly` and one of its findings is critical, or its verdict is at
    least as bad as the verdict `--fail-on` names. A run not judged neither passes nor
    fails (`exit_status`: 3)."""
    if verdict is None:
        return False
    bar = fail_on.verdict
    if bar is None:
        return any(finding_fails(f, fail_on) for f in findings)
    return verdict is not Verdict.OK and verdict.rank >= bar.rank


def gate(summary: Summary, fail_on: FailOn) -> Gate:
    """The findings of a judged run that fail at `fail_on` (none when it is not judged:
    nothing passes or fails without a verdict)."""
    if not summary.judged:
        return Gate(fail_on, ())
    return Gate(fail_on, tuple(f for f in summary.findings if finding_fails(f, fail_on)))


def exit_status(outcome: CheckOutcome, fail_on: FailOn) -> ExitStatus:
    """The documented exit code for a finished check (docs/guarantees.md, "Exit codes")."""
    if outcome.interrupted:
        return ExitStatus.INTERRUPTED
    s = outcome.summary
    if s.verdict is None:
        # Not judged (nothing measured, or the command failed): a gate must not pass blind.
        return ExitStatus.UNOBSERVABLE
    return ExitStatus.FOUND if fails(s.verdict, s.findings, fail_on) else ExitStatus.OK


def judge(outcome: CheckOutcome) -> CheckOutcome:
    """The outcome with the reason it is not judged, when it is not.

    A command that failed (not by --timeout) ran broken: what was measured says nothing
    about the job, so the run keeps its findings (what was seen) but loses its verdict. A
    run with nothing measured names what ended too soon. A preflight is always judged.
    """
    s = outcome.summary
    code = outcome.command_status
    reason: str | None = None
    if outcome.static:
        return outcome
    if outcome.interrupted:
        # Our own stop signal ended the command: its status says nothing about it.
        reason = None if s.samples else "interrupted before anything was measured"
    elif code not in (None, 0) and not outcome.timed_out:
        assert code is not None
        how = f"was killed by signal {-code}" if code < 0 else f"failed with exit status {code}"
        reason = f"the command {how}"
    elif s.samples == 0 and outcome.command is not None:
        reason = (
            "nothing was measured: the command exited before a full interval was sampled "
            "after the warm-up; run it longer than --warmup + --interval"
        )
    elif s.samples == 0:
        reason = "nothing was measured: the target exited before a full interval"
    if reason is None:
        return outcome
    return outcome._replace(summary=s._replace(verdict=None, not_judged=reason))


def decide(
    outcome: CheckOutcome, fail_on: FailOn, identity: NodeIdentity | None = None
) -> CheckDecision:
    """`check`'s answer, once: the outcome judged, its exit status and its gate."""
    judged = judge(outcome)
    return CheckDecision(
        judged, exit_status(judged, fail_on), gate(judged.summary, fail_on), identity
    )
