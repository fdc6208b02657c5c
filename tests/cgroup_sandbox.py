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


@contextmanager
def quota_cgroup(cpus: float, *, nested: bool = False) -> Iterator[tuple[CgroupMount, str, str]]:
    """Yield (mount, quota directory, directory to put tasks in) for a `cpus` quota.

    With `nested`, tasks go to a child of the directory that holds the quota, so a reader
    must walk up to find it. Every task must be gone before the block ends.
    """
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    found = own_cpu_cgroup()
    if found is None:
        pytest.skip("this kernel has no mounted cgroup cpu controller")
    mount, parent = found
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
