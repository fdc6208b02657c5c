"""`check`'s three entry points: check the report paths, run the mode, report.

Kept apart from `cli.check` (the click command, imported at every start of the CLI) so that
only `oversub check` pays for these imports and `CheckOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from oversub.errors import ExitStatus
from oversub.names import Verdict
from oversub.run.session import SessionOptions

if TYPE_CHECKING:
    from oversub.cli.progress import CheckProgress
    from oversub.model import Budget


@dataclass(frozen=True)
class CheckOptions:
    """Everything `check` needs besides the target."""

    fail_on: Verdict = Verdict.OVERSUBSCRIBED
    """Fail (exit 1) when the verdict's rank is at least this one's."""
    session: SessionOptions = field(default_factory=SessionOptions)
    timeout: float | None = None
    """`check -- CMD`: end the command after this many seconds (not a failure)."""
    grace: float = 3.0
    """Seconds between SIGTERM and SIGKILL when ending the command's tree."""
    json_path: Path | None = None
    junit_path: Path | None = None
    markdown_path: Path | None = None
    progress_every: float = 10.0
    """Seconds between progress lines on stderr when it is not a terminal (a CI log)."""


def _progress(budget: Budget, opts: CheckOptions, err: TextIO | None) -> CheckProgress:
    import sys

    from oversub.cli.progress import CheckProgress

    return CheckProgress(err if err is not None else sys.stderr, budget, every=opts.progress_every)


def check_command(
    argv: list[str], budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Start `argv`, sample its tree until it exits or times out, stop what is left, report.

    SIGINT, SIGTERM and SIGHUP end the run like Ctrl-C (exit 130); see `run.check`."""
    from oversub.cli.reports import prepare_reports, report
    from oversub.run.check import run_command

    environ = prepare_reports(opts, err)
    outcome = run_command(
        argv,
        budget,
        opts.session,
        _progress(budget, opts, err),
        timeout=opts.timeout,
        grace=opts.grace,
    )
    return report(outcome, opts, err=err, environ=environ)


def check_pid(
    pid: int, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a running tree for `opts.session.duration` seconds (or until it exits)."""
    from oversub.cli.reports import prepare_reports, report
    from oversub.run.check import run_pid

    environ = prepare_reports(opts, err)
    outcome = run_pid(pid, budget, opts.session, _progress(budget, opts, err))
    return report(outcome, opts, err=err, environ=environ)


def check_static(
    budget: Budget,
    procs: int,
    threads: int,
    workers: int,
    opts: CheckOptions,
    *,
    err: TextIO | None = None,
) -> ExitStatus:
    """Would M processes x (T threads + W workers) oversubscribe the budget? Samples nothing."""
    from oversub.cli.reports import prepare_reports, report
    from oversub.run.check import run_static

    environ = prepare_reports(opts, err)
    return report(run_static(budget, procs, threads, workers), opts, err=err, environ=environ)
