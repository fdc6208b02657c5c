"""`check`'s three entry points: check the report paths, run the mode, report.

Kept apart from `cli.check` (the click command, imported at every start of the CLI) so that
only `oversub check` pays for these imports and `CheckOptions`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from oversub.cli.check.request import CheckOptions
from oversub.core.errors import ExitStatus

if TYPE_CHECKING:
    from oversub.cli.record.writer import Recorder
    from oversub.core.cures import Cure
    from oversub.core.model import Budget
    from oversub.core.results import CheckOutcome
    from oversub.probe.cgroup_target import CgroupRef
    from oversub.run.checking import Progress


def _progress(
    budget: Budget, opts: CheckOptions, err: TextIO | None, recorder: Recorder | None = None
) -> Progress:
    import sys

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
    SIGINT, SIGTERM and SIGHUP end the run like Ctrl-C (exit 130); see `run.check`."""
    from oversub.cli.check.reports import prepare_reports
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
    metrics = None if captured is None else captured.values
    return _recorded(recorder, outcome, opts, environ, metrics, err=err)


def _cured(
    argv: list[str],
    budget: Budget,
    opts: CheckOptions,
    cure: Cure,
    progress: Progress,
    err: TextIO | None,
) -> CheckOutcome:
    """`check --apply`: CMD run with the cure; the plan and the verification on stderr."""
    import sys

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
    from oversub.cli.check.reports import prepare_reports
    from oversub.run.checking import run_pid

    opts, environ = prepare_reports(opts, err)
    recorder = _recorder(opts, budget, err, "check-pid", pid, None)
    outcome = run_pid(pid, budget, opts.session, _progress(budget, opts, err, recorder))
    return _recorded(recorder, outcome, opts, environ, err=err)


def check_cgroup(
    ref: CgroupRef, budget: Budget, opts: CheckOptions, *, err: TextIO | None = None
) -> ExitStatus:
    """Attach to a cgroup for `opts.session.duration` seconds (or until it is removed)."""
    from oversub.cli.check.reports import prepare_reports
    from oversub.run.checking import run_cgroup

    opts, environ = prepare_reports(opts, err)
    recorder = _recorder(opts, budget, err, "check-cgroup", None, None)
    outcome = run_cgroup(ref, budget, opts.session, _progress(budget, opts, err, recorder))
    return _recorded(recorder, outcome, opts, environ, err=err)


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


def _recorded(
    recorder: Recorder | None,
    outcome: CheckOutcome,
    opts: CheckOptions,
    environ: Mapping[str, str] | None,
    metrics: Mapping[str, float] | None = None,
    *,
    err: TextIO | None = None,
) -> ExitStatus:
    """The recording finished first (its summary is the judged run's), then the reports,
    told whether the recording could be written whole: when it could not, the exit is 3,
    as for a report file, and the closing line says so."""
    from oversub.cli.check.reports import report

    if recorder is None:
        return report(outcome, opts, err=err, environ=environ)
    from oversub.analysis.policy import judge
    from oversub.cli.record.writer import finish_quietly, summary_record
    from oversub.run import stopsignals

    with stopsignals.deferred() as during:
        failure = finish_quietly(
            recorder,
            summary_record(
                judge(outcome).summary,
                command_status=outcome.command_status,
                timed_out=outcome.timed_out,
                interrupted=outcome.interrupted,
                metrics=metrics,
            ),
        )
    status = report(outcome, opts, err=err, environ=environ, failure=failure)
    if during.received and status is not ExitStatus.INTERRUPTED:
        # A stop signal while the recording was finished: the same last line as one while
        # the report files are written (`reports.report`).
        import sys

        out = err if err is not None else sys.stderr
        with contextlib.suppress(OSError, ValueError):
            out.write("oversub check: interrupted, exit 130\n")
            out.flush()
        return ExitStatus.INTERRUPTED
    return status


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
    from oversub.cli.check.reports import prepare_reports, report
    from oversub.run.checking import run_static

    opts, environ = prepare_reports(opts, err)
    return report(run_static(budget, procs, threads, workers), opts, err=err, environ=environ)
