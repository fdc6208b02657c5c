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
from typing import TYPE_CHECKING, Any, TextIO

from oversub.errors import ExitStatus, ReportError, UsageError
from oversub.model import Budget, Verdict
from oversub.results import Assessment, HostRates, Interval, Summary, Totals
from oversub.session import (
    SessionOptions,
    SessionResult,
    run_session,
    stop_signals_ignored,
    stop_signals_interrupt,
)

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


@dataclass
class _Outcome:
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


def exit_status(outcome: _Outcome, fail_on: Verdict) -> ExitStatus:
    """The documented exit code for a finished check (see README, "Exit codes")."""
    if outcome.interrupted:
        return ExitStatus.INTERRUPTED
    verdict = outcome.summary.verdict
    if verdict is None:
        # Not judged (nothing measured, or the command failed): a gate must not pass blind.
        return ExitStatus.UNOBSERVABLE
    return ExitStatus.FOUND if fails(verdict, fail_on) else ExitStatus.OK


def judge(outcome: _Outcome) -> _Outcome:
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


def validate_report_paths(opts: CheckOptions) -> None:
    """Refuse report paths that cannot be written, before anything is started or sampled.

    A run of minutes must not end in "cannot write": the parent directory must exist and be
    writable, and the path must not be a directory. Raises UsageError naming flag and path.
    """
    for flag, path in (
        ("--json", opts.json_path),
        ("--junit", opts.junit_path),
        ("--markdown", opts.markdown_path),
    ):
        if path is None:
            continue
        try:
            _check_writable(flag, path)
        except OSError as exc:  # a name too long, a loop of symlinks...
            raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from exc


def _check_writable(flag: str, path: Path) -> None:
    parent = path.parent
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: directory {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path}: file is not writable")


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
    stopped they are ignored until it is gone, so a second signal cannot leave it running.
    """
    from oversub.probe.sampler import TreeSampler
    from oversub.progress import CheckProgress, shown_command
    from oversub.runner import TreeReaper, start_command

    validate_report_paths(opts)
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
            # Inside the try: a signal right after the start still stops the tree.
            proc = start_command(argv)
            reaper = TreeReaper(proc)
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
                progress.interval(iv, a, samples, elapsed)

            with TreeSampler.for_budget(proc.pid, budget) as sampler:
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
    outcome = _Outcome(
        summary=summary,
        command=report_command(argv),
        command_status=proc.returncode,
        timed_out=timed_out,
        interrupted=interrupted,
    )
    return report(outcome, opts, err=err)


def _stop_tree(proc: subprocess.Popen[bytes], reaper: TreeReaper | None, grace: float) -> bool:
    """Stop the command's whole tree with stop signals ignored; True if one came just before.

    Inside `stop_signals_interrupt` only the first stop signal raises, so when it lands
    between the end of the run and the moment signals are ignored, the second attempt
    cannot be interrupted and the tree is still stopped.
    """
    from oversub.runner import TreeReaper

    try:
        with stop_signals_ignored():
            (reaper or TreeReaper(proc)).terminate(grace)
    except KeyboardInterrupt:
        with stop_signals_ignored():
            (reaper or TreeReaper(proc)).terminate(grace)
        return True
    return False


def check_pid(
    pid: int, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a running tree for `opts.session.duration` seconds (or until it exits)."""
    from oversub.probe.sampler import TreeSampler
    from oversub.progress import CheckProgress

    validate_report_paths(opts)
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
    return report(outcome, opts, err=err)


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

    validate_report_paths(opts)
    assessment = preflight(budget, procs, threads, workers)
    summary = dataclasses.replace(
        _unsampled_summary(budget, 0, assessment, "static preflight: nothing was sampled"),
        preflight=True,
    )
    return report(_Outcome(summary=summary, static=True), opts, err=err)


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


def report(
    outcome: _Outcome,
    opts: CheckOptions,
    *,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> ExitStatus:
    """Print the stderr report and annotations, then write every requested report file.

    The verdict is printed first, so a report that cannot be written (ReportError, exit 3)
    never hides it. A GITHUB_STEP_SUMMARY that cannot be appended to is only a warning.
    """
    from oversub.render.markdown import summary_markdown

    err = err if err is not None else sys.stderr
    env = environ if environ is not None else os.environ
    outcome = judge(outcome)
    status = exit_status(outcome, opts.fail_on)
    s = outcome.summary
    _print_report(outcome, status, opts, err)
    if env.get("GITHUB_ACTIONS") == "true":
        from oversub.render.github import annotations

        for line in annotations(s, fail_on=opts.fail_on):
            err.write(line + "\n")
    err.flush()
    if opts.json_path is not None:
        _write("--json", opts.json_path, _json_report(outcome, status, opts))
    if opts.junit_path is not None:
        from oversub.render.junit import summary_junit

        _write("--junit", opts.junit_path, summary_junit(s, fail_on=opts.fail_on))
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if opts.markdown_path is None and not step_summary:
        return status
    markdown = summary_markdown(
        s,
        command=outcome.command,
        exit_status=int(status),
        command_status=outcome.command_status,
        fail_on=opts.fail_on,
    )
    if opts.markdown_path is not None:
        _write("--markdown", opts.markdown_path, markdown)
    if step_summary:
        try:
            with open(step_summary, "a", encoding="utf-8") as fh:
                fh.write(markdown + "\n")
        except OSError as exc:
            # The job summary is a courtesy of the CI page; the gate's answer stands.
            err.write(f"oversub check: warning: cannot append to GITHUB_STEP_SUMMARY: {exc}\n")
            err.flush()
    return status


def _json_report(outcome: _Outcome, status: ExitStatus, opts: CheckOptions) -> str:
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


def _print_report(outcome: _Outcome, status: ExitStatus, opts: CheckOptions, err: TextIO) -> None:
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
            console.print(Text(line))
    else:
        from oversub.render.live import summary_text

        # CI logs: one unwrapped line each, so `grep 'oversub check:'` finds the outcome.
        err.write("\n".join([summary_text(s), *tail]) + "\n")


def _verdict_line(outcome: _Outcome, status: ExitStatus, opts: CheckOptions) -> str:
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


def _write(flag: str, path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ReportError(f"cannot write the {flag} report {path}: {reason}") from exc
