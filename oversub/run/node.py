"""The loop of `watch --all` and `serve`: many targets, one read of /proc per interval.

A source reads every target at once (a process tree, one cgroup, or every cgroup of the
node plus the node itself) and this loop owns the clock: it paces the reads, turns each pair
of readings into one interval and one assessment per target (`analysis`), ranks the targets
and hands the round to a callback. Targets come and go between readings; a target is
measured once two consecutive readings hold it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from oversub.analysis import fleet
from oversub.analysis.rates import interval as interval_between
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.model import Budget
from oversub.probe.cgroup_sampler import CgroupSampler, NodeSampler
from oversub.probe.cgroup_target import CgroupRef, cgroup_budget, node_budget, ref_of
from oversub.probe.sampler import TreeSampler
from oversub.results import Summary
from oversub.run.session import SessionOptions, _sleep_until
from oversub.samples import TreeSample
from oversub.targets import Round, TargetResult

BUDGET_REFRESH_S = 30.0
"""A cgroup's budget is read when it first appears and again this often (a quota or a
cpuset rarely changes; reading every level each second would cost more than the rest)."""


class Reading(NamedTuple):
    """Every target at one instant."""

    t: float
    targets: dict[str, tuple[TreeSample, Budget]]
    """target -> its sample and budget."""
    node: TreeSample | None
    """The whole node (`--all` only)."""
    up: bool
    """The target could be read: the pid exists, the cgroup exists, /proc was scanned."""


class Source(Protocol):
    kind: str
    """"tree", "cgroup" or "node": what the targets are (the node's `/` is always "node")."""

    def read(self) -> Reading: ...

    def cgroup_of(self, target: str) -> str: ...

    def close(self) -> None: ...


@dataclass
class NodeResult:
    summaries: dict[str, Summary] = field(default_factory=dict)
    """Per target: the whole run (`keep_summaries` only)."""
    node: Summary | None = None
    interrupted: bool = False
    intervals: int = 0


class TreeSource:
    """`serve --pid`: one process tree, under the name `name`."""

    kind = "tree"

    def __init__(self, pid: int, budget: Budget, name: str) -> None:
        self.name = name
        self.budget = budget
        self.sampler = TreeSampler.for_budget(pid, budget)
        self._cgroup = _own_cgroup(pid)

    def read(self) -> Reading:
        sample = self.sampler.sample()
        root = sample.processes.get(sample.root_pid)
        up = root is not None and not all(t.state in "ZX" for t in root.threads)
        targets = {self.name: (sample, self.budget)} if up else {}
        return Reading(sample.t, targets, None, up)

    def cgroup_of(self, target: str) -> str:
        return self._cgroup

    def close(self) -> None:
        self.sampler.close()


class CgroupSource:
    """`serve --cgroup`: one cgroup and the cgroups below it."""

    kind = "cgroup"

    def __init__(self, ref: CgroupRef, clock: Callable[[], float] = time.monotonic) -> None:
        self.ref = ref
        self._budgets = _Budgets(clock)
        budget = self._budgets.get(ref, None)
        stat = budget.quota.stat_path if budget.quota else None
        self.sampler = CgroupSampler(ref, throttle_stat_path=stat, clock=clock)

    def read(self) -> Reading:
        sample = self.sampler.sample()
        if sample.gone:
            return Reading(sample.t, {}, None, False)
        budget = self._budgets.get(self.ref, min(sample.processes, default=None))
        self.sampler.throttle_stat_path = budget.quota.stat_path if budget.quota else None
        return Reading(sample.t, {self.ref.path: (sample, budget)}, None, True)

    def cgroup_of(self, target: str) -> str:
        return self.ref.path

    def close(self) -> None:
        self.sampler.close()


class NodeSource:
    """`--all`: every cgroup target of the node (`workload.group_of`) and the node."""

    kind = "cgroup"

    def __init__(
        self,
        top: CgroupRef,
        clock: Callable[[], float] = time.monotonic,
        *,
        jobs: CgroupRef | None = None,
    ) -> None:
        self.top = top
        self.jobs = jobs
        """The v1 cpuset hierarchy's root where SLURM jobs may be found only there."""
        self.sampler = NodeSampler(top, jobs=jobs, clock=clock)
        self.node_budget = node_budget()
        self._budgets = _Budgets(clock)

    def read(self) -> Reading:
        sample = self.sampler.sample()
        first: dict[str, int] = {}
        for pid, key in self.sampler.group.items():
            if pid in sample.processes and (key not in first or pid < first[key]):
                first[key] = pid
        budgets = {key: self._budgets.get(self._ref(key), pid) for key, pid in first.items()}
        self._budgets.forget(budgets)
        stat_paths = {k: b.quota.stat_path if b.quota else None for k, b in budgets.items()}
        split = self.sampler.split(sample, stat_paths)
        targets = {key: (s, budgets[key]) for key, s in split.items()}
        return Reading(sample.t, targets, sample, True)

    def _ref(self, key: str) -> CgroupRef:
        if self.jobs is not None and key in self.sampler.from_jobs:
            return ref_of(key, self.jobs.hierarchy)
        return ref_of(key, self.top.hierarchy)

    def cgroup_of(self, target: str) -> str:
        return target

    def close(self) -> None:
        self.sampler.close()


class _Budgets:
    """Budgets of cgroups, read when first asked for and again every `BUDGET_REFRESH_S`
    (or as soon as a v1 cgroup that had no process to read its cpuset through has one)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._cache: dict[str, tuple[float, Budget]] = {}

    def get(self, ref: CgroupRef, member: int | None) -> Budget:
        now = self._clock()
        cached = self._cache.get(ref.path)
        if cached is not None:
            read_at, budget = cached
            fresh = now - read_at < BUDGET_REFRESH_S
            if fresh and (budget.pid or member is None):
                return budget
        budget = cgroup_budget(ref, member=member)
        self._cache[ref.path] = (now, budget)
        return budget

    def forget(self, keep: dict[str, Budget]) -> None:
        for key in [k for k in self._cache if k not in keep]:
            del self._cache[key]


def _own_cgroup(pid: int) -> str:
    """The cgroup path of `pid` in the cpu hierarchy (v1) or the unified one; "" unknown."""
    from oversub.probe.cgroup import parse_proc_cgroup

    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="backslashreplace") as fh:
            entries = parse_proc_cgroup(fh.read())
    except OSError:
        return ""
    v1 = [e.path for e in entries if e.version == 1 and "cpu" in e.controllers]
    v2 = [e.path for e in entries if e.version == 2]
    return (v1 or v2 or [""])[0]


def run_node(
    source: Source,
    options: SessionOptions,
    *,
    on_round: Callable[[Round], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    keep_summaries: bool = False,
    only_loaded: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> NodeResult:
    """Read every target each `options.interval` until the duration ends, `should_stop()`
    or a stop signal (KeyboardInterrupt); `only_loaded` keeps the targets that hold load
    (`analysis.fleet.holds_load`). The first reading raises when the target cannot be
    observed at all (no such pid, no such cgroup)."""
    th = options.thresholds
    result = NodeResult()
    runs: dict[str, RunSummary] = {}
    node_run = RunSummary(root_pid=0) if keep_summaries else None
    budgets: dict[str, Budget] = {}
    prev = source.read()
    started = clock()
    end = None if options.duration is None else started + options.duration
    next_at = started
    try:
        while True:
            if should_stop is not None and should_stop():
                break
            next_at += options.interval
            if end is not None:
                next_at = min(next_at, end)
            _sleep_until(next_at, clock, sleep, should_stop)
            began = time.perf_counter()
            curr = source.read()
            if curr.t <= prev.t:
                continue
            results = []
            for target, (sample, budget) in curr.targets.items():
                before = prev.targets.get(target)
                if before is None:
                    continue
                iv = interval_between(before[0], sample, budget.vcpus, th)
                a = assess(iv, th)
                if keep_summaries:  # only then: a long `serve` must not keep every target seen
                    budgets[target] = budget
                    runs.setdefault(target, RunSummary(root_pid=sample.root_pid)).add(iv)
                if only_loaded and not fleet.holds_load(iv, a):
                    continue
                results.append(
                    TargetResult(
                        target,
                        source.kind,
                        source.cgroup_of(target),
                        budget,
                        iv,
                        a,
                        fleet.state(a),
                    )
                )
            node = None
            if curr.node is not None and prev.node is not None:
                nb = getattr(source, "node_budget", None)
                assert nb is not None
                iv = interval_between(prev.node, curr.node, nb.vcpus, th)
                if node_run is not None:
                    node_run.add(iv)
                node = TargetResult("/", "node", "/", nb, iv, assess(iv, th), "")
            results.sort(key=lambda r: fleet.rank(r.target, r.interval, r.assessment))
            result.intervals += 1
            prev = curr
            if on_round is not None:
                on_round(
                    Round(
                        targets=tuple(results),
                        node=node,
                        found=len(results),
                        up=curr.up,
                        elapsed=clock() - started,
                        intervals=result.intervals,
                        sample_s=time.perf_counter() - began,
                    )
                )
            if options.max_intervals is not None and result.intervals >= options.max_intervals:
                break
            if end is not None and clock() >= end:
                break
            if next_at < clock():
                next_at = clock()
    except KeyboardInterrupt:
        result.interrupted = True
    for target, run in runs.items():
        result.summaries[target] = run.result(
            budgets[target], th, target_exited=target not in prev.targets
        )
    if node_run is not None:
        nb = getattr(source, "node_budget", None)
        if nb is not None:
            result.node = node_run.result(nb, th, target_exited=False)
    return result
