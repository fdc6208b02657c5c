"""`check`'s answer, written: the stderr report, GitHub annotations, the --json, --junit and
--markdown files and the job summary, all from one `CheckDecision` (`analysis.policy.decide`).

The summary and its verdict are printed first, so a file that cannot be written never hides
them; the closing lines last, once every file is written, so that they state the exit
status the process returns. The words come from `oversub.render`; the files are written by
`cli.writtenfiles` (atomically, checked before the run by `runners.prepare_reports`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from oversub.core.errors import ExitStatus

if TYPE_CHECKING:
    from rich.console import Console

    from oversub.cli.writtenfiles import Replacement
    from oversub.core.results import CheckDecision, Summary


def warn(err: TextIO, message: str) -> None:
    from oversub.render.escape import terminal

    err.write(f"oversub check: warning: {terminal(message)}\n")
    err.flush()


def write_reports(
    decision: CheckDecision, files: Sequence[tuple[str, Path]], env: Mapping[str, str], err: TextIO
) -> ExitStatus:
    """Print the summary and annotations, write each report file of `files` ((flag, path)),
    append the job summary, then the closing lines; the exit status.

    The closing lines come last, so that they state the status the process returns: a
    report that cannot be written makes it exit 3 (`CheckDecision.unwritten`), and the line
    says so. A GITHUB_STEP_SUMMARY that cannot be appended to is only a warning.
    """
    from oversub.cli.writtenfiles import commit
    from oversub.core.errors import ReportError

    console = _print_summary(decision.outcome.summary, err)
    if env.get("GITHUB_ACTIONS") == "true":
        from oversub.render.github import annotations

        for line in annotations(decision.outcome.summary, decision.gate):
            err.write(line + "\n")
    err.flush()
    # Every file is staged (written and fsync'ed beside its target) before any is renamed:
    # one that cannot be written makes the exit 3, and the others are written again with
    # that status, so no report file states an exit status the process does not return.
    failed: set[str] = set()
    while True:
        staged, problem = _stage_reports(decision, files, failed)
        if problem is None:
            break
        for _flag, replacement in staged:
            replacement.discard()
        failed.add(problem[0])
        decision = decision.unwritten(problem[1])
    for flag, replacement in staged:
        try:
            commit(flag, replacement)
        except ReportError as exc:
            decision = decision.unwritten(str(exc))
    _step_summary(decision, env, err)
    _print_closing(decision, err, console)
    return decision.status


def _stage_reports(
    decision: CheckDecision, files: Sequence[tuple[str, Path]], failed: set[str]
) -> tuple[list[tuple[str, Replacement]], tuple[str, str] | None]:
    """Each report file not in `failed` staged with the decision's status; (what was
    staged, the first (flag, reason) that could not be)."""
    from oversub.cli.writtenfiles import stage
    from oversub.core.errors import ReportError

    def json_text() -> str:
        from oversub.render.checkview import check_dict
        from oversub.render.serialize import to_json

        return to_json(check_dict(decision), indent=2) + "\n"

    def junit_text() -> str:
        from oversub.render.junit import summary_junit

        return summary_junit(decision.outcome.summary, decision.gate)

    texts: dict[str, Callable[[], str]] = {
        "--json": json_text,
        "--junit": junit_text,
        "--markdown": lambda: _markdown(decision),
    }
    staged: list[tuple[str, Replacement]] = []
    for flag, path in files:
        if flag in failed:
            continue
        try:
            staged.append((flag, stage(flag, path, texts[flag]())))
        except ReportError as exc:
            return staged, (flag, str(exc))
    return staged, None


def _markdown(decision: CheckDecision, max_bytes: int | None = None) -> str:
    from oversub.render.markdown import summary_markdown

    outcome = decision.outcome
    return summary_markdown(
        outcome.summary,
        command=outcome.command,
        exit_status=int(decision.status),
        command_status=outcome.command_status,
        gate=decision.gate,
        max_bytes=max_bytes,
    )


def _step_summary(decision: CheckDecision, env: Mapping[str, str], err: TextIO) -> None:
    from oversub.cli.writtenfiles import append_step_summary

    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if not step_summary:
        return
    problem = append_step_summary(step_summary, lambda room: _markdown(decision, room))
    if problem is not None:  # a courtesy of the CI page (`cli.writtenfiles`)
        warn(err, problem)


def _print_summary(summary: Summary, err: TextIO) -> Console | None:
    """The run's summary on stderr (the console that printed it, on a terminal)."""
    if err.isatty():
        from oversub.cli.output import make_console
        from oversub.render.finalreport import summary_renderable

        # Through the console, so the closing lines wrap to the terminal like the report.
        console = make_console(stderr=True)
        console.print(summary_renderable(summary))
        return console
    from oversub.render.finalreport import summary_text

    err.write(summary_text(summary) + "\n")
    return None


def _print_closing(decision: CheckDecision, err: TextIO, console: Console | None) -> None:
    """What could not be written, then how the command ended and pass/FAIL with the exit
    status the process returns."""
    from oversub.render.checkview import closing_lines

    lines = closing_lines(decision)
    if console is not None:
        from rich.text import Text

        for line in lines:
            console.print(Text(line))
    else:
        # CI logs: one unwrapped line each, so `grep 'oversub check: '` finds the outcome.
        err.write("".join(line + "\n" for line in lines))
    err.flush()
