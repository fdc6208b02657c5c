"""`check`'s answer: whether a run is judged, its exit status, and every report of it.

The stderr report (the verdict first, so that a report file that cannot be written never
hides it), GitHub annotations, and the --json, --junit, --markdown files and job summary
(written by `reportfiles`). Kept apart from `check`, which runs the three modes.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from oversub import stopsignals
from oversub.errors import ExitStatus
from oversub.model import Verdict
from oversub.results import Summary

if TYPE_CHECKING:
    from oversub.check import CheckOptions

__all__ = ["Outcome", "exit_status", "fails", "judge", "report", "warn"]


@dataclass
class Outcome:
    summary: Summary
    command: list[str] | None = None
    command_status: int | None = None
    """The command's exit status; negative = killed by that signal."""
    timed_out: bool = False
    interrupted: bool = False
    static: bool = False
    """A preflight: samples are not expected."""


def fails(verdict: Verdict, fail_on: Verdict) -> bool:
    """A verdict fails the build when it is at least as bad as `--fail-on`."""
    return verdict is not Verdict.OK and verdict.rank >= fail_on.rank


def exit_status(outcome: Outcome, fail_on: Verdict) -> ExitStatus:
    """The documented exit code for a finished check (see README, "Exit codes")."""
    if outcome.interrupted:
        return ExitStatus.INTERRUPTED
    verdict = outcome.summary.verdict
    if verdict is None:
        # Not judged (nothing measured, or the command failed): a gate must not pass blind.
        return ExitStatus.UNOBSERVABLE
    return ExitStatus.FOUND if fails(verdict, fail_on) else ExitStatus.OK


def judge(outcome: Outcome) -> Outcome:
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


def warn(err: TextIO, message: str) -> None:
    from oversub.render.escape import terminal

    err.write(f"oversub check: warning: {terminal(message)}\n")
    err.flush()


def report(
    outcome: Outcome,
    opts: CheckOptions,
    *,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> ExitStatus:
    """Print the stderr report and annotations, then write every requested report file.

    The verdict is printed first, so a report that cannot be written (ReportError, exit 3)
    never hides it. A GITHUB_STEP_SUMMARY that cannot be appended to is only a warning.
    Stop signals wait until every file is written (none is left half-written), then make
    the exit 130.
    """
    out = err if err is not None else sys.stderr
    with stopsignals.deferred() as during:
        status = _report(judge(outcome), opts, out, environ)
    if during.received and status is not ExitStatus.INTERRUPTED:
        out.write("oversub check: interrupted, exit 130\n")
        out.flush()
        return ExitStatus.INTERRUPTED
    return status


def _report(
    outcome: Outcome, opts: CheckOptions, err: TextIO, environ: Mapping[str, str] | None
) -> ExitStatus:
    from oversub.render.markdown import summary_markdown
    from oversub.reportfiles import append_step_summary, write_atomic

    env = environ if environ is not None else os.environ
    status = exit_status(outcome, opts.fail_on)
    s = outcome.summary
    _print_report(outcome, status, opts, err)
    if env.get("GITHUB_ACTIONS") == "true":
        from oversub.render.github import annotations

        for line in annotations(s, fail_on=opts.fail_on):
            err.write(line + "\n")
    err.flush()
    if opts.json_path is not None:
        write_atomic("--json", opts.json_path, _json_report(outcome, status, opts))
    if opts.junit_path is not None:
        from oversub.render.junit import summary_junit

        write_atomic("--junit", opts.junit_path, summary_junit(s, fail_on=opts.fail_on))
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if opts.markdown_path is None and not step_summary:
        return status

    def markdown(max_bytes: int | None = None) -> str:
        return summary_markdown(
            s,
            command=outcome.command,
            exit_status=int(status),
            command_status=outcome.command_status,
            fail_on=opts.fail_on,
            max_bytes=max_bytes,
        )

    if opts.markdown_path is not None:
        write_atomic("--markdown", opts.markdown_path, markdown())
    if step_summary:
        problem = append_step_summary(step_summary, markdown)
        if problem is not None:
            # The job summary is a courtesy of the CI page; the gate's answer stands.
            warn(err, problem)
    return status


def _json_report(outcome: Outcome, status: ExitStatus, opts: CheckOptions) -> str:
    from oversub.render.serialize import summary_dict, to_json

    doc: dict[str, Any] = summary_dict(outcome.summary)
    doc.update(
        exit_status=int(status),
        fail_on=opts.fail_on.value,
        command=outcome.command,
        command_status=outcome.command_status,
        timed_out=outcome.timed_out,
    )
    return to_json(doc, indent=2) + "\n"


def _print_report(outcome: Outcome, status: ExitStatus, opts: CheckOptions, err: TextIO) -> None:
    from oversub.render.escape import terminal

    s = outcome.summary
    tail = []
    if outcome.command is not None:
        how = "ended by --timeout" if outcome.timed_out else f"exit status {outcome.command_status}"
        tail.append(f"oversub check: command {how}")
    tail.append(f"oversub check: {_verdict_line(outcome, status, opts)}, exit {int(status)}")
    if err.isatty():
        from rich.text import Text

        from oversub.render.live import summary_renderable
        from oversub.views import make_console

        # Through the console, so the closing lines wrap to the terminal like the report.
        console = make_console(stderr=True)
        console.print(summary_renderable(s))
        for line in tail:
            console.print(Text(terminal(line)))
    else:
        from oversub.render.live import summary_text

        # CI logs: one unwrapped line each, so `grep 'oversub check:'` finds the outcome.
        err.write("\n".join([summary_text(s), *map(terminal, tail)]) + "\n")


def _verdict_line(outcome: Outcome, status: ExitStatus, opts: CheckOptions) -> str:
    """The last line of the report: pass/FAIL and the verdict, or why there is none."""
    s = outcome.summary
    if s.verdict is None:
        why = s.not_judged or "nothing was measured"
        if status is ExitStatus.INTERRUPTED:
            return f"interrupted, not judged: {why}"
        return f"error: not judged: {why}"
    judged = f"verdict {s.verdict.value} (--fail-on {opts.fail_on.value})"
    if status is ExitStatus.INTERRUPTED:
        return f"interrupted: {judged}"
    word = "FAIL" if status is ExitStatus.FOUND else "pass"
    return f"{word}: {judged}"
