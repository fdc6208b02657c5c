"""`oversub tune`'s plan: how many candidates and runs fit the budget, and the interleaved
order they run in. Pure: `cli.tune.loop` runs the trials it orders."""

from __future__ import annotations

from oversub.tuning.trials import TunePlan

MIN_AUTO_RUNS = 2
"""Timed runs per candidate below which no interval exists: the plan drops candidates first."""
MAX_AUTO_RUNS = 10
"""Without --runs, at most this many timed runs per candidate however large the budget."""


def fit(
    candidates: int,
    warmup: int,
    runs: int | None,
    trial_s: float,
    budget_s: float,
) -> TunePlan:
    """How many candidates and runs fit `budget_s` at `trial_s` a trial.

    With `runs` None ("as many as fit"): between 2 and 10 timed runs per candidate, and
    candidates dropped from the end of the list (the least important) until 2 fit. With
    `runs` given, candidates are dropped until the asked runs fit. At least two candidates
    (the default and one other) and one run are kept: the budget then ends the run early.
    """
    trial_s = max(trial_s, 1e-3)
    rounds_fitting = int(budget_s // trial_s)  # trials that fit, all candidates together
    keep = candidates
    floor = min(candidates, 2)
    want = MIN_AUTO_RUNS if runs is None else runs
    while keep > floor and keep * (warmup + want) > rounds_fitting:
        keep -= 1
    if runs is None:
        per = rounds_fitting // keep - warmup if keep else 0
        chosen = max(1, min(MAX_AUTO_RUNS, per))
    else:
        chosen = runs
    return TunePlan(
        candidates=keep,
        asked=candidates,
        warmup=warmup,
        runs=chosen,
        trial_s=trial_s,
        budget_s=budget_s,
    )


def schedule(candidates: int, warmup: int, runs: int) -> list[tuple[int, int, bool]]:
    """(round from 1, candidate, warm-up?) in the order to run: interleaved, every round runs
    every candidate once (A B C A B C), warm-up rounds first."""
    return [(r + 1, c, r < warmup) for r in range(warmup + runs) for c in range(candidates)]
