"""Build fake /proc and /sys trees under tmp_path for the budget, cgroup and topology probes."""

from __future__ import annotations

import os
from pathlib import Path


class FakeBudgetTree:
    """A fake system root: write /proc/PID files, sysfs CPU topology and cgroup directories.

    `root` is what the probes take as their `root` argument.
    """

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = str(base)
        self._mount_lines: dict[int, list[str]] = {}

    def path(self, absolute: str) -> Path:
        """The fake file for a system path like "/proc/1/status"."""
        return self.base / absolute.lstrip("/")

    def write(self, absolute: str, text: str) -> Path:
        """Create the file (and its parents) with `text`."""
        target = self.path(absolute)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def make_unreadable(self, absolute: str) -> None:
        """Make reading `absolute` fail with an OSError even as root: a directory in its place."""
        target = self.path(absolute)
        if target.is_file():
            target.unlink()
        target.mkdir(parents=True, exist_ok=True)

    def host(
        self,
        online: str = "0-3",
        siblings: dict[int, str] | None = None,
        numa: dict[int, str] | None = None,
        sibling_file: str = "thread_siblings_list",
    ) -> None:
        """Sysfs for a host: online CPUs, each CPU's SMT siblings (default: itself), NUMA."""
        from oversub.probe.topology import parse_cpulist

        cpu_dir = "/sys/devices/system/cpu"
        self.write(f"{cpu_dir}/online", online + "\n")
        for cpu in parse_cpulist(online):
            group = (siblings or {}).get(cpu, str(cpu))
            self.write(f"{cpu_dir}/cpu{cpu}/topology/{sibling_file}", group + "\n")
        for node, cpus in (numa or {}).items():
            self.write(f"/sys/devices/system/node/node{node}/cpulist", cpus + "\n")

    def process(self, pid: int, affinity: str, cgroup: str) -> None:
        """/proc/PID/status with `Cpus_allowed_list` and /proc/PID/cgroup (its lines)."""
        self.write(
            f"/proc/{pid}/status",
            f"Name:\tpython\nPid:\t{pid}\nCpus_allowed:\tff\nCpus_allowed_list:\t{affinity}\n",
        )
        self.write(f"/proc/{pid}/cgroup", cgroup.strip() + "\n")
        self._flush_mounts(pid)

    def mount_v1(self, pid: int, mount_point: str, options: str, root: str = "/") -> None:
        """Add a cgroup v1 mount (super options e.g. "rw,cpu,cpuacct") to PID's mountinfo."""
        self._add_mount(pid, root, mount_point, f"cgroup cgroup {options}")

    def mount_v2(self, pid: int, mount_point: str, root: str = "/") -> None:
        """Add a cgroup2 mount to PID's mountinfo."""
        self._add_mount(pid, root, mount_point, "cgroup2 cgroup2 rw,nsdelegate")

    def cgroup_files(self, directory: str, files: dict[str, str]) -> None:
        """Write control files into a cgroup directory (a system path under a mount point)."""
        for name, text in files.items():
            self.write(os.path.join(directory, name), text + "\n")

    def _add_mount(self, pid: int, root: str, mount_point: str, tail: str) -> None:
        lines = self._mount_lines.setdefault(pid, ["27 1 254:0 / / rw,relatime - ext4 /dev/vda rw"])
        mount_id = 40 + len(lines)
        # "shared:N" is an optional field: the parser must find the "-" separator itself.
        lines.append(f"{mount_id} 31 0:{mount_id} {root} {mount_point} rw shared:9 - {tail}")
        self._flush_mounts(pid)

    def _flush_mounts(self, pid: int) -> None:
        lines = self._mount_lines.get(pid, ["27 1 254:0 / / rw,relatime - ext4 /dev/vda rw"])
        self.write(f"/proc/{pid}/mountinfo", "\n".join(lines) + "\n")
