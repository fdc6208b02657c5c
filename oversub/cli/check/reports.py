"""`check`'s answer, written: the stderr report, GitHub annotations, the --json, --junit and
--markdown files and the job summary.

The summary and its verdict are printed first, so a file that cannot be written never hides
them; the closing lines last, once every file is written, so that they state the exit
status the process returns. What
fails and the exit status come from `analysis.policy`; the words from `oversub.render`;
the files are written by `reportfiles` (atomically, checked before the run).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from oversub.core.errors import ExitStatus
from oversub.run import stopsignals

if TYPE_CHECKING:
    from rich.console import Console

    from oversub.cli.check.request import CheckOptions
    from oversub.cli.reportfiles import Replacement
    from oversub.core.results import CheckOutcome, Gate


def warn(err: TextIO, message: str) -> None:
    from oversub.render.escape import terminal

    err.write(f"oversub check: warning: {terminal(message)}\n")
    err.flush()


def prepare_reports(
    opts: CheckOptions, err: TextIO | None
) -> tuple[CheckOptions, Mapping[str, str] | None]:
    """Before anything runs: refuse report paths that cannot be written (UsageError naming
    flag and path; a run of minutes must not end in "cannot write"), and warn now, once,
    about a job summary file that cannot take the report. Returns the options with each
    report path resolved to the file it replaces (`reportfiles`' link policy, decided once)
    and the environment `report` should then use (None: ours)."""
    import dataclasses

    from oversub.cli.identity import read_identity
    from oversub.cli.options import REPORTS
    from oversub.cli.reportfiles import check_report_path, step_summary_problem

    read_identity(os.environ)  # a bad OVERSUB_NODE is a usage error before the run
    resolved: dict[str, Any] = {}
    for option in REPORTS:
        path = getattr(opts, option.name)
        if path is not None:
            resolved[option.name] = check_report_path(option.flag, path)
    opts = dataclasses.replace(opts, **resolved)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    problem = step_summary_problem(step_summary) if step_summary else None
    if problem is None:
        return opts, None
    warn(err if err is not None else sys.stderr, problem)
    return opts, {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}


def report(
    outcome: CheckOutcome,
    opts: CheckOptions,
    *,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    failure: str | None = None,
) -> ExitStatus:
    """Judge the outcome, print the summary and annotations, write every requested report
    file, then the closing lines; the exit status.

    The closing lines come last, so that they state the status the process returns: a
    report that cannot be written, or the recording's `failure` (it could not be written
    whole), makes it exit 3, and the line says so. A GITHUB_STEP_SUMMARY that cannot be
    appended to is only a warning. Stop signals wait until every file is written (none is
    left half-written), then make the exit 130.
    """
    from oversub.analysis.policy import judge

    out = err if err is not None else sys.stderr
    with stopsignals.deferred() as during:
        status = _report(judge(outcome), opts, out, environ, failure)
    if during.received and status is not ExitStatus.INTERRUPTED:
        out.write("oversub check: interrupted, exit 130\n")
        out.flush()
        return ExitStatus.INTERRUPTED
    return status


def _report(
    outcome: CheckOutcome,
    opts: CheckOptions,
    err: TextIO,
    environ: Mapping[str, str] | None,
    failure: str | None,
) -> ExitStatus:
    from oversub.analysis.policy import exit_status, gate
    from oversub.core.errors import ReportError

    env = environ if environ is not None else os.environ
    status = exit_status(outcome, opts.fail_on)
    problems = [] if failure is None else [failure]
    if failure is not None and status is not ExitStatus.INTERRUPTED:
        status = ExitStatus.UNOBSERVABLE
    judged = gate(outcome.summary, opts.fail_on)
    console = _print_summary(outcome, err)
    if env.get("GITHUB_ACTIONS") == "true":
        from oversub.render.github import annotations

        for line in annotations(outcome.summary, judged):
            err.write(line + "\n")
    err.flush()
    # Every file is staged (written and fsync'ed beside its target) before any is renamed:
    # one that cannot be written makes the exit 3, and the others are written again with
    # that status, so no report file states an exit status the process does not return.
    failed: set[str] = set()
    while True:
        staged, problem = _stage_reports(outcome, opts, status, judged, env, failed)
        if problem is None:
            break
        for _flag, replacement in staged:
            replacement.discard()
        failed.add(problem[0])
        problems.append(problem[1])
        if status is not ExitStatus.INTERRUPTED:
            status = ExitStatus.UNOBSERVABLE
    from oversub.cli.reportfiles import commit

    for flag, replacement in staged:
        try:
            commit(flag, replacement)
        except ReportError as exc:
            problems.append(str(exc))
            if status is not ExitStatus.INTERRUPTED:
                status = ExitStatus.UNOBSERVABLE
    _step_summary(outcome, opts, status, judged, env, err)
    _print_closing(outcome, status, judged, err, console, problems)
    return status


def _stage_reports(
    outcome: CheckOutcome,
    opts: CheckOptions,
    status: ExitStatus,
    judged: Gate,
    env: Mapping[str, str],
    failed: set[str],
) -> tuple[list[tuple[str, Replacement]], tuple[str, str] | None]:
    """Each report file not in `failed` staged with `status`; (what was staged, the first
    (flag, reason) that could not be)."""
    from oversub.cli.identity import read_identity
    from oversub.cli.reportfiles import stage
    from oversub.core.errors import ReportError
    from oversub.render.checkreport import check_dict
    from oversub.render.serialize import to_json

    s = outcome.summary

    def json_text() -> str:
        return to_json(check_dict(outcome, status, judged, read_identity(env)), indent=2) + "\n"

    def junit_text() -> str:
        from oversub.render.junit import summary_junit

        return summary_junit(s, judged)

    def markdown_text() -> str:
        return _markdown(outcome, status, judged)

    wanted: list[tuple[str, Path | None, Callable[[], str]]] = [
        ("--json", opts.json_path, json_text),
        ("--junit", opts.junit_path, junit_text),
        ("--markdown", opts.markdown_path, markdown_text),
    ]
    staged: list[tuple[str, Replacement]] = []
    for flag, path, text in wanted:
        if path is None or flag in failed:
            continue
        try:
            staged.append((flag, stage(flag, path, text())))
        except ReportError as exc:
            return staged, (flag, str(exc))
    return staged, None


def _markdown(
    outcome: CheckOutcome, status: ExitStatus, judged: Gate, max_bytes: int | None = None
) -> str:
    from oversub.render.markdown import summary_markdown

    return summary_markdown(
        outcome.summary,
        command=outcome.command,
        exit_status=int(status),
        command_status=outcome.command_status,
        gate=judged,
        max_bytes=max_bytes,
    )


def _step_summary(
    outcome: CheckOutcome,
    opts: CheckOptions,
    status: ExitStatus,
    judged: Gate,
    env: Mapping[str, str],
    err: TextIO,
) -> None:
    from oversub.cli.reportfiles import append_step_summary

    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if not step_summary:
        return
    problem = append_step_summary(
        step_summary, lambda room: _markdown(outcome, status, judged, room)
    )
    if problem is not None:
        # The job summary is a courtesy of the CI page; the gate's answer stands.
        warn(err, problem)


def _print_summary(outcome: CheckOutcome, err: TextIO) -> Console | None:
    """The run's summary on stderr (the console that printed it, on a terminal)."""
    s = outcome.summary
    if err.isatty():
        from oversub.cli.output import make_console
        from oversub.render.runreport import summary_renderable

        # Through the console, so the closing lines wrap to the terminal like the report.
        console = make_console(stderr=True)
        console.print(summary_renderable(s))
        return console
    from oversub.render.runreport import summary_text

    err.write(summary_text(s) + "\n")
    return None


def _print_closing(
    outcome: CheckOutcome,
    status: ExitStatus,
    judged: Gate,
    err: TextIO,
    console: Console | None,
    problems: list[str],
) -> None:
    """What could not be written, then how the command ended and pass/FAIL with the exit
    status the process returns."""
    from oversub.render.checkreport import closing_lines
    from oversub.render.escape import terminal

    lines = [f"oversub check: error: {p}" for p in problems]
    lines += closing_lines(outcome, status, judged, unwritten=bool(problems))
    if console is not None:
        from rich.text import Text

        for line in lines:
            console.print(Text(terminal(line)))
    else:
        # CI logs: one unwrapped line each, so `grep 'oversub check: '` finds the outcome.
        err.write("".join(terminal(line) + "\n" for line in lines))
    err.flush()
