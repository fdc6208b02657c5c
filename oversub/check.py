"""`oversub check`: run or attach, sample, judge, write reports, turn the verdict into a code.

Three modes share one reporting path: a command started here (its whole tree is killed
before we return, whatever happens), a running pid, and a static preflight that samples
nothing. Reports go to files and stderr; the command's own stdout/stderr pass through.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from oversub.errors import ExitStatus
from oversub.model import Budget, Verdict
from oversub.results import Assessment, HostRates, Summary, Totals
from oversub.session import SessionOptions, SessionResult, run_session


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
    if outcome.command_status not in (None, 0) and not outcome.timed_out:
        return ExitStatus.UNOBSERVABLE  # the command itself failed: its status is in the report
    if outcome.summary.samples == 0 and not outcome.static:
        return ExitStatus.UNOBSERVABLE  # nothing was measured: a gate must not pass blind
    return ExitStatus.FOUND if fails(outcome.summary.verdict, fail_on) else ExitStatus.OK


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (a CI timeout) takes the same cleanup path as Ctrl-C.
    raise KeyboardInterrupt


def check_command(
    argv: list[str], budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Start `argv`, sample its tree until it exits or times out, kill what is left, report."""
    from oversub.probe.sampler import TreeSampler
    from oversub.runner import TreeReaper, start_command

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    proc = start_command(argv)
    reaper = TreeReaper(proc)
    started = time.monotonic()
    timed_out = False

    def should_stop() -> bool:
        nonlocal timed_out
        if proc.poll() is not None:
            return True
        if opts.timeout is not None and time.monotonic() - started >= opts.timeout:
            timed_out = True
            return True
        return False

    def observe(iv: Any, _a: Assessment, _n: int, _e: float) -> None:
        reaper.observe(p.pid for p in iv.processes)

    try:
        with TreeSampler(proc.pid, throttle_stat_path=_stat_path(budget)) as sampler:
            result = run_session(
                sampler, budget, opts.session, on_interval=observe, should_stop=should_stop
            )
    except KeyboardInterrupt:
        result = None
    finally:
        reaper.terminate(opts.grace)
        signal.signal(signal.SIGTERM, previous)
    interrupted = result is None or result.interrupted
    if result is not None:
        summary = result.summary
    else:
        nothing = Assessment(Verdict.OK, ())
        summary = _unsampled_summary(budget, proc.pid, nothing, "interrupted before a sample")
    outcome = _Outcome(
        summary=summary,
        command=list(argv),
        command_status=proc.returncode,
        timed_out=timed_out,
        interrupted=interrupted,
    )
    return report(outcome, opts, err=err)


def check_pid(
    pid: int, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a running tree for `opts.session.duration` seconds (or until it exits)."""
    from oversub.probe.sampler import TreeSampler

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with TreeSampler(pid, throttle_stat_path=_stat_path(budget)) as sampler:
            result: SessionResult = run_session(sampler, budget, opts.session)
    finally:
        signal.signal(signal.SIGTERM, previous)
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

    assessment = preflight(budget, procs, threads, workers)
    summary = _unsampled_summary(budget, 0, assessment, "static preflight: nothing was sampled")
    return report(_Outcome(summary=summary, static=True), opts, err=err)


def _stat_path(budget: Budget) -> str | None:
    return budget.quota.stat_path if budget.quota is not None else None


def _unsampled_summary(budget: Budget, root_pid: int, assessment: Assessment, note: str) -> Summary:
    """A summary with no measurement behind it: a preflight, or a run interrupted at once."""
    zero = Totals(0, 0, 0, 0.0, 0.0, None, None, None, None)
    return Summary(
        root_pid=root_pid,
        budget=budget,
        verdict=assessment.verdict,
        findings=assessment.findings,
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
    """Write every requested report, print the stderr report and annotations; return the code."""
    from oversub.render.markdown import summary_markdown
    from oversub.render.serialize import summary_dict, to_json

    err = err if err is not None else sys.stderr
    env = environ if environ is not None else os.environ
    status = exit_status(outcome, opts.fail_on)
    s = outcome.summary
    if opts.json_path is not None:
        doc: dict[str, Any] = summary_dict(s)
        doc.update(
            exit_status=int(status),
            fail_on=opts.fail_on.value,
            command=outcome.command,
            command_status=outcome.command_status,
            timed_out=outcome.timed_out,
        )
        _write(opts.json_path, to_json(doc, indent=2) + "\n")
    if opts.junit_path is not None:
        from oversub.render.junit import summary_junit

        _write(opts.junit_path, summary_junit(s, fail_on=opts.fail_on))
    markdown = None
    if opts.markdown_path is not None or env.get("GITHUB_STEP_SUMMARY"):
        markdown = summary_markdown(
            s,
            command=outcome.command,
            exit_status=int(status),
            command_status=outcome.command_status,
            fail_on=opts.fail_on,
        )
    if opts.markdown_path is not None and markdown is not None:
        _write(opts.markdown_path, markdown)
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if step_summary and markdown is not None:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
    _print_report(outcome, status, opts, err)
    if env.get("GITHUB_ACTIONS") == "true":
        from oversub.render.github import annotations

        for line in annotations(s, fail_on=opts.fail_on):
            err.write(line + "\n")
    err.flush()
    return status


def _print_report(outcome: _Outcome, status: ExitStatus, opts: CheckOptions, err: TextIO) -> None:
    s = outcome.summary
    if err.isatty():
        from oversub.render.live import summary_renderable
        from oversub.views import make_console

        make_console(stderr=True).print(summary_renderable(s))
    else:
        from oversub.render.live import summary_text

        err.write(summary_text(s) + "\n")
    if outcome.command is not None:
        how = "ended by --timeout" if outcome.timed_out else f"exit status {outcome.command_status}"
        err.write(f"oversub check: command {how}\n")
    if outcome.command is not None and s.samples == 0 and not outcome.interrupted:
        err.write(
            "oversub check: the command exited before a full interval was sampled after the "
            "warm-up; nothing was measured (run it longer than --warmup + --interval)\n"
        )
    verdict_word = {
        ExitStatus.OK: "pass",
        ExitStatus.FOUND: "FAIL",
        ExitStatus.UNOBSERVABLE: "error",
        ExitStatus.INTERRUPTED: "interrupted",
    }.get(status, "error")
    err.write(
        f"oversub check: {verdict_word}: verdict {s.verdict.value} "
        f"(--fail-on {opts.fail_on.value}), exit {int(status)}\n"
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
