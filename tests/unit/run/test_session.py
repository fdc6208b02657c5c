"""The sampling loop's clock, with a fake clock and sampler: where a run ends, and what it says
when the sampler cannot keep the interval asked for."""

from __future__ import annotations

import pytest

from oversub.analysis.plans import synthetic_budget
from oversub.core.samples import HostSample, ProcessSample, TreeSample
from oversub.core.targets import Target
from oversub.run.session import LONGEST_WAIT_S, SLOW_PACE, SessionOptions, follow
from oversub.run.sources import OneSource
from tests.support.builders import thread

ROOT = 4242


class Clock:
    """Monotonic time that only sleeping and sampling advance."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


class Sampler:
    """A live one-thread root; each sample costs `cost` seconds of the clock."""

    root_pid = ROOT

    def __init__(self, clock: Clock, cost: float = 0.0) -> None:
        self.clock = clock
        self.cost = cost
        self.times: list[float] = []

    def sample(self) -> TreeSample:
        self.clock.now += self.cost
        self.times.append(self.clock.now)
        busy = round(self.clock.now * 1e9)
        root = ProcessSample(
            pid=ROOT,
            ppid=1,
            name="python",
            cmdline="python",
            start_ticks=1,
            threads=(thread(ROOT, cpu_ns=busy // 4, delay_ns=0),),
            pools=(),
            thread_env={},
        )
        host = HostSample(busy_ns=busy, steal_ns=0, psi_some_us=None, throttle=None)
        return TreeSample(t=self.clock.now, root_pid=ROOT, processes={ROOT: root}, host=host)


def _run(options: SessionOptions, cost: float = 0.0) -> tuple[Sampler, Clock, list[str]]:
    clock = Clock()
    sampler = Sampler(clock, cost)
    source = OneSource(Target.tree(ROOT), sampler, synthetic_budget(2), "")  # type: ignore[arg-type]
    result = follow(source, options, sleep=clock.sleep, clock=clock)
    return sampler, clock, list(result.summary.notes)


def test_duration_ends_the_run_in_the_middle_of_an_interval() -> None:
    # `watch PID --interval 5 --duration 1` took 5 s: the run waited out the interval.
    sampler, clock, _ = _run(SessionOptions(interval=5.0, duration=1.0))
    assert sampler.times == [100.0, 101.0]
    assert clock.now == 101.0


def test_an_astronomic_interval_still_ends_at_the_duration() -> None:
    sampler, clock, _ = _run(SessionOptions(interval=1e308, duration=0.5))
    assert clock.now == 100.5
    assert len(sampler.times) == 2


def test_duration_longer_than_intervals_keeps_whole_intervals() -> None:
    sampler, _, notes = _run(SessionOptions(interval=1.0, duration=2.5))
    assert sampler.times == [100.0, 101.0, 102.0, 102.5]
    assert notes == []  # the short last interval is by design, not a slow pace


def test_a_sampler_slower_than_the_interval_is_said_once() -> None:
    # 0.1 s asked, every sample takes 0.23 s (3,000 threads on a busy machine). A late
    # sample is followed by a whole interval of sleep (no burst to catch up): 0.33 s each.
    _, _, notes = _run(SessionOptions(interval=0.1, duration=3.0), cost=0.23)
    slow = [n for n in notes if "not the 0.1 s asked" in n]
    assert len(slow) == 1, notes
    assert "averaged 0.33 s" in slow[0]


def test_a_sampler_that_keeps_pace_says_nothing() -> None:
    cost = 0.1 * (SLOW_PACE - 1) / 2  # late, but well within the tolerance
    _, _, notes = _run(SessionOptions(interval=0.1, duration=2.0), cost=cost)
    assert notes == []


class _Exiting:
    """The exit watch of a root that exits at `at` on the clock: its wait returns then."""

    def __init__(self, clock: Clock, at: float) -> None:
        self.clock, self.at, self.waits = clock, at, 0

    def gone(self) -> bool:
        return self.clock.now >= self.at

    def wait(self, seconds: float) -> None:
        self.waits += 1
        self.clock.now = min(self.clock.now + seconds, max(self.clock.now, self.at))

    def close(self) -> None:
        pass


def _waits(options: SessionOptions) -> list[float]:
    """The seconds of each wait of a run of `options` on the fake clock."""
    clock = Clock()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.sleep(seconds)

    source = OneSource(Target.tree(ROOT), Sampler(clock, 0.0), synthetic_budget(2), "")  # type: ignore[arg-type]
    follow(source, options, sleep=sleep, clock=clock)
    return waits


def test_the_loop_wakes_once_an_interval() -> None:
    # It slept in 0.1 s slices to look for an exit: ten wake-ups a second, 1.2 ms of CPU.
    assert _waits(SessionOptions(interval=1.0, duration=5.0)) == [1.0] * 5


def test_a_warm_up_of_years_is_waited_in_turns_the_kernel_takes() -> None:
    # `check --warmup 1e9`: one poll() of 1e12 ms raised OverflowError (an internal error).
    waits = _waits(SessionOptions(interval=1.0, duration=1.0, warmup=1e9))
    assert max(waits) == LONGEST_WAIT_S
    assert sum(waits) == pytest.approx(1e9 + 1.0)


def test_the_roots_exit_ends_the_wait_and_the_run() -> None:
    # No `sleep` given: the source's wait, which its root's exit ends (a pidfd), not the
    # end of a 60 s interval.
    clock = Clock()
    sampler = Sampler(clock, 0.0)
    watch = _Exiting(clock, at=130.5)
    source = OneSource(Target.tree(ROOT), sampler, synthetic_budget(2), "", watch)  # type: ignore[arg-type]
    follow(source, SessionOptions(interval=60.0, duration=600.0), clock=clock)
    assert clock.now == 130.5
    assert watch.waits == 1
    assert set(sampler.times) == {100.0, 130.5}  # the first reading, and the last look
