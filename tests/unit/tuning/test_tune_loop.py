"""`cli.tune.loop.run_tuning` with a fake trial runner and a fake clock: the plan, the
interleaved order, the budget, a failing default, an interrupt."""

from __future__ import annotations

import pytest

from oversub.analysis.plans import thread_env
from oversub.cli.tune.loop import TrialOutcome, run_tuning
from oversub.cli.tune.trialrun import environment
from oversub.tuning.trials import Candidate, Trial, TunePlan

CANDS = (
    Candidate("default", None, None, (), {}, ("default",)),
    Candidate("T=2", 2, None, (), dict(thread_env(2)), ("recommended",)),
    Candidate("T=1", 1, None, (), dict(thread_env(1)), ("one thread",)),
)


class Fake:
    """Trials of `length` seconds on a fake clock; figures from `value(candidate)`."""

    def __init__(self, length: float = 1.0, fail_default: bool = False) -> None:
        self.now = 0.0
        self.length = length
        self.fail_default = fail_default
        self.limits: list[float | None] = []
        self.interrupt_at: int | None = None

    def clock(self) -> float:
        return self.now

    def __call__(
        self, index: int, candidate: int, round: int, warmup: bool, limit: float | None
    ) -> TrialOutcome:
        self.limits.append(limit)
        self.now += self.length
        failed = self.fail_default and candidate == 0
        trial = Trial(
            index,
            candidate,
            round,
            warmup,
            None if failed else float(candidate + 1),
            self.length,
            1 if failed else 0,
            failure="exit status 1" if failed else None,
        )
        return TrialOutcome(trial, interrupted=index == self.interrupt_at)


class Events:
    def __init__(self) -> None:
        self.plans: list[TunePlan] = []
        self.ended: list[int] = []

    def planned(self, plan: TunePlan) -> None:
        self.plans.append(plan)

    def trial_started(self, index: int, total: int, candidate: int, elapsed: float) -> None:
        pass

    def trial_ended(self, trial: Trial, total: int, elapsed: float, eta: float) -> None:
        self.ended.append(trial.index)


def test_interleaved_schedule_planned_after_the_first_trial() -> None:
    fake, events = Fake(), Events()
    result = run_tuning(CANDS, fake, events, warmup=1, runs=2, budget_s=100, clock=fake.clock)
    assert result.ended == "complete"
    assert [t.candidate for t in result.trials] == [0, 1, 2] * 3
    assert [t.warmup for t in result.trials] == [True] * 3 + [False] * 6
    assert [t.round for t in result.trials] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert len(events.plans) == 1 and events.plans[0].trials == 9
    assert events.ended == list(range(1, 10))


def test_the_budget_is_honoured_within_one_trial() -> None:
    fake, events = Fake(length=3.0), Events()
    result = run_tuning(CANDS, fake, events, warmup=0, runs=10, budget_s=20, clock=fake.clock)
    assert result.ended == "budget"
    assert result.elapsed_s <= 20
    assert len(result.trials) == 6
    # Every trial after the first may outlive the budget's end by one trial, no more.
    assert all(limit is not None and limit <= 20 + 3 for limit in fake.limits)


def test_a_failing_default_ends_the_run() -> None:
    fake, events = Fake(fail_default=True), Events()
    result = run_tuning(CANDS, fake, events, warmup=0, runs=3, budget_s=100, clock=fake.clock)
    assert result.ended == "default-failed" and len(result.trials) == 1


def test_an_interrupted_trial_ends_the_run() -> None:
    fake, events = Fake(), Events()
    fake.interrupt_at = 4
    result = run_tuning(CANDS, fake, events, warmup=0, runs=3, budget_s=100, clock=fake.clock)
    assert result.ended == "interrupted" and len(result.trials) == 4


def test_environment_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    import os

    with environment({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}):
        assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "1"
    assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ


def test_environment_unsets_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MKL_DOMAIN_NUM_THREADS", "MKL_BLAS=1")
    import os

    with environment({"OMP_NUM_THREADS": "2"}, unset=["MKL_DOMAIN_NUM_THREADS"]):
        assert "MKL_DOMAIN_NUM_THREADS" not in os.environ
    assert os.environ["MKL_DOMAIN_NUM_THREADS"] == "MKL_BLAS=1"


def test_replan_after_the_first_trial_replaces_the_candidates() -> None:
    fake, events = Fake(), Events()
    seen: list[Trial] = []
    shorter = CANDS[:2]

    def replan(first: Trial) -> tuple[Candidate, ...]:
        seen.append(first)
        return shorter

    result = run_tuning(
        CANDS, fake, events, warmup=0, runs=2, budget_s=100, clock=fake.clock, replan=replan
    )
    assert [t.index for t in seen] == [1] and seen[0].candidate == 0
    assert result.candidates == shorter
    assert [t.candidate for t in result.trials] == [0, 1, 0, 1]
    assert events.plans[0].candidates == 2
