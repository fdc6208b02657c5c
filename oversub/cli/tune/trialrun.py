"""One trial of `oversub tune`: the candidate's arguments and variables, CMD's stdout
discarded (or passed to stderr) and read for the metric, the recording, the figure.

The run itself (`run_trial`) is `run.checking.run_command`: check's sampler, verdict,
containment and stop, with the candidate's variables set around it (`environment`) and the
command's own exit timestamped (`run.runner.ExitWatch`). The metric is read by check
--metric's parser (`cli.check.metric.StdoutMetrics`); in fixed work, the first trial's
stdout is read too, for the names of the figures CMD prints (a hint for --metric).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from oversub.run.checking import Silent, Tapped

if TYPE_CHECKING:
    from oversub.cli.check.metric import StdoutMetrics
    from oversub.cli.record.writer import Recorder
    from oversub.cli.tune.loop import TrialOutcome
    from oversub.core.model import Budget
    from oversub.core.results import CheckOutcome, Summary
    from oversub.run.checking import Progress
    from oversub.run.session import SessionOptions
    from oversub.tuning.trials import Candidate, TuneOptions


@contextlib.contextmanager
def environment(env: Mapping[str, str], unset: Sequence[str] = ()) -> Iterator[None]:
    """While inside, `env` is set and `unset` removed in this process's environment (which
    the trial's command inherits); the previous values (or their absence) are restored on
    exit."""
    saved = {name: os.environ.get(name) for name in [*env, *unset]}
    try:
        for name in unset:
            os.environ.pop(name, None)
        os.environ.update(env)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _ExitStamp:
    """The moment a process exits, taken by a thread that waits on `run.runner.ExitWatch`
    (its pidfd; without one, /proc asked every `run.runner.EXIT_POLL_S`), so that the figure
    of fixed work is CMD's wall time, not oversub's. Still None: the caller's clock."""

    def __init__(self, pid: int) -> None:
        from oversub.run.runner import ExitWatch

        self.exited_at: float | None = None
        self._watch = ExitWatch(pid)
        self._thread = threading.Thread(target=self._wait, name="oversub-tune-exit", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while not self._watch.gone():
                self._watch.wait(60.0)
            self.exited_at = time.monotonic()

    def close(self) -> None:
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            self._watch.close()


class _Stamped(Tapped):
    """A `Progress` that notes when the command started (and watches for its exit), then
    passes everything on."""

    def __init__(self, inner: Progress) -> None:
        super().__init__(inner, lambda *_: None)
        self.started_at: float | None = None
        self.stamp: _ExitStamp | None = None

    def started(
        self, pid: int, command: tuple[str, ...], session: SessionOptions, timeout: float | None
    ) -> None:
        self.started_at = time.monotonic()
        self.stamp = _ExitStamp(pid)
        self.inner.started(pid, command, session, timeout)


@dataclass(frozen=True)
class TrialRun:
    """One command run as `check` runs it, with its timing."""

    outcome: CheckOutcome
    wall_s: float | None
    """The command's own wall time, start to exit (None when it never started)."""
    seconds: float
    """The whole trial as oversub spent it: start, sampling, stopping the tree."""


def run_trial(
    argv: list[str],
    env: Mapping[str, str],
    budget: Budget,
    session: SessionOptions,
    progress: Progress,
    *,
    timeout: float | None,
    grace: float = 3.0,
    unset: Sequence[str] = (),
) -> TrialRun:
    """Run `argv` once under `env` (and without `unset`), watched and stopped exactly as
    `check -- CMD` is."""
    from oversub.run.checking import run_command

    stamped = _Stamped(progress)
    begun = time.monotonic()
    try:
        with environment(env, unset):
            outcome = run_command(argv, budget, session, stamped, timeout=timeout, grace=grace)
    finally:
        if stamped.stamp is not None:
            stamped.stamp.close()
    ended = time.monotonic()
    wall = None
    if stamped.started_at is not None:
        exited = stamped.stamp.exited_at if stamped.stamp is not None else None
        wall = (exited if exited is not None else ended) - stamped.started_at
    return TrialRun(outcome=outcome, wall_s=wall, seconds=ended - begun)


@contextlib.contextmanager
def _stdout_to(fd: int) -> Iterator[None]:
    """While inside, fd 1 (which the trial's command inherits) is `fd`."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(fd, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def substitute(argv: Sequence[str], procs: int, threads: int) -> list[str]:
    """CMD's arguments with `{procs}` and `{threads}` replaced (nothing else: other braces
    stay as they are)."""
    return [arg.replace("{procs}", str(procs)).replace("{threads}", str(threads)) for arg in argv]


def inherited_threads(vcpus: int) -> int:
    """What `{threads}` means for the default candidate: the inherited OMP_NUM_THREADS
    (its first level), else N (what the pools use by default)."""
    from oversub.core.pools import first_level

    value = (
        first_level(os.environ.get("OMP_NUM_THREADS", ""))
        if "OMP_NUM_THREADS" in os.environ
        else None
    )
    return value if value is not None else vcpus


def _status_text(status: int | None) -> str:
    if status is None:
        return "did not start"
    if status < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit status {status}"


_SLUG = re.compile(r"[^A-Za-z0-9_.=-]+")


class TrialRunner:
    """One trial: the candidate's environment and arguments, stdout handled, run as check."""

    def __init__(
        self,
        argv: list[str],
        candidates: tuple[Candidate, ...],
        budget: Budget,
        session: SessionOptions,
        opts: TuneOptions,
        procs: int,
        default_threads: int,
    ) -> None:
        self.argv = argv
        self.candidates = candidates
        self.budget = budget
        self.session = session
        self.opts = opts
        self.procs = procs
        self.default_threads = default_threads
        self.record_failures: list[str] = []
        self.printed: list[str] = []
        """Names of the `NAME=<number>` tokens the first trial printed, in fixed work (a
        hint for --metric when the wall time cannot rank the candidates)."""

    def retarget(self, candidates: tuple[Candidate, ...], procs: int) -> None:
        """Run these candidates from now on, with `{procs}` = `procs` (M seen by the first
        trial: `tuning.advice.inferred_procs`)."""
        self.candidates = candidates
        self.procs = procs

    def __call__(
        self, index: int, candidate: int, round: int, warmup: bool, limit: float | None
    ) -> TrialOutcome:
        from oversub.analysis.policy import judge
        from oversub.cli.tune.loop import TrialOutcome
        from oversub.tuning.trials import Trial

        c = self.candidates[candidate]
        argv = substitute(
            self.argv,
            c.procs if c.procs is not None else self.procs,
            c.threads if c.threads is not None else self.default_threads,
        )
        env = dict(c.env)
        metric = self.opts.metric
        if metric is not None and "PYTHONUNBUFFERED" not in os.environ:
            env["PYTHONUNBUFFERED"] = "1"  # a stopped Python must not lose its last lines
        timeout = limit
        if self.opts.trial_seconds is not None:
            timeout = (
                self.opts.trial_seconds if limit is None else min(limit, self.opts.trial_seconds)
            )
        recorder, progress = self._recorder(index, c, argv)
        captured: StdoutMetrics | None = None
        with contextlib.ExitStack() as stack:
            sink = os.open(os.devnull, os.O_WRONLY) if not self.opts.show_output else 2
            if sink != 2:
                stack.callback(os.close, sink)
            stack.enter_context(_stdout_to(sink))
            if metric is not None or index == 1:
                from oversub.cli.check.metric import StdoutMetrics

                captured = stack.enter_context(StdoutMetrics(None if metric is None else [metric]))
            try:
                ran = run_trial(
                    argv, env, self.budget, self.session, progress, timeout=timeout, unset=c.unset
                )
            except BaseException:  # CMD could not start, or a signal before it did
                if recorder is not None:
                    recorder.close()
                raise
        outcome = ran.outcome
        judged = judge(outcome).summary
        if metric is None and captured is not None:
            self.printed = list(captured.values)
        status = outcome.command_status
        value: float | None = None
        failure: str | None = None
        cut = False
        if outcome.interrupted:
            failure = "interrupted"
        elif self.opts.trial_seconds is None:
            if outcome.timed_out:
                failure, cut = "stopped at the end of the budget", True
            elif status != 0:
                failure = _status_text(status)
            else:
                value = ran.wall_s
        else:
            assert metric is not None and captured is not None
            stopped_early = (
                outcome.timed_out and timeout is not None and timeout < self.opts.trial_seconds
            )
            if stopped_early:
                failure, cut = "stopped at the end of the budget", True
            elif not outcome.timed_out and status != 0:
                failure = _status_text(status)
            elif metric not in captured.values:
                failure = f"no {metric}=<number> line on stdout"
            elif self.opts.metric_stat == "mean":
                value = captured.means[metric]
            else:
                value = captured.values[metric]
        if recorder is not None:
            self._finish_record(recorder, outcome, judged, captured)
        trial = Trial(
            index=index,
            candidate=candidate,
            round=round,
            warmup=warmup,
            value=value,
            seconds=ran.seconds,
            status=status,
            failure=failure,
            verdict=judged.verdict,
            delay_ratio=judged.totals.run_delay_ratio,
            record=None if recorder is None else str(self._record_path(index, c)),
            busy_processes=judged.totals.busy_processes if judged.samples else None,
        )
        return TrialOutcome(trial=trial, interrupted=outcome.interrupted, cut=cut)

    def _record_path(self, index: int, c: Candidate) -> Path:
        assert self.opts.record_dir is not None
        slug = _SLUG.sub("_", c.label)[:60]
        return self.opts.record_dir / f"trial-{index:03d}-{slug}.ndjson"

    def _recorder(
        self, index: int, c: Candidate, argv: list[str]
    ) -> tuple[Recorder | None, Progress]:
        quiet = Silent()
        if self.opts.record_dir is None:
            return None, quiet
        from oversub.cli.record.writer import RecordingProgress, open_recorder
        from oversub.run.checking import report_command

        recorder = open_recorder(
            self._record_path(index, c),
            50.0,
            mode="check-command",
            pid=None,
            command=report_command(argv),
            interval=self.session.interval,
            budget=self.budget,
            thresholds=self.session.thresholds,
            err=self.opts.err,
        )
        return recorder, RecordingProgress(quiet, recorder)

    def _finish_record(
        self,
        recorder: Recorder,
        outcome: CheckOutcome,
        judged: Summary,
        captured: StdoutMetrics | None,
    ) -> None:
        from oversub.cli.record.writer import finish_quietly, summary_record
        from oversub.run import stopsignals

        with stopsignals.deferred():
            failure = finish_quietly(
                recorder,
                summary_record(
                    judged,
                    command_status=outcome.command_status,
                    timed_out=outcome.timed_out,
                    interrupted=outcome.interrupted,
                    metrics=captured.values
                    if captured is not None and self.opts.metric is not None
                    else None,
                ),
            )
        if failure is not None:
            self.record_failures.append(failure)
