"""`check`'s own words about a finished run: the closing lines of the stderr report and the
JSON report document, both from the one `CheckDecision`. Pure: the CLI (`cli.check.reports`)
writes them.
"""

from __future__ import annotations

from typing import Any

from oversub.core.errors import ExitStatus
from oversub.core.names import FailOn, Verdict
from oversub.core.plural import count
from oversub.core.results import CheckDecision, Gate, Summary


def closing_lines(decision: CheckDecision) -> list[str]:
    """The lines after the summary: what could not be written, how the command ended, then
    pass/FAIL and the exit code ("oversub check: FAIL: verdict oversubscribed, 1 costly
    finding: oversubscribed-pools (--fail-on costly), exit 1"; "oversub check: pass: verdict
    oversubscribed, no costly finding (--fail-on costly), exit 0"; `gate_phrase`). A report
    file or the recording that could not be written decides the exit 3 ("oversub check:
    error: verdict ok (--fail-on costly), but a file could not be written, exit 3"). Each
    line escaped for a terminal (`escape.terminal`: a path, a reason)."""
    from oversub.render.escape import terminal

    outcome = decision.outcome
    tail = [f"oversub check: error: {problem}" for problem in decision.problems]
    if outcome.command is not None:
        how = "ended by --timeout" if outcome.timed_out else f"exit status {outcome.command_status}"
        tail.append(f"oversub check: command {how}")
    tail.append(f"oversub check: {_verdict_line(decision)}, exit {int(decision.status)}")
    return [terminal(line) for line in tail]


def _verdict_line(decision: CheckDecision) -> str:
    """The last line of the report: pass/FAIL and the verdict, or why there is none."""
    summary, status = decision.outcome.summary, decision.status
    if summary.verdict is None:
        why = summary.not_judged or "nothing was measured"
        if status is ExitStatus.INTERRUPTED:
            return f"interrupted, not judged: {why}"
        return f"error: not judged: {why}"
    judged = gate_phrase(summary.verdict, decision.gate, how=by_episodes(summary))
    if status is ExitStatus.INTERRUPTED:
        return f"interrupted: {judged}"
    if decision.problems and status is ExitStatus.UNOBSERVABLE:
        return f"error: {judged}, but a file could not be written (above)"
    word = "FAIL" if status is ExitStatus.FOUND else "pass"
    return f"{word}: {judged}"


def by_episodes(summary: Summary) -> str:
    """ " in 6 episodes (26.0 s, 26% of the time measured)" when the run's episodes made its
    verdict (its leading finding is theirs: docs/rules.md, "Episodes"); "" otherwise."""
    first = summary.findings[0] if summary.findings else None
    if first is None or first.verdict is not summary.verdict or "episodes" not in first.evidence:
        return ""
    total = next((t for t in summary.episode_totals if t.verdict is summary.verdict), None)
    if total is None:
        return ""
    return (
        f" in {count(total.episodes, 'episode')} ({total.seconds:.1f} s, "
        f"{total.share:.0%} of the time measured)"
    )


def gate_phrase(verdict: Verdict, gate: Gate, *, how: str = "") -> str:
    """The verdict against the gate: "verdict starved (--fail-on oversubscribed)". Under
    `--fail-on costly` the verdict alone does not say why a run passes or fails, so the
    phrase adds the costly (critical) findings: "verdict oversubscribed, no costly finding
    (--fail-on costly)", "verdict oversubscribed, 1 costly finding: oversubscribed-pools
    (--fail-on costly)"; a verdict ok without one needs no such words. `how`: what made the
    verdict, after it (`by_episodes`)."""
    why = ""
    if gate.fail_on is FailOn.COSTLY:
        rules = ", ".join(dict.fromkeys(str(f.rule) for f in gate.failing))
        if gate.failing:
            why = f", {count(len(gate.failing), 'costly finding')}: {rules}"
        elif verdict is not Verdict.OK:
            why = ", no costly finding"
    return f"verdict {verdict.value}{how}{why} (--fail-on {gate.fail_on.value})"


def check_dict(decision: CheckDecision) -> dict[str, Any]:
    """The `--json` report: `serialize.summary_dict` plus `exit_status`, `fail_on` (the
    gate: "costly", "oversubscribed", "starved" or "at-risk"),
    `command` (list or null), `command_status` (negative: killed by that signal) and
    `timed_out`, then `serialize.identity_dict` (`node`, `launcher_env`) when known."""
    from oversub.render.serialize import identity_dict, summary_dict

    outcome = decision.outcome
    doc: dict[str, Any] = summary_dict(outcome.summary)
    doc.update(
        exit_status=int(decision.status),
        fail_on=decision.gate.fail_on.value,
        command=None if outcome.command is None else list(outcome.command),
        command_status=outcome.command_status,
        timed_out=outcome.timed_out,
    )
    if decision.identity is not None:
        doc.update(identity_dict(decision.identity))
    return doc
