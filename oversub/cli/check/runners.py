"""`check`'s entry points: what was asked (`CheckOptions`), the report paths checked, the
mode run, then the report stage (`report`): one decision, the recording finished, the files.

Kept apart from `cli.check` (the click command, imported at every start of the CLI) so that
only `oversub check` pays for these imports and `CheckOptions`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from oversub.core.errors import ExitStatus
from oversub.core.names import FailOn
from oversub.run import stopsignals
from oversub.run.session import SessionOptions

if TYPE_CHECKING:
    from oversub.cli.record.writer import Recorder
    from oversub.core.cures import Cure
    from oversub.core.model import Budget
    from oversub.core.origin import NodeIdentity
    from oversub.core.results import CheckDecision, CheckOutcome
    from oversub.probe.cgroup_target import CgroupRef
    from oversub.run.checking import Progress


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """Everything `check` needs besides the target."""

    fail_on: FailOn = FailOn.COSTLY
    """What fails the run (exit 1): `analysis.policy.fails`."""
    session: SessionOptions = dataclasses.field(default_factory=SessionOptions)
    timeout: float | None = None
    """`check -- CMD`: end the command after this many seconds (not a failure)."""
    grace: float = 3.0
    """Seconds between SIGTERM and SIGKILL when ending the command's tree."""
    json_path: Path | None = None
    junit_path: Path | None = None
    markdown_path: Path | None = None
    progress_every: float = 10.0
    """Seconds between progress lines on stderr when it is not a terminal (a CI log)."""
    record_path: Path | None = None
    """`--record FILE`: the run, written as it goes (`cli.record.writer`)."""
    record_max_mb: float = 50.0
    metrics: tuple[str, ...] = ()
    """`--metric NAME`: figures CMD prints as `NAME=<number>`, kept in the recording."""
    identity: NodeIdentity | None = None
    """This node and the launcher's ids (`prepare_reports`; None: read when reporting)."""


def prepare_reports(
    opts: CheckOptions, err: TextIO | None
) -> tuple[CheckOptions, Mapping[str, str] | None]:
    """Before anything runs: refuse report paths that cannot be written (UsageError naming
    flag and path; a run of minutes must not end in "cannot write"), and warn now, once,
    about a job summary file that cannot take the report. Returns the options with each
    report path resolved to the file it replaces (`writtenfiles`' link policy, decided once)
    and the node's identity read (a bad OVERSUB_NODE is a usage error now), and the
    environment `report` should then use (None: ours)."""
    from oversub.cli.check.reports import warn
    from oversub.cli.identity import read_identity
    from oversub.cli.options import REPORTS
    from oversub.cli.writtenfiles import check_report_path, step_summary_problem

    resolved: dict[str, Any] = {"identity": read_identity(os.environ)}
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
    finish: Callable[[CheckDecision], str | None] | None = None,
) -> ExitStatus:
    """The report stage: the run's `CheckDecision` made once; `finish` (the recording's
    last record, written with it; what could not be written, or None) first, so that its
    failure decides the exit 3 like a report file's; then every report (`reports`).

    Stop signals wait until every file is written (none is left half-written), then make
    the exit 130, said in one last line.
    """
    from oversub.analysis.policy import decide
    from oversub.cli.check.reports import write_reports
    from oversub.cli.identity import read_identity
    from oversub.cli.options import REPORTS

    out = err if err is not None else sys.stderr
    env = environ if environ is not None else os.environ
    files = [(r.flag, getattr(opts, r.name)) for r in REPORTS if getattr(opts, r.name)]
    with stopsignals.deferred() as during:
        identity = opts.identity if opts.identity is not None else read_identity(env)
        decision = decide(outcome, opts.fail_on, identity)
        if finish is not None:
            decision = decision.unwritten(finish(decision))
        status = write_reports(decision, files, env, out)
    if during.received and status is not ExitStatus.INTERRUPTED:
        with contextlib.suppress(OSError, ValueError):
            out.write("oversub check: interrupted, exit 130\n")
            out.flush()
        return ExitStatus.INTERRUPTED
    return status


def _progress(
    budget: Budget, opts: CheckOptions, err: TextIO | None, recorder: Recorder | None = None
) -> Progress:
    from oversub.cli.check.progress import CheckProgress

    shown = CheckProgress(err if err is not None else sys.stderr, budget, every=opts.progress_every)
    if recorder is None:
        return shown
    from oversub.cli.record.writer import RecordingProgress

    return RecordingProgress(shown, recorder)


def check_command(
    argv: list[str],
    budget: Budget,
    opts: CheckOptions,
    *,
    err: TextIO | None = None,
    cure: Cure | None = None,
) -> ExitStatus:
    """Start `argv`, sample its tree until it exits or times out, stop what is left, report.

    With `cure` (`check --apply`), CMD runs with `oversub run`'s cure, and the verification's
    lines (sized, kept, escaped) come before the report.
    SIGINT, SIGTERM and SIGHUP end the run like Ctrl-C (exit 130); see `run.checking`."""
    from oversub.run.checking import report_command, run_command

    opts, environ = prepare_reports(opts, err)
    recorder = _recorder(opts, budget, err, "check-command", None, report_command(argv))
    with contextlib.ExitStack() as stack:
        captured = None
        if opts.metrics:
            from oversub.cli.check.metric import StdoutMetrics

            captured = stack.enter_context(StdoutMetrics(opts.metrics))
        if cure is None:
            outcome = run_command(
                argv,
                budget,
                opts.session,
                _progress(budget, opts, err, recorder),
                timeout=opts.timeout,
                grace=opts.grace,
            )
        else:
            outcome = _cured(argv, budget, opts, cure, _progress(budget, opts, err, recorder), err)
    finish = _finisher(recorder, None if captured is None else captured.values)
    return report(outcome, opts, err=err, environ=environ, finish=finish)


def _cured(
    argv: list[str],
    budget: Budget,
    opts: CheckOptions,
    cure: Cure,
    progress: Progress,
    err: TextIO | None,
) -> CheckOutcome:
    """`check --apply`: CMD run with the cure; the plan and the verification on stderr."""
    from oversub.analysis.cured import verdicts
    from oversub.render import cure_text
    from oversub.run.curing import run_cured

    out = err if err is not None else sys.stderr

    def say(line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            out.write(line.replace(cure_text.PREFIX, "oversub check --apply: ", 1) + "\n")
            out.flush()

    say(cure_text.plan_line(cure))
    for line in cure_text.variable_lines(cure):
        say(line)
    cured = run_cured(
        argv, cure, budget, opts.session, progress, timeout=opts.timeout, grace=opts.grace
    )
    fallback = cure.threads or cure.plan.budget.vcpus
    lines = verdicts(
        cured.records, cured.watch, fallback=fallback, kept_vars=cure.variables.kept, tree=cure.tree
    )
    for line in cure_text.verification(lines):
        say(line)
    return cured.outcome


def check_pid(
    pid: int, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a running tree for `opts.session.duration` seconds (or until it exits)."""
    from oversub.run.checking import run_pid

    opts, environ = prepare_reports(opts, err)
    recorder = _recorder(opts, budget, err, "check-pid", pid, None)
    outcome = run_pid(pid, budget, opts.session, _progress(budget, opts, err, recorder))
    return report(outcome, opts, err=err, environ=environ, finish=_finisher(recorder))


def check_cgroup(
    ref: CgroupRef, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a cgroup for `opts.session.duration` seconds (or until it is removed)."""
    from oversub.run.checking import run_cgroup

    opts, environ = prepare_reports(opts, err)
    recorder = _recorder(opts, budget, err, "check-cgroup", None, None)
    outcome = run_cgroup(ref, budget, opts.session, _progress(budget, opts, err, recorder))
    return report(outcome, opts, err=err, environ=environ, finish=_finisher(recorder))


def _recorder(
    opts: CheckOptions,
    budget: Budget,
    err: TextIO | None,
    mode: str,
    pid: int | None,
    command: tuple[str, ...] | None,
) -> Recorder | None:
    if opts.record_path is None:
        return None
    from oversub.cli.record.writer import open_recorder

    return open_recorder(
        opts.record_path,
        opts.record_max_mb,
        mode=mode,
        pid=pid,
        command=command,
        interval=opts.session.interval,
        budget=budget,
        thresholds=opts.session.thresholds,
        err=err,
    )


def _finisher(
    recorder: Recorder | None, metrics: Mapping[str, float] | None = None
) -> Callable[[CheckDecision], str | None] | None:
    """The recording's last record (the judged run's summary), written with the decision;
    what could not be written whole, or None."""
    if recorder is None:
        return None
    from oversub.cli.record.writer import finish_quietly, summary_record

    def finish(decision: CheckDecision) -> str | None:
        outcome = decision.outcome
        return finish_quietly(
            recorder,
            summary_record(
                outcome.summary,
                command_status=outcome.command_status,
                timed_out=outcome.timed_out,
                interrupted=outcome.interrupted,
                metrics=metrics,
            ),
        )

    return finish


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
    from oversub.run.checking import run_static

    opts, environ = prepare_reports(opts, err)
    return report(run_static(budget, procs, threads, workers), opts, err=err, environ=environ)
