"""`oversub check`: run or attach, sample, judge, write reports, turn the verdict into a code.

Three modes share one reporting path: a command started here (its whole tree is killed
before we return, whatever happens), a running pid, and a static preflight that samples
nothing. Reports go to files and stderr; the command's own stdout/stderr pass through.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from oversub import stopsignals
from oversub.checkreport import Outcome as _Outcome
from oversub.checkreport import exit_status, fails, judge, report, warn
from oversub.errors import ExitStatus
from oversub.model import Budget, Verdict
from oversub.results import Assessment, HostRates, Interval, Summary, Totals
from oversub.session import (
    SessionOptions,
    SessionResult,
    run_session,
    stop_signals_interrupt,
)

__all__ = [
    "CheckOptions",
    "check_command",
    "check_pid",
    "check_static",
    "exit_status",
    "fails",
    "judge",
    "report",
    "report_command",
    "validate_report_paths",
]

if TYPE_CHECKING:
    import subprocess

    from oversub.runner import TreeReaper


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


def validate_report_paths(opts: CheckOptions) -> None:
    """Refuse report paths that cannot be written, before anything is started or sampled.

    A run of minutes must not end in "cannot write": the parent directory must exist and be
    writable, and an existing file must be a regular, writable file (see `reportfiles`).
    Raises UsageError naming flag and path.
    """
    from oversub.reportfiles import check_report_path

    for flag, path in (
        ("--json", opts.json_path),
        ("--junit", opts.junit_path),
        ("--markdown", opts.markdown_path),
    ):
        if path is not None:
            check_report_path(flag, path)


def _prepare_reports(opts: CheckOptions, err: TextIO | None) -> Mapping[str, str] | None:
    """Validate the report paths (UsageError) and warn now, once, about a job summary file
    that cannot take the report; the environment `report` should then use (None: ours)."""
    from oversub.reportfiles import step_summary_problem

    validate_report_paths(opts)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    problem = step_summary_problem(step_summary) if step_summary else None
    if problem is None:
        return None
    warn(err if err is not None else sys.stderr, problem)
    return {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}


def report_command(argv: list[str]) -> list[str]:
    """`argv` as text for reports: bytes that are not UTF-8 (surrogate escapes) become U+FFFD.

    JSON and Markdown are UTF-8 files; an argument from a Latin-1 file name would otherwise
    make writing the report fail.
    """
    return [os.fsencode(arg).decode("utf-8", "replace") for arg in argv]


def check_command(
    argv: list[str], budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Start `argv`, sample its tree until it exits or times out, kill what is left, report.

    SIGINT, SIGTERM and SIGHUP end the run like Ctrl-C (exit 130); once the tree is being
    stopped they only make the exit 130, so a second signal cannot leave it running. While
    it runs, oversub is the child subreaper: orphans of the tree are re-parented to it,
    counted as the command's, stopped with it and reaped.
    """
    from oversub.runner import child_subreaper

    environ = _prepare_reports(opts, err)
    with child_subreaper() as adopting:
        outcome = _run_command(argv, budget, opts, err, os.getpid() if adopting else None)
    return report(outcome, opts, err=err, environ=environ)


def _run_command(
    argv: list[str], budget: Budget, opts: CheckOptions, err: TextIO | None, adopter: int | None
) -> _Outcome:
    from oversub.probe.sampler import TreeSampler
    from oversub.progress import CheckProgress, shown_command
    from oversub.runner import TreeReaper, start_command

    progress = CheckProgress(
        err if err is not None else sys.stderr, budget, every=opts.progress_every
    )
    proc: subprocess.Popen[bytes] | None = None
    reaper: TreeReaper | None = None
    result: SessionResult | None = None
    timed_out = False
    late_interrupt = False
    with stop_signals_interrupt():
        try:
            # The start is atomic for stop signals: one that lands between the fork and the
            # moment the child is held stays pending until then, so it can never leave a
            # command nobody stops. Inside the try: it then stops the tree.
            with stopsignals.blocked():
                proc = start_command(argv)
                reaper = TreeReaper(proc, adopter=adopter)
            started = time.monotonic()
            until = "until it exits" + (
                f" (--timeout ends it after {opts.timeout:g} s)" if opts.timeout is not None else ""
            )
            progress.start(
                f"started pid {proc.pid} ({shown_command(report_command(argv))})",
                interval=opts.session.interval,
                warmup=opts.session.warmup,
                until=until,
            )

            def should_stop() -> bool:
                nonlocal timed_out
                assert proc is not None
                if proc.poll() is not None:
                    return True
                if opts.timeout is not None and time.monotonic() - started >= opts.timeout:
                    timed_out = True
                    return True
                return False

            def observe(iv: Interval, a: Assessment, samples: int, elapsed: float) -> None:
                assert reaper is not None
                reaper.observe(p.pid for p in iv.processes)
                reaper.reap_adopted()
                progress.interval(iv, a, samples, elapsed)

            with TreeSampler.for_budget(proc.pid, budget, adopter=adopter) as sampler:
                result = run_session(
                    sampler, budget, opts.session, on_interval=observe, should_stop=should_stop
                )
        except KeyboardInterrupt:
            result = None
        finally:
            progress.close()
            if proc is not None:
                late_interrupt = _stop_tree(proc, reaper, opts.grace)
    assert proc is not None  # start_command either returned or raised out of this function
    interrupted = result is None or result.interrupted or late_interrupt
    if result is not None:
        summary = result.summary
    else:
        summary = _unsampled_summary(budget, proc.pid, None, "interrupted before a sample")
    return _Outcome(
        summary=summary,
        command=report_command(argv),
        command_status=proc.returncode,
        timed_out=timed_out,
        interrupted=interrupted,
    )


def _stop_tree(proc: subprocess.Popen[bytes], reaper: TreeReaper | None, grace: float) -> bool:
    """Stop the command's whole tree with stop signals deferred; True if one came meanwhile
    or just before.

    Inside `stop_signals_interrupt` only the first stop signal raises, so when it lands
    between the end of the run and the moment signals are deferred, the second attempt
    cannot be interrupted and the tree is still stopped.
    """
    from oversub.runner import TreeReaper

    try:
        with stopsignals.deferred() as during:
            (reaper or TreeReaper(proc)).terminate(grace)
    except KeyboardInterrupt:
        with stopsignals.deferred():
            (reaper or TreeReaper(proc)).terminate(grace)
        return True
    return during.received


def check_pid(
    pid: int, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a running tree for `opts.session.duration` seconds (or until it exits)."""
    from oversub.probe.sampler import TreeSampler
    from oversub.progress import CheckProgress

    environ = _prepare_reports(opts, err)
    progress = CheckProgress(
        err if err is not None else sys.stderr, budget, every=opts.progress_every
    )
    duration = opts.session.duration
    with (
        stop_signals_interrupt(),
        TreeSampler.for_budget(pid, budget) as sampler,
    ):
        progress.start(
            f"attached to pid {pid}",
            interval=opts.session.interval,
            warmup=opts.session.warmup,
            until=(
                f"for {duration:g} s, or until the target exits"
                if duration is not None
                else "until the target exits (no --duration given)"
            ),
        )
        try:
            result: SessionResult = run_session(
                sampler, budget, opts.session, on_interval=progress.interval
            )
        finally:
            progress.close()
    outcome = _Outcome(summary=result.summary, interrupted=result.interrupted)
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
    from oversub.analysis.preflight import preflight

    environ = _prepare_reports(opts, err)
    assessment = preflight(budget, procs, threads, workers)
    summary = dataclasses.replace(
        _unsampled_summary(budget, 0, assessment, "static preflight: nothing was sampled"),
        preflight=True,
    )
    return report(_Outcome(summary=summary, static=True), opts, err=err, environ=environ)


def _unsampled_summary(
    budget: Budget, root_pid: int, assessment: Assessment | None, note: str
) -> Summary:
    """A summary with no measurement behind it: a preflight (judged by its `assessment`),
    or a run interrupted at once (None: not judged, `note` says why)."""
    zero = Totals(0, 0, 0, 0.0, 0.0, None, None, None, None)
    return Summary(
        root_pid=root_pid,
        budget=budget,
        verdict=None if assessment is None else assessment.verdict,
        not_judged=note if assessment is None else None,
        findings=() if assessment is None else assessment.findings,
        processes=(),
        totals=zero,
        totals_peak=zero,
        host=HostRates(None, None, None, None, None),
        samples=0,
        duration_s=0.0,
        target_exited=False,
        notes=(note,),
    )
