"""A throw-away cgroup with a CPU quota, for tests that need the kernel to enforce one.

Needs root and a mounted cpu controller (v1, or v2 with the controller enabled below the
root); otherwise the test is skipped with the reason.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oversub.probe.cgroup import CgroupMount, parse_mountinfo, parse_proc_cgroup


def own_cpu_cgroup() -> tuple[CgroupMount, str] | None:
    """A writable-looking cpu hierarchy and this process's directory in it (v1 first)."""
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    entries = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
    for version in (1, 2):
        for entry in entries:
            if entry.version != version or (version == 1 and "cpu" not in entry.controllers):
                continue
            for mount in mounts:
                if mount.version != version or (version == 1 and "cpu" not in mount.options):
                    continue
                if mount.root != "/" and not entry.path.startswith(mount.root):
                    continue
                relative = entry.path[len(mount.root.rstrip("/")) :].lstrip("/")
                # v2: only the root cgroup may hold processes and enable controllers below.
                if version == 2:
                    return mount, mount.mount_point
                return mount, os.path.join(mount.mount_point, relative)
    return None


def write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def remove_cgroup(directory: str) -> None:
    # After the last task is reaped, the kernel may need a moment before rmdir succeeds.
    deadline = time.monotonic() + 10
    while os.path.isdir(directory):
        try:
            os.rmdir(directory)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _cpu_parent() -> tuple[CgroupMount, str]:
    """The cpu hierarchy's mount and this process's cgroup directory in it, where a test
    makes its cgroups; skips the test where it cannot (not root, no cpu controller)."""
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    found = own_cpu_cgroup()
    if found is None:
        pytest.skip("this kernel has no mounted cgroup cpu controller")
    return found


@contextmanager
def quota_cgroup(cpus: float, *, nested: bool = False) -> Iterator[tuple[CgroupMount, str, str]]:
    """Yield (mount, quota directory, directory to put tasks in) for a `cpus` quota.

    With `nested`, tasks go to a child of the directory that holds the quota, so a reader
    must walk up to find it. Every task must be gone before the block ends.
    """
    mount, parent = _cpu_parent()
    outer = os.path.join(parent, f"oversub-test-{uuid.uuid4().hex[:8]}")
    inner = os.path.join(outer, "inner") if nested else outer
    try:
        os.mkdir(outer)
        if nested:
            os.mkdir(inner)
    except OSError as error:
        remove_cgroup(outer)
        pytest.skip(f"cannot create a cgroup under {parent}: {error.strerror}")
    try:
        period = 100_000
        if mount.version == 1:
            write(os.path.join(outer, "cpu.cfs_period_us"), str(period))
            write(os.path.join(outer, "cpu.cfs_quota_us"), str(round(cpus * period)))
        elif os.path.exists(os.path.join(outer, "cpu.max")):
            write(os.path.join(outer, "cpu.max"), f"{round(cpus * period)} {period}")
        else:
            pytest.skip("the cgroup v2 cpu controller is not enabled for child cgroups")
        yield mount, outer, inner
    finally:
        if nested:
            remove_cgroup(inner)
        remove_cgroup(outer)


def _mount_of(controller: str) -> CgroupMount | None:
    for mount in parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        if mount.version == 1 and controller in mount.options and mount.root == "/":
            return mount
    return None


@contextmanager
def pinned_cgroup(cpu: int, *, favoured: bool = False) -> Iterator[tuple[str, list[str]]]:
    """A new cgroup of the hierarchy that holds the cpu controller whose tasks run on CPU
    `cpu` only (a cpuset: v1's own hierarchy, or v2's controller in the same directory).

    `favoured`: the highest CPU weight (v1 cpu.shares, v2 cpu.weight), so that whatever
    else the shared machine runs on that CPU cannot make its tasks wait: a healthy tree
    stays healthy whatever the outside load (measured: one busy thread beside a busy loop
    pinned to the same CPU waited 0.5 % of its time).

    Yields (its path as /proc/PID/cgroup shows it, the `cgroup.procs` files a task writes
    its pid to to join it). Every task must be gone before the block ends.
    """
    mount, parent = _cpu_parent()
    name = f"oversub-test-{uuid.uuid4().hex[:8]}"
    made: list[str] = []
    try:
        directory = os.path.join(parent, name)
        os.mkdir(directory)
        made.append(directory)
        if favoured:
            weight = ("cpu.shares", "262144") if mount.version == 1 else ("cpu.weight", "10000")
            if os.path.exists(os.path.join(directory, weight[0])):
                write(os.path.join(directory, weight[0]), weight[1])
        if mount.version == 1:
            cpuset = _mount_of("cpuset")
            if cpuset is None:
                pytest.skip("no cgroup v1 cpuset hierarchy is mounted")
            pinned = os.path.join(cpuset.mount_point, name)
            os.mkdir(pinned)
            made.append(pinned)
            mems = Path(cpuset.mount_point, "cpuset.mems").read_text().strip()
            write(os.path.join(pinned, "cpuset.cpus"), str(cpu))
            write(os.path.join(pinned, "cpuset.mems"), mems)
            joins = [os.path.join(directory, "cgroup.procs"), os.path.join(pinned, "cgroup.procs")]
        else:
            if not os.path.exists(os.path.join(directory, "cpuset.cpus")):
                pytest.skip("the cgroup v2 cpuset controller is not enabled for child cgroups")
            write(os.path.join(directory, "cpuset.cpus"), str(cpu))
            joins = [os.path.join(directory, "cgroup.procs")]
    except OSError as error:
        for path in reversed(made):
            remove_cgroup(path)
        pytest.skip(f"cannot create a pinned cgroup under {parent}: {error.strerror}")
    relative = directory[len(mount.mount_point) :]
    path = (mount.root.rstrip("/") + relative) or "/"
    try:
        yield path, joins
    finally:
        for join in joins:
            procs = Path(join)
            deadline = time.monotonic() + 10
            while procs.exists() and procs.read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.05)
        for made_dir in reversed(made):
            remove_cgroup(made_dir)
