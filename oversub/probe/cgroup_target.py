"""A cgroup as the target: which hierarchy, which directory, its processes, its budget.

The hierarchy is the one that holds CPU bandwidth for oversub's own processes, read from
`/proc/self/cgroup` and mountinfo like `probe.cgroup` does: the v1 `cpu` controller where it
is mounted (v1 and hybrid hosts), else the v2 unified tree. A cgroup's processes are the
`cgroup.procs` of its directory and of every cgroup below it (a SLURM job's steps, a pod's
containers, a unit's sub-cgroups): the budget of a cgroup binds all of them. Its budget is
its own quota walking up (the tightest wins) and its cpuset, never oversub's.
"""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

from oversub.core.cpulist import format_cpulist
from oversub.core.errors import NoSuchCgroup, UnsupportedPlatform, UsageError
from oversub.core.model import Budget, CpusetLimit
from oversub.core.workload import workload_of
from oversub.probe.budget import effective_vcpus
from oversub.probe.cgroup import (
    CgroupMount,
    cgroup_levels,
    choose_mount,
    effective_cpuset,
    parse_mountinfo,
    parse_proc_cgroup,
    read_cgroup_limits,
    tightest_quota,
)
from oversub.probe.procfiles import read_small
from oversub.probe.topology import describe_error, read_text, read_topology, rooted


class Hierarchy(NamedTuple):
    """The cgroup hierarchy that holds CPU bandwidth, as mounted here."""

    version: Literal[1, 2]
    mount: CgroupMount
    directory: str
    """Its mount point under `root`: the directory of `mount.root`."""
    controller: str = "cpu"
    """The v1 controller it is found by: "cpu", or "cpuset" for `find_job_hierarchy`."""

    def describe(self) -> str:
        kind = f"v1 {self.controller}" if self.version == 1 else "v2"
        return f"the cgroup {kind} hierarchy mounted at {self.mount.mount_point}"


class CgroupRef(NamedTuple):
    """One cgroup of the hierarchy."""

    path: str
    """Its path inside the hierarchy, as /proc/PID/cgroup shows it ("/slurm/uid_0/job_42")."""
    directory: str
    """The directory of its control files."""
    hierarchy: Hierarchy


def find_hierarchy(root: str = "/") -> Hierarchy:
    """The hierarchy that limits CPU here; UnsupportedPlatform when none is mounted."""
    try:
        entries = parse_proc_cgroup(read_text(rooted(root, "/proc/self/cgroup")))
        mounts = parse_mountinfo(read_text(rooted(root, "/proc/self/mountinfo")))
    except OSError as error:
        raise UnsupportedPlatform(f"cannot read cgroups: {describe_error(error)}") from None
    for version in (1, 2):
        for entry in entries:
            if entry.version != version or (version == 1 and "cpu" not in entry.controllers):
                continue
            candidates = [
                m for m in mounts if m.version == version and (version == 2 or "cpu" in m.options)
            ]
            mount = choose_mount(entry.path, candidates)
            if mount is not None:
                return Hierarchy(version, mount, rooted(root, mount.mount_point))
    raise UnsupportedPlatform("no cgroup hierarchy with the cpu controller is mounted")


def find_job_hierarchy(root: str = "/") -> Hierarchy | None:
    """The v1 cpuset hierarchy where it is mounted apart from the cpu controller, else None.

    SLURM's task/cgroup on cgroup v1 (ConstrainCores) puts a job's tasks in the cpuset (and
    freezer) hierarchies and leaves the cpu controller alone: slurm-wlm 22.05 on a hybrid
    host gives `cpuset:/slurm_vm/uid_0/job_3/step_0` beside `cpu:/`. A job is then found
    through its cpuset cgroup. None on v2 (one tree) and where nothing can be read.
    """
    try:
        entries = parse_proc_cgroup(read_text(rooted(root, "/proc/self/cgroup")))
        mounts = parse_mountinfo(read_text(rooted(root, "/proc/self/mountinfo")))
    except OSError:
        return None
    for entry in entries:
        if entry.version != 1 or "cpuset" not in entry.controllers or "cpu" in entry.controllers:
            continue
        candidates = [
            m for m in mounts if m.version == 1 and "cpuset" in m.options and "cpu" not in m.options
        ]
        mount = choose_mount(entry.path, candidates)
        if mount is not None:
            return Hierarchy(1, mount, rooted(root, mount.mount_point), "cpuset")
    return None


def job_root(hierarchy: Hierarchy, root: str = "/") -> CgroupRef | None:
    """The root of `find_job_hierarchy` beside the v1 `hierarchy` (`--all` looks there for
    SLURM jobs), None on v2 or without a separate cpuset mount."""
    jobs = find_job_hierarchy(root) if hierarchy.version == 1 else None
    return ref_of(jobs.mount.root, jobs) if jobs is not None else None


def ref_of(path: str, hierarchy: Hierarchy) -> CgroupRef:
    """The cgroup at `path` inside the hierarchy (no check that it exists)."""
    top = hierarchy.mount.root.rstrip("/")
    below = path[len(top) :].strip("/")
    directory = os.path.join(hierarchy.directory, below) if below else hierarchy.directory
    return CgroupRef(path, directory, hierarchy)


def resolve_cgroup(argument: str, root: str = "/") -> CgroupRef:
    """The cgroup `--cgroup` names: a path in the hierarchy ("/system.slice/x.service", as
    /proc/PID/cgroup shows it) or a directory under its mount ("/sys/fs/cgroup/cpu/x").

    UsageError for a path that is not absolute or climbs ("..", a NUL); NoSuchCgroup when
    no such cgroup exists.
    """
    if not argument.startswith("/") or "\0" in argument or ".." in argument.split("/"):
        raise UsageError(
            f"--cgroup {argument!r}: give an absolute cgroup path without '..' "
            "(as /proc/PID/cgroup shows it, or a directory under the cgroup mount)"
        )
    hierarchy = find_hierarchy(root)
    ref = _ref_in(argument, hierarchy)
    if ref is not None:
        return ref
    # A SLURM job on a v1 host may exist only in the cpuset hierarchy (find_job_hierarchy).
    jobs = find_job_hierarchy(root) if hierarchy.version == 1 else None
    ref = _ref_in(argument, jobs) if jobs is not None else None
    if ref is not None and workload_of(ref.path).slurm_job_id:
        return ref
    raise NoSuchCgroup(f"no cgroup {argument} in {hierarchy.describe()}")


def _ref_in(argument: str, hierarchy: Hierarchy) -> CgroupRef | None:
    """The cgroup `argument` names in `hierarchy`, None when it is not there."""
    top = hierarchy.mount.root.rstrip("/")
    normal = os.path.normpath(argument)
    mount_point = os.path.normpath(hierarchy.mount.mount_point)
    if normal == mount_point or normal.startswith(mount_point.rstrip("/") + "/"):
        path = top + normal[len(mount_point.rstrip("/")) :]
    else:
        path = normal
    path = path or "/"
    inside = top == "" or path == top or path.startswith(top + "/")
    ref = ref_of(path, hierarchy)
    if not inside or not os.path.isfile(os.path.join(ref.directory, "cgroup.procs")):
        return None
    return ref


def read_members(ref: CgroupRef) -> dict[int, str] | None:
    """pid -> cgroup path of every process in `ref` and the cgroups below it; None when the
    cgroup itself is gone. Cgroups removed during the walk are skipped (normal churn)."""
    members: dict[int, str] = {}
    try:
        _add_procs(ref.directory, ref.path, members, top=True)
    except FileNotFoundError:
        return None
    todo = [(ref.directory, ref.path)]
    while todo:
        directory, path = todo.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                child = f"{path.rstrip('/')}/{entry.name}"
                try:
                    _add_procs(entry.path, child, members, top=False)
                except FileNotFoundError:
                    continue
                todo.append((entry.path, child))
    return members


def _add_procs(directory: str, path: str, members: dict[int, str], *, top: bool) -> None:
    try:
        data = read_small(os.path.join(directory, "cgroup.procs"))
    except FileNotFoundError:
        raise
    except OSError:
        if top and not os.path.isdir(directory):
            raise FileNotFoundError(directory) from None
        return  # refused or a race: its processes are not seen this time
    for line in data.split():
        if line.isdigit():
            members[int(line)] = path


def cgroup_budget(ref: CgroupRef, *, root: str = "/", member: int | None = None) -> Budget:
    """The budget of cgroup `ref`: its tightest quota on the path up, its cpuset.

    On v1 the cpuset is another hierarchy, so it is read through `member` (one of its
    processes); without a member it is unknown, which a note says. A cgroup has no affinity
    of its own: the CPUs are the cpuset's, or every online CPU.
    """
    topology = read_topology(root)
    notes = list(topology.notes)
    levels = cgroup_levels(ref.path, ref.hierarchy.mount, root)
    by_cpu = ref.hierarchy.controller == "cpu"
    # A cgroup of the cpuset hierarchy (a SLURM job on v1) holds no quota files: its
    # members' quota is their cpu cgroup's, read through a member below.
    quota = tightest_quota(levels, ref.hierarchy.version, notes) if by_cpu else None
    cpuset: CpusetLimit | None = None
    if ref.hierarchy.version == 2:
        cpuset = effective_cpuset(levels, 2, notes)
    elif not by_cpu:
        cpuset = effective_cpuset(levels, 1, notes)
        if member is not None:
            limits = read_cgroup_limits(member, root)
            quota = limits.quota
            notes.extend(n for n in limits.notes if "quota" in n)
        else:
            notes.append("CPU quota unknown: the cgroup has no process to read it through")
    elif member is not None:
        limits = read_cgroup_limits(member, root)
        cpuset = limits.cpuset
        notes.extend(n for n in limits.notes if "cpuset" in n)
    else:
        notes.append("cgroup v1 cpuset unknown: the cgroup has no process to read it through")
    online = topology.online or tuple(range(os.cpu_count() or 1))
    if not topology.online:
        notes.append(f"online CPUs unknown: assuming CPUs {format_cpulist(online)}")
    if cpuset is not None and set(online) <= set(cpuset.cpus):
        cpuset = None  # allows every online CPU: limits nothing
    vcpus, limited_by = effective_vcpus(
        len(online), None, quota.cpus if quota else None, len(cpuset.cpus) if cpuset else None
    )
    return Budget(
        pid=member or 0,
        vcpus=vcpus,
        logical=len(online),
        physical=topology.physical,
        affinity=cpuset.cpus if cpuset else online,
        quota=quota,
        cpuset=cpuset,
        numa=dict(topology.numa),
        cores=topology.cores,
        limited_by=limited_by,
        notes=tuple(notes),
        cgroup=ref.path,
    )


def node_budget(root: str = "/") -> Budget:
    """The whole node: every online CPU, no limit (the `/` target of `--all`)."""
    topology = read_topology(root)
    online = topology.online or tuple(range(os.cpu_count() or 1))
    return Budget(
        pid=0,
        vcpus=len(online),
        logical=len(online),
        physical=topology.physical,
        affinity=online,
        quota=None,
        cpuset=None,
        numa=dict(topology.numa),
        cores=topology.cores,
        limited_by="none",
        notes=topology.notes,
        cgroup="/",
    )
