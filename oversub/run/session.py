"""The sampling loop shared by `watch` and `check`: it owns the clock, nothing else does.

Probes read, analysis computes, the caller renders: this module only paces samples, feeds
each pair to the pure analysis and hands the result to a callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from oversub.analysis.rates import interval as interval_between
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.model import Budget
from oversub.probe.sampler import TreeSampler
from oversub.results import Assessment, Interval, Summary
from oversub.samples import TreeSample
from oversub.thresholds import Thresholds

OnInterval = Callable[[Interval, Assessment, int, float], None]
"""Called after each interval with (interval, assessment, intervals so far, elapsed seconds)."""


@dataclass(frozen=True)
class SessionOptions:
    """How long and how often to sample."""

    interval: float = 1.0
    """Seconds between samples."""
    duration: float | None = None
    """Stop after this many seconds of measurement (None: until the target exits)."""
    warmup: float = 0.0
    """Seconds to let pass before the first measured sample (start-up is not steady state)."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    max_intervals: int | None = None
    """Stop after this many intervals (`--once` is 1)."""


@dataclass(frozen=True)
class SessionResult:
    summary: Summary
    interrupted: bool
    """Ctrl-C (or SIGTERM) ended the run."""


def _root_gone(sample: TreeSample) -> bool:
    """The target has exited: missing, a zombie waiting for its parent to reap it, or listed
    but with no thread left to read (reaped between the /proc scan and the task reads).
    A cgroup (no root process) is gone when it was removed; while empty it is only idle."""
    if sample.root_pid == 0:
        return sample.gone
    root = sample.processes.get(sample.root_pid)
    if root is None:
        return True
    return all(t.state in "ZX" for t in root.threads)


def run_session(
    sampler: TreeSampler,
    budget: Budget,
    options: SessionOptions,
    *,
    on_interval: OnInterval | None = None,
    should_stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SessionResult:
    """Sample until the duration ends, the target exits, `should_stop()` or Ctrl-C.

    The first sample raises (NoSuchProcess, PermissionDenied) when the target cannot be
    observed at all; after that, vanishing processes are normal and end the run quietly.
    """
    run = RunSummary(root_pid=sampler.root_pid)
    th = options.thresholds
    target_exited = False
    interrupted = False
    intervals = 0
    pace = _Pace(options.interval)
    prev = sampler.sample()
    started = clock()
    try:
        if options.warmup > 0 and not _root_gone(prev):
            _sleep_until(started + options.warmup, clock, sleep, should_stop)
            prev = sampler.sample()
        measure_start = clock()
        # The run ends at the duration even in the middle of an interval: the last one is
        # shorter, never longer than asked.
        end = None if options.duration is None else measure_start + options.duration
        next_at = measure_start
        while True:
            if _root_gone(prev):
                target_exited = True
                break
            if should_stop is not None and should_stop():
                # The caller's reason (command exited, timeout): only a sample that finds the
                # root gone says the target exited, so take one last look.
                target_exited = _root_gone(sampler.sample())
                break
            next_at += options.interval
            if end is not None:
                next_at = min(next_at, end)
            _sleep_until(next_at, clock, sleep, should_stop)
            curr = sampler.sample()
            if curr.t <= prev.t:  # a clock that did not move gives no rate
                continue
            iv = interval_between(prev, curr, budget.vcpus, th)
            run.add(iv)
            intervals += 1
            pace.add(iv.seconds, capped=end is not None and next_at >= end)
            if on_interval is not None:
                on_interval(iv, assess(iv, th), intervals, clock() - measure_start)
            prev = curr
            if options.max_intervals is not None and intervals >= options.max_intervals:
                break
            if end is not None and clock() >= end:
                break
            if next_at < clock():  # we fell behind (overloaded host): do not burst
                next_at = clock()
    except KeyboardInterrupt:
        interrupted = True
    # The summary itself notes a run in which nothing was measured.
    summary = run.result(budget, th, target_exited=target_exited, notes=pace.notes())
    return SessionResult(summary=summary, interrupted=interrupted)


SLOW_PACE = 1.25
"""Intervals that average this many times the asked interval or more are reported (once, as
a note of the summary): the rates stay right, but the user asked for a finer resolution."""


class _Pace:
    """The intervals actually achieved, against the one asked for."""

    def __init__(self, asked: float) -> None:
        self.asked = asked
        self.seconds = 0.0
        self.count = 0

    def add(self, seconds: float, *, capped: bool) -> None:
        # The last interval of a run ended by --duration is short by design: not a pace.
        if not capped:
            self.seconds += seconds
            self.count += 1

    def notes(self) -> tuple[str, ...]:
        if not self.count or self.seconds / self.count < SLOW_PACE * self.asked:
            return ()
        mean = self.seconds / self.count
        return (
            f"intervals averaged {mean:.2f} s, not the {self.asked:g} s asked: reading the tree "
            "took longer than the interval on this machine (a longer --interval keeps pace)",
        )


def _sleep_until(
    deadline: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    should_stop: Callable[[], bool] | None,
) -> None:
    """Sleep in short slices so a finished command is noticed quickly."""
    while True:
        left = deadline - clock()
        if left <= 0:
            return
        if should_stop is not None and should_stop():
            return
        sleep(min(left, 0.1))
