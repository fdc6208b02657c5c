"""`check`'s pass/fail policy: which runs are judged, what fails, and the exit status.

The one place that decides it: the stderr report, the JSON, JUnit and Markdown reports and
the GitHub annotations all show the `Gate` computed here, and `exit_status` turns the
outcome into the documented code (docs/guarantees.md, "Exit codes"). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

from oversub.core.errors import ExitStatus
from oversub.core.names import Verdict
from oversub.core.results import CheckOutcome, Gate, Summary


def fails(verdict: Verdict, fail_on: Verdict) -> bool:
    """A verdict (of a run or of one finding) fails the build when it is at least as bad as
    `--fail-on`; "ok" never fails."""
    return verdict is not Verdict.OK and verdict.rank >= fail_on.rank


def gate(summary: Summary, fail_on: Verdict) -> Gate:
    """The findings of a judged run that fail at `fail_on` (none when it is not judged:
    nothing passes or fails without a verdict)."""
    if not summary.judged:
        return Gate(fail_on, ())
    return Gate(fail_on, tuple(f for f in summary.findings if fails(f.verdict, fail_on)))


def exit_status(outcome: CheckOutcome, fail_on: Verdict) -> ExitStatus:
    """The documented exit code for a finished check (docs/guarantees.md, "Exit codes")."""
    if outcome.interrupted:
        return ExitStatus.INTERRUPTED
    verdict = outcome.summary.verdict
    if verdict is None:
        # Not judged (nothing measured, or the command failed): a gate must not pass blind.
        return ExitStatus.UNOBSERVABLE
    return ExitStatus.FOUND if fails(verdict, fail_on) else ExitStatus.OK


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
    return dataclasses.replace(
        outcome, summary=dataclasses.replace(s, verdict=None, not_judged=reason)
    )
