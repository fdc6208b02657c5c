"""`check`'s answer, written: the stderr report, GitHub annotations, the --json, --junit and
--markdown files and the job summary.

The verdict is printed first, so a report file that cannot be written never hides it. What
fails and the exit status come from `analysis.policy`; the words from `oversub.render`;
the files are written by `reportfiles` (atomically, checked before the run).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from oversub.errors import ExitStatus
from oversub.run import stopsignals

if TYPE_CHECKING:
    from oversub.cli.checking import CheckOptions
    from oversub.results import CheckOutcome, Gate


def warn(err: TextIO, message: str) -> None:
    from oversub.render.escape import terminal

    err.write(f"oversub check: warning: {terminal(message)}\n")
    err.flush()


def prepare_reports(opts: CheckOptions, err: TextIO | None) -> Mapping[str, str] | None:
    """Before anything runs: refuse report paths that cannot be written (UsageError naming
    flag and path; a run of minutes must not end in "cannot write"), and warn now, once,
    about a job summary file that cannot take the report. Returns the environment `report`
    should then use (None: ours)."""
    from oversub.cli.identity import read_identity
    from oversub.cli.options import REPORTS
    from oversub.cli.reportfiles import check_report_path, step_summary_problem

    read_identity(os.environ)  # a bad OVERSUB_NODE is a usage error before the run
    for option in REPORTS:
        path = getattr(opts, option.name)
        if path is not None:
            check_report_path(option.flag, path)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    problem = step_summary_problem(step_summary) if step_summary else None
    if problem is None:
        return None
    warn(err if err is not None else sys.stderr, problem)
    return {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}


def report(
    outcome: CheckOutcome,
    opts: CheckOptions,
    *,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> ExitStatus:
    """Judge the outcome, print the stderr report and annotations, then write every
    requested report file; the exit status.

    A report that cannot be written (ReportError, exit 3) never hides the verdict. A
    GITHUB_STEP_SUMMARY that cannot be appended to is only a warning. Stop signals wait
    until every file is written (none is left half-written), then make the exit 130.
    """
    from oversub.analysis.policy import judge

    out = err if err is not None else sys.stderr
    with stopsignals.deferred() as during:
        status = _report(judge(outcome), opts, out, environ)
    if during.received and status is not ExitStatus.INTERRUPTED:
        out.write("oversub check: interrupted, exit 130\n")
        out.flush()
        return ExitStatus.INTERRUPTED
    return status


def _report(
    outcome: CheckOutcome, opts: CheckOptions, err: TextIO, environ: Mapping[str, str] | None
) -> ExitStatus:
    from oversub.analysis.policy import exit_status, gate
    from oversub.cli.identity import read_identity
    from oversub.cli.reportfiles import append_step_summary, write_atomic
    from oversub.render.checkreport import check_dict
    from oversub.render.markdown import summary_markdown
    from oversub.render.serialize import to_json

    env = environ if environ is not None else os.environ
    status = exit_status(outcome, opts.fail_on)
    s = outcome.summary
    judged = gate(s, opts.fail_on)
    _print_report(outcome, status, judged, err)
    if env.get("GITHUB_ACTIONS") == "true":
        from oversub.render.github import annotations

        for line in annotations(s, judged):
            err.write(line + "\n")
    err.flush()
    if opts.json_path is not None:
        doc = check_dict(outcome, status, judged, read_identity(env))
        text = to_json(doc, indent=2) + "\n"
        write_atomic("--json", opts.json_path, text)
    if opts.junit_path is not None:
        from oversub.render.junit import summary_junit

        write_atomic("--junit", opts.junit_path, summary_junit(s, judged))
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if opts.markdown_path is None and not step_summary:
        return status

    def markdown(max_bytes: int | None = None) -> str:
        return summary_markdown(
            s,
            command=outcome.command,
            exit_status=int(status),
            command_status=outcome.command_status,
            gate=judged,
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


def _print_report(outcome: CheckOutcome, status: ExitStatus, judged: Gate, err: TextIO) -> None:
    from oversub.render.checkreport import closing_lines
    from oversub.render.escape import terminal

    s = outcome.summary
    tail = closing_lines(outcome, status, judged)
    if err.isatty():
        from rich.text import Text

        from oversub.cli.output import make_console
        from oversub.render.report import summary_renderable

        # Through the console, so the closing lines wrap to the terminal like the report.
        console = make_console(stderr=True)
        console.print(summary_renderable(s))
        for line in tail:
            console.print(Text(terminal(line)))
    else:
        from oversub.render.report import summary_text

        # CI logs: one unwrapped line each, so `grep 'oversub check: '` finds the outcome.
        err.write("\n".join([summary_text(s), *map(terminal, tail)]) + "\n")
