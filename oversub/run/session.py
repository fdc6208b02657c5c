"""The one sampling loop of `watch`, `check` and `serve`: it owns the clock, nothing else does.

A source (`run.sources.attach`) reads every target it follows at once: one process tree, one
cgroup, or every cgroup of the node plus the node itself. This loop paces the readings,
turns each pair into one interval and one assessment per target (`analysis`), ranks the
targets and hands the round to a callback. Targets come and go between readings; a target
is measured once two consecutive readings hold it. A run ends at its duration, when
`should_stop()`, at a stop signal (KeyboardInterrupt) or, with `stop_at_exit`, when the
target exits (`Reading.up`, from `targets.Target.gone`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from oversub.analysis import fleet
from oversub.analysis.rates import KeptRates, counted
from oversub.analysis.rates import interval as interval_between
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.core.model import Budget
from oversub.core.names import TargetKind
from oversub.core.results import Assessment, Interval, Summary
from oversub.core.samples import TreeSample
from oversub.core.targets import Round, TargetResult
from oversub.core.thresholds import Thresholds

OnInterval = Callable[[Interval, Assessment, int, float], None]
"""Called after each interval of a one-target run with (interval, assessment, intervals so
far, elapsed seconds)."""


class SessionOptions(NamedTuple):
    """How long and how often to sample."""

    interval: float = 1.0
    """Seconds between samples."""
    duration: float | None = None
    """Stop after this many seconds of measurement (None: until the target exits)."""
    warmup: float = 0.0
    """Seconds to let pass before the first measured sample (start-up is not steady state)."""
    thresholds: Thresholds = Thresholds()
    max_intervals: int | None = None
    """Stop after this many intervals (`--once` is 1)."""


class Reading(NamedTuple):
    """Every target of a source at one instant."""

    t: float
    targets: dict[str, tuple[TreeSample, Budget]]
    """target -> its sample and budget."""
    node: TreeSample | None
    """The whole node (`--all` only)."""
    up: bool
    """The target is there: the tree's root lives, the cgroup exists, /proc was scanned."""


class Source(Protocol):
    @property
    def kind(self) -> TargetKind:
        """What the targets are (the node's own `/` is always "node")."""
        ...

    @property
    def node_budget(self) -> Budget | None:
        """The node's budget (`--all` only)."""
        ...

    def read(self) -> Reading: ...

    def cgroup_of(self, target: str) -> str: ...

    def exiting(self) -> bool:
        """A cheap early sign that the target exited (the next reading says for sure)."""
        ...

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less: a tree's wait returns once its root has exited."""
        ...

    def measure_cost(self, target: str, interval: Interval, assessment: Assessment) -> None:
        """Measure, during the next wait, what the target's oversubscription costs (where
        its busy threads' CPU goes: `run.waitcost`); the next reading carries it."""
        ...

    def close(self) -> None: ...


@dataclass
class RunResult:
    summaries: dict[str, Summary] = field(default_factory=dict)
    """Per target: the whole run (`keep_summaries` only)."""
    node: Summary | None = None
    interrupted: bool = False
    """Ctrl-C (or SIGTERM) ended the run."""
    intervals: int = 0

    @property
    def summary(self) -> Summary:
        """The summary of a one-target run."""
        (only,) = self.summaries.values()
        return only


def each_interval(on_interval: OnInterval) -> Callable[[Round], None]:
    """A round callback for a one-target run that hands on its one interval."""

    def on_round(r: Round) -> None:
        for t in r.targets:
            on_interval(t.interval, t.assessment, r.intervals, r.elapsed)

    return on_round


def follow(
    source: Source,
    options: SessionOptions,
    *,
    on_round: Callable[[Round], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    stop_at_exit: bool = True,
    keep_summaries: bool = True,
    only_loaded: bool = False,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunResult:
    """Read every target each `options.interval` until the duration ends, `should_stop()`,
    a stop signal or (`stop_at_exit`) the target's exit; `only_loaded` hands on the targets
    that hold load (`analysis.fleet.holds_load`). Without `stop_at_exit` (`serve`) a target
    that is not up is absent from its rounds. The first reading raises when the target
    cannot be observed at all (NoSuchProcess, PermissionDenied, NoSuchCgroup); after that,
    vanishing processes are normal.

    Between readings the loop waits in `sleep(seconds)`, once per interval, and asks
    `should_stop()` when it returns. By default that is the source's wait, which returns
    as soon as the target exits (`stop_at_exit`), else `time.sleep`; a caller whose stop
    comes from elsewhere passes a `sleep` that returns then (check: one that ends at its
    timeout). A stop signal interrupts any of them."""
    if sleep is None:
        # Not the source's wait without `stop_at_exit`: once the target has exited it
        # would return at once, every time, and the loop would spin until the duration.
        sleep = source.wait if stop_at_exit else time.sleep
    th = options.thresholds
    result = RunResult()
    runs: dict[str, tuple[RunSummary, Budget]] = {}
    node_run = RunSummary(root_pid=0, thresholds=th) if keep_summaries else None
    kept: dict[str, KeptRates] = {}
    """Per target up now, the rates of the readings the probe kept (and the node's)."""
    node_kept = KeptRates()
    pace = _Pace(options.interval)

    def stop() -> bool:
        return (should_stop is not None and should_stop()) or (stop_at_exit and source.exiting())

    def read() -> Reading:
        reading = source.read()
        if keep_summaries:
            for target, (sample, budget) in reading.targets.items():
                if target not in runs:
                    runs[target] = (RunSummary(root_pid=sample.root_pid, thresholds=th), budget)
        if stop_at_exit or reading.up:
            return reading
        return reading._replace(targets={})

    prev = last = read()
    started = clock()
    try:
        if options.warmup > 0 and prev.up:
            _sleep_until(started + options.warmup, clock, sleep, stop)
            prev = last = read()
        measure_start = clock()
        # The run ends at the duration even in the middle of an interval: the last one is
        # shorter, never longer than asked.
        end = None if options.duration is None else measure_start + options.duration
        next_at = measure_start
        while not (stop_at_exit and not prev.up):
            if stop():
                # The caller's reason (command exited, timeout): only a reading that finds
                # the target gone says it exited, so take one last look.
                if stop_at_exit:
                    last = source.read()
                break
            next_at += options.interval
            if end is not None:
                next_at = min(next_at, end)
            _sleep_until(next_at, clock, sleep, stop)
            began = time.perf_counter()
            curr = read()
            if curr.t <= prev.t:  # a clock that did not move gives no rate
                continue
            results = []
            for target, (sample, budget) in curr.targets.items():
                before = prev.targets.get(target)
                if before is None:
                    continue
                memo = kept.get(target)
                if memo is None:
                    memo = kept[target] = KeptRates()
                iv = counted(interval_between(before[0], sample, budget.vcpus, memo), th, memo)
                a = assess(iv, th)
                source.measure_cost(target, iv, a)
                if keep_summaries:  # only then: a long `serve` must not keep every target seen
                    run, _ = runs[target]
                    run.add(iv, a)
                    runs[target] = (run, budget)
                if only_loaded and not fleet.holds_load(iv, a):
                    continue
                cgroup = source.cgroup_of(target)
                results.append(
                    TargetResult(target, source.kind, cgroup, budget, iv, a, fleet.state(a, iv))
                )
            for gone in [t for t in kept if t not in curr.targets]:
                del kept[gone]
            node = None
            if curr.node is not None and prev.node is not None:
                nb = source.node_budget
                assert nb is not None
                iv = counted(
                    interval_between(prev.node, curr.node, nb.vcpus, node_kept), th, node_kept
                )
                node_a = assess(iv, th)
                if node_run is not None:
                    node_run.add(iv, node_a)
                node = TargetResult("/", TargetKind.NODE, "/", nb, iv, node_a, "")
            results.sort(key=lambda r: fleet.rank(r.target, r.interval, r.assessment))
            result.intervals += 1
            pace.add(curr.t - prev.t, capped=end is not None and next_at >= end)
            prev = last = curr
            if on_round is not None:
                on_round(
                    Round(
                        targets=tuple(results),
                        node=node,
                        found=len(results),
                        up=curr.up,
                        elapsed=clock() - measure_start,
                        intervals=result.intervals,
                        sample_s=time.perf_counter() - began,
                    )
                )
            if options.max_intervals is not None and result.intervals >= options.max_intervals:
                break
            if end is not None and clock() >= end:
                break
            if next_at < clock():  # we fell behind (overloaded host): do not burst
                next_at = clock()
    except KeyboardInterrupt:
        result.interrupted = True
    # The summary itself notes a run in which nothing was measured.
    notes = pace.notes()
    for target, (run, budget) in runs.items():
        exited = not last.up or target not in last.targets
        result.summaries[target] = run.result(budget, th, target_exited=exited, notes=notes)
    if node_run is not None and source.node_budget is not None:
        result.node = node_run.result(source.node_budget, th, target_exited=False, notes=notes)
    return result


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


LONGEST_WAIT_S = 3600.0
"""One wait of the loop is at most this long (the longest --interval); a longer one (a
warm-up of years) is waited in turns: poll() takes no timeout past 24 days."""


def _sleep_until(
    deadline: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    should_stop: Callable[[], bool],
) -> None:
    """Wait until `deadline`, or until `should_stop()` after `sleep` returned early."""
    while True:
        left = deadline - clock()
        if left <= 0 or should_stop():
            return
        sleep(min(left, LONGEST_WAIT_S))
