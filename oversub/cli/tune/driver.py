"""`oversub tune`'s work: candidates, one trial as `check -- CMD` runs it, the report.

Kept apart from `cli.tune.command` (the click command) so that only `oversub tune` pays for these
imports. The loop (`cli.tune.loop`) orders the trials; a trial is `cli.tune.trialrun`'s:
the candidate's variables set, CMD's `{procs}` and `{threads}` replaced, its stdout
discarded (or passed to stderr with --show-output) and, with --metric, read through
`cli.check.metric.StdoutMetrics` (check --metric's parser); then `run.checking.run_command`:
check's sampler, verdict and stop. What the run can say beyond its table (the M its trials
ran, a time-bound command, inherited variables) is `tuning.advice`'s.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from oversub.core.errors import ExitStatus, OversubError, ReportError, UsageError
from oversub.tuning.trials import TuneOptions

if TYPE_CHECKING:
    from oversub.tuning.trials import Candidate, Trial, TunePlan, TuneResult

PREFIX = "oversub tune: "

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_VALUE = re.compile(r"[A-Za-z0-9_.:+-]{1,64}\Z")


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class _Say:
    """The loop's events as lines on stderr."""

    def __init__(self, err: TextIO, candidates: tuple[Candidate, ...], budget_s: float) -> None:
        self.err = err
        self.candidates = candidates
        self.budget_s = budget_s

    def line(self, text: str) -> None:
        from oversub.render.escape import terminal

        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            self.err.write(PREFIX + terminal(text) + "\n")
            self.err.flush()

    def planned(self, plan: TunePlan) -> None:
        kept = "" if plan.candidates == plan.asked else f" ({plan.asked} asked, fewer fit)"
        self.line(
            f"{plan.candidates} candidates{kept} x ({plan.warmup} warm-up + {plan.runs} timed)"
            f" = {plan.trials} trials of ~{plan.trial_s:.1f} s, interleaved: about "
            f"{_clock(plan.seconds)} of the {_clock(self.budget_s)} budget"
        )

    def trial_started(self, index: int, total: int, candidate: int, elapsed: float) -> None:
        pass

    def trial_ended(self, trial: Trial, total: int, elapsed: float, eta: float) -> None:
        c = self.candidates[trial.candidate]
        what = f"failed ({trial.failure})" if trial.value is None else f"{trial.value:.4g}"
        kind = "warm-up" if trial.warmup else f"round {trial.round}"
        verdict = trial.verdict.value if trial.verdict is not None else "not judged"
        self.line(
            f"trial {trial.index} of {total}: {c.label} ({kind}) {what} [{verdict}], "
            f"{_clock(elapsed)} elapsed, eta {_clock(eta)}"
        )


def tune(argv: list[str], opts: TuneOptions) -> ExitStatus:
    """Plan, run and report a tuning run; the exit status of `oversub tune`."""
    from oversub.analysis.launcher import plan_for_launcher, procs_from_env
    from oversub.analysis.plans import make_plan, thread_env
    from oversub.cli.check.metric import check_names
    from oversub.cli.config import load_config, resolve_float, thresholds_from
    from oversub.cli.target import budget_of
    from oversub.cli.tune.loop import run_tuning
    from oversub.cli.tune.trialrun import TrialRunner, inherited_threads
    from oversub.run.session import SessionOptions
    from oversub.tuning import advice
    from oversub.tuning.candidates import make_candidates
    from oversub.tuning.ranking import rank
    from oversub.tuning.trials import TuneResult

    err = opts.err if opts.err is not None else sys.stderr
    if opts.metric is not None:
        check_names([opts.metric])
    if opts.trial_seconds is not None and opts.trial_seconds > opts.budget_s:
        raise UsageError(
            f"--trial-seconds {opts.trial_seconds:g} is longer than the --budget "
            f"({opts.budget_s:g} s): not one trial would fit"
        )
    dims = [parse_env_dimension(text) for text in opts.env_dims]
    if len({name for name, _ in dims}) != len(dims):
        raise UsageError("--env: each variable may be given once (list its values: NAME=1,2)")
    procs_values = parse_procs_values(opts.procs_values) if opts.procs_values else ()
    if opts.json_path is not None:
        from oversub.cli.writtenfiles import check_report_path

        check_report_path("--json", opts.json_path)
    if opts.record_dir is not None:
        _prepare_record_dir(opts.record_dir)
    config = load_config(Path.cwd())
    budget = budget_of(None)
    n = budget.vcpus
    info = None
    if opts.procs == "auto" or opts.procs is None:
        try:
            info = procs_from_env(os.environ)
        except UsageError:
            if opts.procs == "auto":
                raise
    if isinstance(opts.procs, int):
        m, source = opts.procs, "--procs"
    elif info is not None:
        m, source = info.procs, info.source
    elif procs_values:
        m, source = procs_values[0], "--procs-values"
    else:
        m, source = 1, None

    def recommended(count: int) -> int:
        if info is not None and count == info.procs:
            return plan_for_launcher(budget, info).threads_per_process
        return make_plan(budget, count).threads_per_process

    env = advice.inherited(os.environ, thread_env(1))

    def pools(t: int) -> dict[str, str]:
        # Every variable of the table, and every inherited thread count besides: T for all.
        return {**thread_env(t), **{name: str(t) for name, _ in env.raised}}

    def build(count: int) -> tuple[Candidate, ...]:
        return make_candidates(
            n,
            count,
            pools,
            recommended,
            procs_values=procs_values,
            env_dims=dims,
            max_candidates=opts.max_candidates,
            unset=[name for name, _ in env.unset],
        )

    candidates = build(m)
    session = SessionOptions(
        interval=resolve_float("interval", opts.interval, config),
        warmup=0.0,
        thresholds=thresholds_from(config, {}),
    )
    default_threads = inherited_threads(n)
    say = _Say(err, candidates, opts.budget_s)
    for note in advice.environment_notes(env):
        say.line(note)
    runner = TrialRunner(argv, candidates, budget, session, opts, m, default_threads)

    def replan(first: Trial) -> tuple[Candidate, ...] | None:
        nonlocal m, source
        seen = advice.inferred_procs(first)
        if source is not None or procs_values or seen is None:
            return None
        m, source = seen, "trials"
        say.line(
            f"the default's first trial ran {seen} processes busy at once: planning for "
            f"M = {seen} (give --procs M to choose)"
        )
        replaced = build(m)
        runner.retarget(replaced, m)
        say.candidates = replaced
        return replaced

    result = run_tuning(
        candidates,
        runner,
        say,
        warmup=opts.warmup,
        runs=opts.runs,
        budget_s=opts.budget_s,
        replan=replan,
    )
    candidates = result.candidates
    ranking = rank(candidates, result.trials, higher_is_better=opts.metric is not None, vcpus=n)
    seen = advice.seen_procs(result.trials)
    notes = [
        *advice.procs_notes(m, source, seen, n, recommended(m)),
        *advice.environment_notes(env),
    ]
    if opts.metric is None:
        notes += advice.time_bound_note(ranking, runner.printed)
    if any("{threads}" in a for a in argv):
        notes.append(f"{{threads}} of the default candidate is {default_threads} (inherited)")
    from oversub.run.checking import report_command

    tuned = TuneResult(
        command=report_command(argv),
        vcpus=n,
        procs=m,
        procs_source=source,
        metric=opts.metric,
        metric_stat=opts.metric_stat,
        higher_is_better=opts.metric is not None,
        candidates=candidates,
        trials=result.trials,
        plan=result.plan,
        ranking=ranking,
        ended=result.ended,
        elapsed_s=result.elapsed_s,
        notes=tuple(notes),
        procs_seen=seen,
    )
    return _report(tuned, opts, runner.record_failures)


def parse_env_dimension(text: str) -> tuple[str, tuple[str, ...]]:
    """`--env NAME=V1,V2,...` -> (NAME, (V1, V2, ...)); UsageError naming what is wrong."""
    name, sep, values = text.partition("=")
    if not sep or not _NAME.match(name):
        raise UsageError(f"--env {text!r}: expected NAME=V1,V2,... with NAME a variable name")
    parts = tuple(dict.fromkeys(v.strip() for v in values.split(",")))
    if not parts or any(not _VALUE.match(v) for v in parts):
        raise UsageError(
            f"--env {text!r}: each value is 1 to 64 letters, digits or _ . : + - (comma-separated)"
        )
    return name, parts


def parse_procs_values(text: str) -> tuple[int, ...]:
    """`--procs-values 1,2,4` -> (1, 2, 4); UsageError unless positive whole numbers."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit() or not 1 <= int(part) <= 65536:
            raise UsageError(
                f"--procs-values {text!r}: expected process counts such as 1,2,4 "
                "(whole numbers from 1 to 65536)"
            )
        values.append(int(part))
    return tuple(dict.fromkeys(values))


def _prepare_record_dir(path: Path) -> None:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(f"--record {path}: not a directory")
    try:
        if path.exists() and any(path.iterdir()):
            raise UsageError(
                f"--record {path}: not empty (each tuning run needs a directory of its own)"
            )
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--record {path}: {exc.strerror or exc}") from exc


def _width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 100


def _report(r: TuneResult, opts: TuneOptions, record_failures: list[str]) -> ExitStatus:
    """Write the outputs (also for a partial run), then the exit status."""
    from oversub.cli.output import colour_for, emit
    from oversub.run import stopsignals
    from oversub.tuning import TuneFormat, render_tune
    from oversub.tuning.ranking import fails_gate

    with stopsignals.deferred() as during:
        if opts.json_path is not None:
            from oversub.cli.writtenfiles import write_atomic
            from oversub.tuning.exports import tune_json

            write_atomic("--json", opts.json_path, tune_json(r))
        emit(
            render_tune(
                r, TuneFormat(opts.fmt), width=_width(sys.stdout), color=colour_for(sys.stdout)
            )
        )
    if r.ended == "interrupted" or during.received:
        return ExitStatus.INTERRUPTED
    if r.ended == "default-failed" or r.ranking.best is None:
        first = next((t for t in r.trials if r.candidates[t.candidate].is_default), None)
        why = first.failure if first is not None and first.failure else "nothing was measured"
        if (
            opts.metric is not None
            and first is not None
            and first.failure
            and "line" in first.failure
        ):
            raise MetricMissing(
                f"the default run printed no {opts.metric}=<number> line on stdout: fixed-time "
                f"mode (--metric {opts.metric}) needs CMD to print one"
            )
        raise DefaultFailed(f"the default run failed ({why}): nothing to compare with")
    if record_failures:
        raise ReportError(record_failures[0])
    if opts.fail_if_slower is not None and fails_gate(r.ranking, opts.fail_if_slower):
        return ExitStatus.FOUND
    return ExitStatus.OK


class DefaultFailed(OversubError):
    """The default candidate's run gave no figure: exit 3."""

    status = ExitStatus.UNOBSERVABLE


class MetricMissing(DefaultFailed):
    """Fixed time, and the default run printed no NAME= line."""
