"""`oversub tune`'s trial loop: one trial after another, interleaved, within the budget.

Each trial is `check -- CMD` under one candidate's variables: `run.checking.run_command` starts
it in its own session, samples its tree with check's sampler and verdict, and stops the
whole tree as check does (subreaper, TERM then KILL). This module only sets the candidate's
variables around it (`environment`), timestamps the command's own exit (a pidfd watched by a
thread, so the figure of fixed work is CMD's wall time, not oversub's), and decides which
trial comes next and whether the budget still has room for it. What a trial's output means
(the metric) is the CLI's: it passes `run_trial`'s caller in as a `TrialRunner`.

The first stop signal ends the loop: `run_command` stops the tree of the trial that runs
and reports it interrupted; one between trials raises KeyboardInterrupt here. Either way
what was measured is returned with `ended="interrupted"`.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from oversub.tuning.candidates import fit, schedule
from oversub.tuning.trials import Candidate, Trial, TunePlan

if TYPE_CHECKING:
    from oversub.core.model import Budget
    from oversub.core.results import Assessment, CheckOutcome, Interval
    from oversub.run.checking import Progress
    from oversub.run.session import SessionOptions


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
    """The moment a process exits, taken by a thread blocked on its pidfd (Linux >= 5.3).

    Without a pidfd, `exited_at` stays None and the caller falls back to its own clock."""

    def __init__(self, pid: int) -> None:
        self.exited_at: float | None = None
        self._fd: int | None = None
        self._thread: threading.Thread | None = None
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            return
        try:
            self._fd = pidfd_open(pid)
        except OSError:
            return
        self._thread = threading.Thread(target=self._wait, name="oversub-tune-exit", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        assert self._fd is not None
        with contextlib.suppress(OSError, ValueError):
            # poll, not select: oversub raises its descriptor limit (run.fdlimit), and select
            # refuses a descriptor above 1,023 (then this pidfd's exit went unseen).
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            poller.poll()
            self.exited_at = time.monotonic()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._fd is not None and (self._thread is None or not self._thread.is_alive()):
            os.close(self._fd)
            self._fd = None


class _Stamped:
    """A `Progress` that notes when the command started (and watches for its exit), then
    passes everything on."""

    def __init__(self, inner: Progress) -> None:
        self.inner = inner
        self.started_at: float | None = None
        self.stamp: _ExitStamp | None = None

    def started(
        self, pid: int, command: tuple[str, ...], session: SessionOptions, timeout: float | None
    ) -> None:
        self.started_at = time.monotonic()
        self.stamp = _ExitStamp(pid)
        self.inner.started(pid, command, session, timeout)

    def attached(self, pid: int, session: SessionOptions) -> None:
        self.inner.attached(pid, session)

    def interval(
        self, iv: Interval, assessment: Assessment, intervals: int, elapsed: float
    ) -> None:
        self.inner.interval(iv, assessment, intervals, elapsed)

    def close(self) -> None:
        self.inner.close()


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


@dataclass(frozen=True)
class TrialOutcome:
    """What the CLI's trial runner made of one trial."""

    trial: Trial
    interrupted: bool = False
    """A stop signal came during the trial."""
    cut: bool = False
    """The trial ran into the end of the budget and was stopped: no figure."""


class TrialRunner(Protocol):
    """Runs trial `index` (from 1) of `candidate` in `round`, stopping it after `limit`
    seconds (None: no limit)."""

    def __call__(
        self, index: int, candidate: int, round: int, warmup: bool, limit: float | None
    ) -> TrialOutcome: ...


class Events(Protocol):
    """What the loop says while it goes (`cli.tune.driver` writes it to stderr)."""

    def planned(self, plan: TunePlan) -> None: ...

    def trial_started(self, index: int, total: int, candidate: int, elapsed: float) -> None: ...

    def trial_ended(self, trial: Trial, total: int, elapsed: float, eta: float) -> None: ...


@dataclass(frozen=True)
class LoopResult:
    trials: tuple[Trial, ...]
    plan: TunePlan | None
    ended: str
    elapsed_s: float
    candidates: tuple[Candidate, ...]
    """The candidates the trials ran (`replan` may have replaced the first list)."""


Replan = Callable[[Trial], "Sequence[Candidate] | None"]
"""Called with the first trial (the default's first run, before the plan): new candidates to
plan with (the default still first, so that trial stays valid), or None to keep them."""


def run_tuning(
    candidates: Sequence[Candidate],
    run: TrialRunner,
    events: Events,
    *,
    warmup: int,
    runs: int | None,
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
    replan: Replan | None = None,
) -> LoopResult:
    """Run the interleaved schedule that fits `budget_s`.

    The first trial (the default's first run) is run first and its length plans the rest;
    `replan` may then replace the candidates (what the first trial saw changes them).
    A trial starts only while the budget has room for one more trial of
    the longest length seen, and a trial that outlives the budget by that length is
    stopped: the budget is honoured to within one trial. The default's first trial failing
    ends the run (`default-failed`): nothing is left to compare with.
    """
    start = clock()
    trials: list[Trial] = []
    lengths: list[float] = []
    plan: TunePlan | None = None
    ended = "complete"
    try:
        # The first trial (the default's first run) is run before the plan: its length,
        # not a guess, plans the rest (a fixed-time CMD may end before its seconds).
        order = [(1, 0, warmup > 0)]
        position = 0
        while position < len(order):
            round_, candidate, is_warmup = order[position]
            elapsed = clock() - start
            expected = max(lengths) if lengths else budget_s
            if lengths and elapsed + expected > budget_s:
                ended = "budget"
                break
            total = len(order) if plan is not None else 1
            events.trial_started(position + 1, total, candidate, elapsed)
            limit = max(budget_s + expected - elapsed, 0.1) if lengths else budget_s
            outcome = run(position + 1, candidate, round_, is_warmup, limit)
            trials.append(outcome.trial)
            lengths.append(outcome.trial.seconds)
            position += 1
            elapsed = clock() - start
            first_default = candidates[candidate].is_default and not any(
                t.candidate == candidate for t in trials[:-1]
            )
            failed = first_default and outcome.trial.value is None
            if plan is None and not (failed or outcome.interrupted or outcome.cut):
                replaced = None if replan is None else replan(outcome.trial)
                if replaced is not None:
                    candidates = replaced
                plan = fit(len(candidates), warmup, runs, outcome.trial.seconds, budget_s)
                events.planned(plan)
                order = schedule(plan.candidates, warmup, plan.runs)
            left = len(order) - position
            events.trial_ended(outcome.trial, len(order), elapsed, left * max(lengths))
            if outcome.interrupted:
                ended = "interrupted"
                break
            if outcome.cut:
                ended = "budget"
                break
            if failed:
                ended = "default-failed"
                break
    except KeyboardInterrupt:
        ended = "interrupted"
    return LoopResult(tuple(trials), plan, ended, clock() - start, tuple(candidates))
