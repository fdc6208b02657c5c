"""`oversub tune`'s trial loop: one trial after another, interleaved, within the budget.

This module decides which trial comes next and whether the budget still has room for it
(`tuning.schedule`); a trial itself, from its variables to its figure, is the
`TrialRunner`'s (`cli.tune.trialrun`), which runs it as `check -- CMD` runs.

The first stop signal ends the loop: `run_command` stops the tree of the trial that runs
and reports it interrupted; one between trials raises KeyboardInterrupt here. Either way
what was measured is returned with `ended="interrupted"`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from oversub.tuning.schedule import fit, schedule
from oversub.tuning.trials import Candidate, Trial, TunePlan


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
