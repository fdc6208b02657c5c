"""cgroup CPU limits of a process: the tightest CPU quota and the cpuset, v1, v2 or both.

Where the hierarchies live is read from the process's own mount table
(`/proc/PID/mountinfo`), never assumed to be `/sys/fs/cgroup`: containers, hybrid hosts
(v1 `cpu` controller next to a v2 unified tree) and custom mounts all differ. Its cgroups
come from `/proc/PID/cgroup`. A cgroup path maps to a directory through the mount's root
field: a container usually mounts its own cgroup as the root of the view, so that prefix is
stripped before joining the rest onto the mount point.

A parent's quota binds every child, so the whole path from the process's cgroup up to the
top of the visible hierarchy is read and the smallest quota wins. Unreadable files become
notes; nothing here raises for them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Literal, NamedTuple

from oversub.core.cpulist import parse_cpulist
from oversub.core.model import CpuQuota, CpusetLimit
from oversub.probe.topology import describe_error, read_text, rooted

_ESCAPE = re.compile(r"\\([0-7]{3})")


class CgroupMount(NamedTuple):
    """One cgroup filesystem mount from mountinfo."""

    version: Literal[1, 2]
    root: str
    """Path inside the hierarchy that appears at the mount point (mountinfo field 4)."""
    mount_point: str
    """Where it is mounted (field 5), escapes decoded."""
    options: frozenset[str]
    """Super options; for v1 they name the controllers ({"rw", "cpu", "cpuacct"})."""


class CgroupEntry(NamedTuple):
    """One line of /proc/PID/cgroup."""

    hierarchy: int
    """Hierarchy id; 0 is the v2 unified hierarchy."""
    controllers: tuple[str, ...]
    """v1 controllers of the hierarchy ("cpu", "cpuacct", "name=systemd"); empty for v2."""
    path: str
    """The process's cgroup, as a path inside that hierarchy."""

    @property
    def version(self) -> Literal[1, 2]:
        """2 for the unified hierarchy line ("0::/path"), else 1."""
        return 2 if self.hierarchy == 0 and not self.controllers else 1


class CgroupLimits(NamedTuple):
    """What the cgroups of one process impose on its CPUs."""

    quota: CpuQuota | None
    """Tightest CPU bandwidth limit on the path to the root; None when unlimited/unknown."""
    cpuset: CpusetLimit | None
    """The effective cpuset; None when no cpuset controller could be read."""
    notes: tuple[str, ...]
    """What could not be read."""


class _Level(NamedTuple):
    """One cgroup on the walk from the process's cgroup to the top of the mount."""

    path: str
    """Path inside the hierarchy ("/kubepods/pod1")."""
    directory: str
    """Directory holding its control files."""


def _unescape(field: str) -> str:
    """Decode mountinfo's octal escapes ("\\040" is a space)."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[CgroupMount, ...]:
    """The cgroup (v1) and cgroup2 mounts listed in a /proc/PID/mountinfo text.

    Lines look like `32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu`:
    a variable number of optional fields ends at the lone "-", which is followed by the
    filesystem type, the source and the super options. Malformed lines are skipped.
    """
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        fields = line.split()
        try:
            separator = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) <= separator + 1 or len(fields) < 5:
            continue
        fstype = fields[separator + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        super_options = fields[separator + 3] if len(fields) > separator + 3 else ""
        mounts.append(
            CgroupMount(
                version=2 if fstype == "cgroup2" else 1,
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                options=frozenset(super_options.split(",")) - {""},
            )
        )
    return tuple(mounts)


def parse_proc_cgroup(text: str) -> tuple[CgroupEntry, ...]:
    """Parse /proc/PID/cgroup: `hierarchy-id:controller,list:path` per line."""
    entries: list[CgroupEntry] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        controllers = tuple(name for name in parts[1].split(",") if name)
        entries.append(CgroupEntry(int(parts[0]), controllers, parts[2]))
    return tuple(entries)


def parse_cpu_max(text: str) -> tuple[int, int] | None:
    """Parse v2 `cpu.max` ("150000 100000") into (quota_us, period_us); None for "max".

    Raises ValueError when the text is neither.
    """
    fields = text.split()
    if not fields or len(fields) > 2:
        raise ValueError(f"unexpected cpu.max content {text.strip()!r}")
    period = int(fields[1]) if len(fields) == 2 else 100_000
    if fields[0] == "max":
        return None
    quota = int(fields[0])
    if quota <= 0 or period <= 0:
        raise ValueError(f"unexpected cpu.max content {text.strip()!r}")
    return quota, period


def parse_cfs_quota(quota_text: str, period_text: str) -> tuple[int, int] | None:
    """Parse v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`; None when the quota is -1.

    Raises ValueError on non-numbers or a non-positive period.
    """
    quota = int(quota_text.strip())
    if quota < 0:
        return None
    period = int(period_text.strip())
    if quota == 0 or period <= 0:
        raise ValueError(f"unexpected CFS quota {quota} / period {period}")
    return quota, period


def choose_mount(path: str, mounts: Iterable[CgroupMount]) -> CgroupMount | None:
    """The mount through which cgroup `path` is visible, with the most ancestors in view."""
    visible = [
        mount
        for mount in mounts
        if mount.root == "/" or path == mount.root or path.startswith(mount.root.rstrip("/") + "/")
    ]
    return min(visible, key=lambda mount: len(mount.root), default=None)


def cgroup_levels(path: str, mount: CgroupMount, base: str) -> list[_Level]:
    """The cgroup and its ancestors up to the mount's root, deepest first."""
    top = mount.root.rstrip("/")
    below = [part for part in path[len(top) :].split("/") if part]
    levels = []
    for depth in range(len(below), -1, -1):
        relative = "/".join(below[:depth])
        inside = f"{top}/{relative}" if relative else (top or "/")
        directory = rooted(base, mount.mount_point)
        levels.append(_Level(inside, os.path.join(directory, relative) if relative else directory))
    return levels


def _mount_base(root: str, pid: int) -> str:
    """Prefix for the target's mount points as seen from our own mount namespace.

    The mount points in /proc/PID/mountinfo are paths in the target's mount namespace; for a
    process in a container they only make sense through /proc/PID/root. When the namespace
    cannot be compared (no permission), the two are assumed to be the same.
    """
    if root != "/" or pid == os.getpid():
        return root
    try:
        same = os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return root
    return root if same else f"/proc/{pid}/root"


def _read_quota_at(level: _Level, version: Literal[1, 2]) -> tuple[int, int] | None:
    """Quota set at one cgroup; None when unlimited or the file is absent there."""
    try:
        if version == 2:
            return parse_cpu_max(read_text(os.path.join(level.directory, "cpu.max")))
        quota_text = read_text(os.path.join(level.directory, "cpu.cfs_quota_us"))
        period_text = read_text(os.path.join(level.directory, "cpu.cfs_period_us"))
    except FileNotFoundError:
        # v2 keeps cpu.max out of the root cgroup and out of cgroups without the cpu
        # controller; v1 kernels without CFS bandwidth have no quota files. Neither limits.
        return None
    return parse_cfs_quota(quota_text, period_text)


def tightest_quota(
    levels: list[_Level], version: Literal[1, 2], notes: list[str]
) -> CpuQuota | None:
    best: CpuQuota | None = None
    for level in levels:
        try:
            found = _read_quota_at(level, version)
        except (OSError, ValueError) as error:
            notes.append(
                f"cannot read cgroup v{version} CPU quota of {level.path} in "
                f"{level.directory}: {describe_error(error)}"
            )
            continue
        if found is None:
            continue
        quota_us, period_us = found
        cpus = quota_us / period_us
        # Deepest wins a tie: its cpu.stat counts the throttling of this process's group.
        if best is None or cpus < best.cpus:
            stat_path = os.path.join(level.directory, "cpu.stat")
            best = CpuQuota(
                cpus=cpus,
                quota_us=quota_us,
                period_us=period_us,
                cgroup=level.path,
                version=version,
                stat_path=stat_path if os.path.isfile(stat_path) else None,
            )
    return best


def effective_cpuset(
    levels: list[_Level], version: Literal[1, 2], notes: list[str]
) -> CpusetLimit | None:
    # v2 only writes cpuset.cpus.effective where the controller is enabled; a cgroup without
    # it runs on its nearest ancestor's set. v1 may be mounted with "noprefix" ("cpus").
    names = ("cpuset.cpus.effective",) if version == 2 else ("cpuset.cpus", "cpus")
    for level in levels:
        for name in names:
            path = os.path.join(level.directory, name)
            try:
                cpus = parse_cpulist(read_text(path))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as error:
                notes.append(
                    f"cannot read cgroup v{version} cpuset of {level.path} from {path}: "
                    f"{describe_error(error)}"
                )
                continue
            if cpus:
                return CpusetLimit(cpus=cpus, cgroup=level.path, version=version)
    return None


def _locate(
    entry: CgroupEntry, mounts: tuple[CgroupMount, ...], base: str, notes: list[str]
) -> list[_Level] | None:
    """The directories of `entry`'s cgroup and its ancestors, or None (with a note)."""
    if entry.version == 2:
        candidates = [mount for mount in mounts if mount.version == 2]
    else:
        wanted = set(entry.controllers)
        candidates = [m for m in mounts if m.version == 1 and wanted <= m.options]
    label = "v2" if entry.version == 2 else "v1 " + ",".join(entry.controllers)
    if not candidates:
        # The v2 line exists on every modern kernel, mounted or not; a v1 controller listed
        # for the process but mounted nowhere here means its limits cannot be read.
        if entry.version == 1:
            notes.append(f"cgroup {label} hierarchy is not mounted: its limits are unknown")
        return None
    path = entry.path.removesuffix(" (deleted)")
    mount = choose_mount(path, candidates)
    if mount is None or "/.." in path or not path.startswith("/"):
        # Outside the mounted view (another container's cgroup, or a cgroup namespace that
        # shows the path relative to its own root): the files cannot be reached from here.
        notes.append(f"cgroup {label} path {entry.path} is not visible in any mount")
        return None
    levels = cgroup_levels(path, mount, base)
    if not os.path.isdir(levels[0].directory):
        notes.append(f"cgroup {label} directory {levels[0].directory} not found")
    return levels


def read_cgroup_limits(pid: int, root: str = "/") -> CgroupLimits:
    """Tightest CPU quota and effective cpuset of process `pid`, from v1 and v2 alike.

    Every file is read under `root` (the real system for "/"). Missing hierarchies are
    normal (no quota); unreadable files and invisible cgroups are reported in `notes`.
    """
    notes: list[str] = []
    texts: dict[str, str] = {}
    for name in ("cgroup", "mountinfo"):
        path = rooted(root, f"/proc/{pid}/{name}")
        try:
            texts[name] = read_text(path)
        except OSError as error:
            notes.append(f"cannot read {path}: {describe_error(error)}; cgroup limits unknown")
            return CgroupLimits(quota=None, cpuset=None, notes=tuple(notes))

    mounts = parse_mountinfo(texts["mountinfo"])
    base = _mount_base(root, pid)
    quotas: list[CpuQuota] = []
    cpusets: list[CpusetLimit] = []
    saw_cpu = False  # a cpu hierarchy was located, or a note says why it could not be
    for entry in parse_proc_cgroup(texts["cgroup"]):
        has_cpu = entry.version == 2 or "cpu" in entry.controllers
        has_cpuset = entry.version == 2 or "cpuset" in entry.controllers
        if not (has_cpu or has_cpuset):
            continue
        levels = _locate(entry, mounts, base, notes)
        saw_cpu = saw_cpu or (has_cpu and entry.version == 1)
        if levels is None:
            continue
        if has_cpu:
            saw_cpu = True
            quota = tightest_quota(levels, entry.version, notes)
            if quota is not None:
                quotas.append(quota)
        if has_cpuset:
            cpuset = effective_cpuset(levels, entry.version, notes)
            if cpuset is not None:
                cpusets.append(cpuset)
    if not saw_cpu:
        notes.append("no mounted cgroup hierarchy holds the cpu controller: CPU quota unknown")
    return CgroupLimits(
        quota=min(quotas, key=lambda quota: quota.cpus, default=None),
        cpuset=min(cpusets, key=lambda cpuset: len(cpuset.cpus), default=None),
        notes=tuple(notes),
    )
