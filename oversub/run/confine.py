"""Children under a CPU budget, as a container engine imposes one: affinity and a CPU quota.

`oversub doctor --cpus 1.5` must show what a library does in `docker run --cpus 1.5`: a
CPU quota on the cgroup of the process, with every CPU still in its affinity (the trap:
`nproc` says all of them). A `Cell` is such a budget: a new cgroup, a child of doctor's own
in the hierarchy that holds the cpu controller (cgroup v1 `cpu.cfs_quota_us` over
`cpu.cfs_period_us`, v2 `cpu.max`), and an affinity mask (`--cpuset`, which is what a
container's cpuset shows a process). A child joins both between fork and exec (`preexec`),
so the library sees its budget from its first instruction.

Making a cgroup needs root and a cpu controller that may be written here: where it cannot
be made (not root, a read-only cgroup filesystem in a container, cgroup v2 without the cpu
controller enabled below doctor's cgroup), the cell says why and runs nothing: a quota
that was not imposed must not be reported as measured.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from oversub.core.checkups import Confined, RunSpec
from oversub.probe.cgroup import parse_mountinfo, parse_proc_cgroup

PERIOD_US = 100_000
"""The quota's period (the kernel's and Docker's default)."""
REMOVE_WAIT_S = 5.0
"""How long an emptied cgroup is tried to be removed (the kernel may need a moment)."""


class Cell:
    """A budget children can be started under; `close()` removes what it made."""

    def __init__(self, spec: RunSpec, directory: str | None = None) -> None:
        self.spec = spec
        self.directory = directory
        """The cgroup's directory, where one was made."""
        self._procs = os.path.join(directory, "cgroup.procs") if directory else None

    def preexec(self) -> None:
        """In the child, between fork and exec: join the cgroup, set the affinity."""
        if self._procs is not None:
            with open(self._procs, "w") as handle:
                handle.write(str(os.getpid()))
        if self.spec.affinity is not None:
            os.sched_setaffinity(0, self.spec.affinity)

    def close(self) -> None:
        """Remove the cgroup (its children were reaped; an EBUSY is waited out briefly)."""
        if self.directory is None:
            return
        deadline = time.monotonic() + REMOVE_WAIT_S
        while True:
            try:
                os.rmdir(self.directory)
            except FileNotFoundError:
                break
            except OSError as error:
                if error.errno != errno.EBUSY or time.monotonic() > deadline:
                    break  # left behind: an empty cgroup costs nothing, and is named below
                time.sleep(0.05)
                continue
            break
        self.directory = None


def cpu_hierarchy(root: str = "/") -> tuple[int, str, str] | None:
    """(version, filesystem directory, path in the hierarchy) of this process's cgroup in
    the hierarchy that holds the cpu controller (v1 first, as a hybrid machine mounts it);
    None when no such hierarchy is mounted where this process can see its cgroup."""
    try:
        mounts = parse_mountinfo(Path(root, "proc/self/mountinfo").read_text("utf-8", "replace"))
        entries = parse_proc_cgroup(Path(root, "proc/self/cgroup").read_text("utf-8", "replace"))
    except OSError:
        return None
    for version in (1, 2):
        for entry in entries:
            if entry.version != version or (version == 1 and "cpu" not in entry.controllers):
                continue
            for mount in mounts:
                if mount.version != version or (version == 1 and "cpu" not in mount.options):
                    continue
                base = mount.root.rstrip("/")
                if entry.path != mount.root and not entry.path.startswith(base + "/"):
                    continue
                relative = entry.path[len(base) :].lstrip("/")
                directory = os.path.normpath(
                    os.path.join(root, mount.mount_point.lstrip("/"), relative)
                )
                if version == 1 or os.path.exists(os.path.join(directory, "cgroup.controllers")):
                    return version, directory, entry.path
    return None


def _v2_cpu_enabled(directory: str) -> str | None:
    """Enable the cpu controller for the children of `directory`; why not, or None."""
    control = os.path.join(directory, "cgroup.subtree_control")
    try:
        if "cpu" in Path(control).read_text().split():
            return None
        if "cpu" not in Path(directory, "cgroup.controllers").read_text().split():
            return f"the cgroup v2 cpu controller is not available in {directory}"
        Path(control).write_text("+cpu")
    except OSError as error:
        return f"cannot enable the cgroup v2 cpu controller below {directory}: {error.strerror}"
    return None


def open_cell(spec: RunSpec, tag: str, root: str = "/") -> tuple[Cell, Confined]:
    """A cell for `spec` (`tag` names its cgroup) and what of it could be imposed."""
    if spec.quota is None:
        return Cell(spec), Confined(spec, True, None, None, None)
    found = cpu_hierarchy(root)
    if found is None:
        return Cell(spec), Confined(
            spec, False, None, None, "no cgroup hierarchy with the cpu controller is mounted"
        )
    version, parent, path = found
    if os.geteuid() != 0:
        return Cell(spec), Confined(
            spec, False, None, version, f"creating a cgroup under {parent} needs root"
        )
    if version == 2:
        why = _v2_cpu_enabled(parent)
        if why is not None:
            return Cell(spec), Confined(spec, False, None, version, why)
    directory = os.path.join(parent, f"oversub-doctor-{os.getpid()}-{tag}")
    quota = max(1000, round(spec.quota * PERIOD_US))  # the kernel's least quota is 1 ms
    try:
        os.mkdir(directory)
    except OSError as error:
        return Cell(spec), Confined(
            spec, False, None, version, f"cannot create a cgroup under {parent}: {error.strerror}"
        )
    cell = Cell(spec, directory)
    try:
        if version == 1:
            Path(directory, "cpu.cfs_period_us").write_text(str(PERIOD_US))
            Path(directory, "cpu.cfs_quota_us").write_text(str(quota))
        else:
            Path(directory, "cpu.max").write_text(f"{quota} {PERIOD_US}")
    except OSError as error:
        cell.close()
        return Cell(spec), Confined(
            spec, False, None, version, f"cannot set a CPU quota in {directory}: {error.strerror}"
        )
    cgroup = path.rstrip("/") + "/" + os.path.basename(directory)
    return cell, Confined(spec, True, cgroup, version, None)
