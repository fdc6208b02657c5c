"""Attach to a target: `attach` turns a `targets.Target` into the source the one loop
(`run.session.follow`) reads each interval, with its budget.

A tree's source reads its process tree (`probe.sampler.TreeSampler`), a cgroup's every
process of it and of the cgroups below it (`CgroupSampler`), the node's every process once,
split by cgroup (`NodeSampler`), and the node. Each reading says whether its target is up
(`Target.gone`, the one test of an exit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from oversub.core.model import Budget
from oversub.core.names import TargetKind
from oversub.core.results import Assessment, Interval
from oversub.core.targets import Target
from oversub.probe.cgroup_sampler import CgroupSampler, NodeSampler
from oversub.probe.cgroup_target import CgroupRef, cgroup_budget, node_budget, ref_of
from oversub.probe.sampler import TreeSampler
from oversub.run.session import Reading, Source
from oversub.run.waitcost import WaitCosts

if TYPE_CHECKING:
    from oversub.run.runner import ExitWatch

BUDGET_REFRESH_S = 30.0
"""A cgroup's budget is read when it first appears and again this often (a quota or a
cpuset rarely changes; reading every level each second would cost more than the rest)."""


def attach(target: Target, budget: Budget | None = None) -> Source:
    """The source that reads `target`: against `budget` when given (a tree: read from its
    root when not; a cgroup: its own, read again every `BUDGET_REFRESH_S`). Raises
    NoSuchCgroup / UsageError for a cgroup path that names none."""
    from oversub.probe.cgroup_target import find_hierarchy, job_root, resolve_cgroup

    if target.kind is TargetKind.TREE:
        from oversub.probe.budget import read_budget
        from oversub.run.runner import ExitWatch

        sampler = TreeSampler(target.pid, adopter=target.adopter)
        budget = budget or read_budget(target.pid)
        watch = ExitWatch(target.pid)
        costs = WaitCosts()
        return OneSource(target, sampler, budget, _own_cgroup(target.pid), watch, costs=costs)
    if target.kind is TargetKind.CGROUP:
        ref = resolve_cgroup(target.cgroup)
        group = Target.of_cgroup(ref.path)
        return OneSource(group, CgroupSampler(ref), budget, ref.path, ref=ref, costs=WaitCosts())
    hierarchy = find_hierarchy()
    top = ref_of(hierarchy.mount.root, hierarchy)
    return NodeSource(top, jobs=job_root(hierarchy), costs=WaitCosts())


class OneSource:
    """One target: a process tree (under the target's name), or a cgroup and the cgroups
    below it (under its path)."""

    node_budget: Budget | None = None

    def __init__(
        self,
        target: Target,
        sampler: TreeSampler,
        budget: Budget | None,
        cgroup: str,
        exit_watch: ExitWatch | None = None,
        *,
        ref: CgroupRef | None = None,
        costs: WaitCosts | None = None,
    ) -> None:
        self.target, self.kind, self.sampler = target, target.kind, sampler
        self._cgroup, self._exit, self._ref = cgroup, exit_watch, ref
        self._costs = costs
        """What the target's oversubscription costs (`run.waitcost`); None: not measured."""
        self._budgets = _Budgets(time.monotonic) if budget is None else None
        self.budget = self._budget(None) if budget is None else budget
        sampler.throttle_stat_path = self.budget.quota.stat_path if self.budget.quota else None

    def _budget(self, member: int | None) -> Budget:
        assert self._budgets is not None and self._ref is not None
        return self._budgets.get(self._ref, member)

    def read(self) -> Reading:
        if self._costs is not None:
            self._costs.collect()  # the windows end as the reading starts
        sample = self.sampler.sample()
        if self._costs is not None:
            sample = self._costs.attach(sample)
        if self._budgets is not None:  # a cgroup's own budget, refreshed (`serve`)
            self.budget = self._budget(min(sample.processes, default=None))
            quota = self.budget.quota
            self.sampler.throttle_stat_path = quota.stat_path if quota else None
        up = not self.target.gone(sample)
        return Reading(sample.t, {self.target.name: (sample, self.budget)}, None, up)

    def cgroup_of(self, target: str) -> str:
        return self._cgroup

    def measure_cost(self, target: str, interval: Interval, assessment: Assessment) -> None:
        if self._costs is not None:
            self._costs.request(interval, assessment)

    def exiting(self) -> bool:
        # A tree's pidfd turns readable when its whole thread group has exited: the run
        # ends then, not at the end of the interval. A removed cgroup: the next reading.
        return self._exit is not None and self._exit.gone()

    def wait(self, seconds: float) -> None:
        if self._exit is None:
            time.sleep(seconds)
        else:
            self._exit.wait(seconds)

    def close(self) -> None:
        if self._exit is not None:
            self._exit.close()
        if self._costs is not None:
            self._costs.close()
        self.sampler.close()


class NodeSource:
    """`--all`: every cgroup target of the node (`workload.group_of`) and the node."""

    kind = TargetKind.CGROUP

    def __init__(
        self,
        top: CgroupRef,
        clock: Callable[[], float] = time.monotonic,
        *,
        jobs: CgroupRef | None = None,
        costs: WaitCosts | None = None,
    ) -> None:
        self.top = top
        self._costs = costs
        self.jobs = jobs
        """The v1 cpuset hierarchy's root where SLURM jobs may be found only there."""
        self.sampler = NodeSampler(top, jobs=jobs, clock=clock)
        self.node_budget = node_budget()
        self._budgets = _Budgets(clock)

    def read(self) -> Reading:
        if self._costs is not None:
            self._costs.collect()
        sample = self.sampler.sample()
        if self._costs is not None:
            sample = self._costs.attach(sample)
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

    def measure_cost(self, target: str, interval: Interval, assessment: Assessment) -> None:
        if self._costs is not None:
            self._costs.request(interval, assessment)

    def exiting(self) -> bool:
        return False  # the node is always there

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self._costs is not None:
            self._costs.close()
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
