"""What a command looks at: the budget N of a process or of a cgroup, measured or given
(what it follows is a `targets.Target`, read by `run.sources.attach`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oversub.core.model import Budget
    from oversub.probe.cgroup_target import CgroupRef


def cgroup_target(argument: str) -> tuple[CgroupRef, Budget]:
    """The cgroup `--cgroup` names and its own budget (its quota walking up, its cpuset),
    read through one of its processes where v1 needs one. NoSuchCgroup / UsageError for a
    path that names none."""
    from oversub.probe.cgroup_target import cgroup_budget, read_members, resolve_cgroup

    ref = resolve_cgroup(argument)
    members = read_members(ref) or {}
    members.pop(os.getpid(), None)
    return ref, cgroup_budget(ref, member=min(members, default=None))


def budget_of(pid: int | None, cpus: int | None = None, *, detail: bool = False) -> Budget:
    """The budget of `pid` (None: oversub itself), or N = `cpus` given, not measured."""
    if cpus is not None:
        from oversub.analysis.plans import synthetic_budget

        return synthetic_budget(cpus)
    from oversub.probe.budget import read_budget

    return read_budget(pid, detail=detail)
