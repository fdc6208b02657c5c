"""Samplers whose target is not a process tree: one cgroup (`--cgroup`), the whole node
(`--all`).

Both are a `TreeSampler` with another membership rule (`tree`), so every process is read
exactly as `watch PID` reads it, with the same caches and held files. Their samples have no
root process (`root_pid` 0). The node sampler samples every process once per sample and
then splits the sample by cgroup: the cost grows with the threads of the node's processes
that ran (an idle process keeps its last reading, by `TreeSampler`'s one rule), not with the
number of cgroups times the threads.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping

from oversub.core.errors import NoSuchCgroup
from oversub.core.samples import ProcessSample, ThrottleStat, TreeSample
from oversub.core.workload import group_of, job_group_of
from oversub.probe.cgroup_target import CgroupRef, read_members
from oversub.probe.host import parse_cpu_stat
from oversub.probe.procfiles import read_all
from oversub.probe.sampler import TreeSampler


class CgroupSampler(TreeSampler):
    """Samples every process of cgroup `ref` and of the cgroups below it.

    Processes that join or leave between samples are normal; the target is gone only when
    the cgroup directory is (`TreeSample.gone`).
    """

    def __init__(
        self,
        ref: CgroupRef,
        *,
        root: str = "/",
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[int], int | None] | None = None,
    ) -> None:
        super().__init__(0, root=root, clock=clock, cpu_clock=cpu_clock)
        self.ref = ref
        self._gone = False

    def sample(self) -> TreeSample:
        sample = super().sample()
        return sample._replace(gone=True) if self._gone else sample

    def tree(self, stats: dict[int, bytes], *, first: bool) -> set[int]:
        members = read_members(self.ref)
        self._gone = members is None
        pids = {pid for pid in members or () if pid in stats}
        pids.discard(self._self_pid)  # oversub inside the cgroup it watches (a sidecar)
        return pids - self.own_pids()

    def _check_root(self, stats: dict[int, bytes]) -> None:
        if not os.path.isdir(self.ref.directory):
            raise NoSuchCgroup(f"cgroup {self.ref.path} is gone")


class NodeSampler(TreeSampler):
    """Samples every process of the node and knows which cgroup target each belongs to
    (`workload.group_of` of its cgroup in `top`, the hierarchy's root).

    With `jobs` (the v1 cpuset hierarchy's root, `find_job_hierarchy`), a process whose
    cpuset cgroup lies in a SLURM job or a pod and whose cpu cgroup does not belongs to that
    job: SLURM's task/cgroup on v1 leaves the cpu controller alone."""

    def __init__(
        self,
        top: CgroupRef,
        *,
        jobs: CgroupRef | None = None,
        root: str = "/",
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[int], int | None] | None = None,
    ) -> None:
        super().__init__(0, root=root, clock=clock, cpu_clock=cpu_clock)
        self.top = top
        self.jobs = jobs
        self.from_jobs: set[str] = set()
        """The targets of the last sample found through `jobs` (paths in that hierarchy)."""
        self.group: dict[int, str] = {}
        """pid -> its target's cgroup path, for the processes of the last sample that are in
        a cgroup other than the root."""

    def tree(self, stats: dict[int, bytes], *, first: bool) -> set[int]:
        members = read_members(self.top) or {}
        self.group = {}
        self.from_jobs = set()
        # Many processes share a cgroup: each path is classified once per sample.
        groups = functools.cache(group_of)
        for pid, path in members.items():
            key = groups(path)
            if key is not None:
                self.group[pid] = key
        if self.jobs is not None:
            job_of = functools.cache(job_group_of)
            for pid, path in (read_members(self.jobs) or {}).items():
                key = job_of(path)
                if key is not None and job_of(self.group.get(pid, "")) is None:
                    self.group[pid] = key
                    self.from_jobs.add(key)
        pids = set(stats)
        pids.discard(self._self_pid)
        return pids - self.own_pids()

    def _check_root(self, stats: dict[int, bytes]) -> None:
        return None  # the node is always there

    def split(
        self, sample: TreeSample, stat_paths: Mapping[str, str | None]
    ) -> dict[str, TreeSample]:
        """One sample per target of `sample` (a sample of this sampler), each with the
        throttling of its own quota's cgroup (`stat_paths`: target -> its cpu.stat)."""
        by_group: dict[str, dict[int, ProcessSample]] = {}
        for pid, process in sample.processes.items():
            key = self.group.get(pid)
            if key is not None:
                by_group.setdefault(key, {})[pid] = process
        split: dict[str, TreeSample] = {}
        for key, processes in by_group.items():
            host = sample.host._replace(throttle=read_throttle(stat_paths.get(key)))
            split[key] = sample._replace(processes=processes, host=host)
        return split


def read_throttle(stat_path: str | None) -> ThrottleStat | None:
    """The throttling counters of a cgroup's cpu.stat; None without a quota or unreadable."""
    if stat_path is None:
        return None
    try:
        return parse_cpu_stat(read_all(stat_path))
    except (OSError, ValueError):
        return None
