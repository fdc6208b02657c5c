"""cgroup quota and cpuset discovery on fake v1, v2, hybrid and container trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oversub.probe.cgroup import (
    CgroupEntry,
    parse_cfs_quota,
    parse_cpu_max,
    parse_mountinfo,
    parse_proc_cgroup,
    read_cgroup_limits,
)
from tests.support.fake_budget_tree import FakeBudgetTree

PID = 4242
V1_CPU = "/sys/fs/cgroup/cpu,cpuacct"
V1_CPUSET = "/sys/fs/cgroup/cpuset"
V2 = "/sys/fs/cgroup"


def cfs(quota_us: int) -> dict[str, str]:
    """v1 CFS bandwidth files with the default 100 ms period."""
    return {"cpu.cfs_quota_us": str(quota_us), "cpu.cfs_period_us": "100000"}


# --------------------------------------------------------------------------- parsers


def test_parse_mountinfo_keeps_cgroup_mounts_only() -> None:
    text = (
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:7"
        " - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 /docker/abc /sys/fs/cgroup/my\\040mount rw master:1 shared:2"
        " - cgroup2 none rw\n"
        "broken line\n"
    )
    mounts = parse_mountinfo(text)
    assert [(m.version, m.root, m.mount_point) for m in mounts] == [
        (1, "/", "/sys/fs/cgroup/cpu,cpuacct"),
        (2, "/docker/abc", "/sys/fs/cgroup/my mount"),
    ]
    assert {"cpu", "cpuacct"} <= mounts[0].options


def test_parse_proc_cgroup() -> None:
    text = "12:cpu,cpuacct:/user.slice\n1:name=systemd:/a:b\n0::/user.slice/session-1.scope\n"
    assert parse_proc_cgroup(text) == (
        CgroupEntry(12, ("cpu", "cpuacct"), "/user.slice"),
        CgroupEntry(1, ("name=systemd",), "/a:b"),
        CgroupEntry(0, (), "/user.slice/session-1.scope"),
    )
    assert [entry.version for entry in parse_proc_cgroup(text)] == [1, 1, 2]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("max 100000\n", None),
        ("150000 100000\n", (150000, 100000)),
        ("50000 50000", (50000, 50000)),
    ],
)
def test_parse_cpu_max(text: str, parsed: tuple[int, int] | None) -> None:
    assert parse_cpu_max(text) == parsed


@pytest.mark.parametrize("text", ["", "lots of words here", "abc 100000", "0 100000"])
def test_parse_cpu_max_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_max(text)


def test_parse_cfs_quota() -> None:
    assert parse_cfs_quota("-1\n", "100000\n") is None
    assert parse_cfs_quota("50000\n", "100000\n") == (50000, 100000)
    with pytest.raises(ValueError):
        parse_cfs_quota("50000", "0")


# --------------------------------------------------------------------------- trees


def v1_tree(tmp_path: Path, cgroup_path: str = "/job") -> FakeBudgetTree:
    tree = FakeBudgetTree(tmp_path)
    tree.mount_v1(PID, V1_CPU, "rw,cpu,cpuacct")
    tree.mount_v1(PID, V1_CPUSET, "rw,cpuset")
    tree.process(PID, "0-7", f"5:cpuset:{cgroup_path}\n3:cpu,cpuacct:{cgroup_path}\n0::/")
    return tree


def v2_tree(tmp_path: Path, cgroup_path: str = "/job") -> FakeBudgetTree:
    tree = FakeBudgetTree(tmp_path)
    tree.mount_v2(PID, V2)
    tree.process(PID, "0-7", f"0::{cgroup_path}")
    return tree


def test_v1_quota_and_cpuset(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path)
    tree.cgroup_files(V1_CPU, cfs(-1))
    tree.cgroup_files(
        f"{V1_CPU}/job",
        {"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000", "cpu.stat": "nr_periods 0"},
    )
    tree.cgroup_files(V1_CPUSET, {"cpuset.cpus": "0-7"})
    tree.cgroup_files(f"{V1_CPUSET}/job", {"cpuset.cpus": "2-3"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None
    assert (limits.quota.cpus, limits.quota.quota_us, limits.quota.period_us) == (
        1.5,
        150000,
        100000,
    )
    assert (limits.quota.cgroup, limits.quota.version) == ("/job", 1)
    assert limits.quota.stat_path == str(tree.path(f"{V1_CPU}/job/cpu.stat"))
    assert limits.cpuset is not None
    assert (limits.cpuset.cpus, limits.cpuset.cgroup, limits.cpuset.version) == ((2, 3), "/job", 1)
    assert limits.notes == ()


def test_v1_unlimited(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path)
    for directory in (V1_CPU, f"{V1_CPU}/job"):
        tree.cgroup_files(directory, cfs(-1))
    tree.cgroup_files(f"{V1_CPUSET}/job", {"cpuset.cpus": "0-7"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is None
    assert limits.notes == ()


def test_v2_quota_and_effective_cpuset_walk_up(tmp_path: Path) -> None:
    tree = v2_tree(tmp_path, "/kubepods/pod1/ctr")
    tree.cgroup_files(V2, {"cpuset.cpus.effective": "0-7", "cpu.stat": "usage_usec 1"})
    tree.cgroup_files(f"{V2}/kubepods", {"cpu.max": "max 100000", "cpuset.cpus.effective": "0-5"})
    tree.cgroup_files(f"{V2}/kubepods/pod1", {"cpu.max": "200000 100000"})
    tree.cgroup_files(f"{V2}/kubepods/pod1/ctr", {"cpu.max": "max 100000"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None
    assert (limits.quota.cpus, limits.quota.cgroup, limits.quota.version) == (
        2.0,
        "/kubepods/pod1",
        2,
    )
    assert limits.quota.stat_path is None  # no cpu.stat in that fake cgroup
    # pod1 and ctr have no cpuset controller: the nearest ancestor's set applies.
    assert limits.cpuset is not None
    assert (limits.cpuset.cpus, limits.cpuset.cgroup) == ((0, 1, 2, 3, 4, 5), "/kubepods")


@pytest.mark.parametrize("version", [1, 2])
def test_parent_quota_tighter_than_child(tmp_path: Path, version: int) -> None:
    if version == 1:
        tree, top = v1_tree(tmp_path, "/outer/inner"), V1_CPU
        tree.cgroup_files(
            f"{top}/outer", {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"}
        )
        tree.cgroup_files(
            f"{top}/outer/inner", {"cpu.cfs_quota_us": "300000", "cpu.cfs_period_us": "100000"}
        )
    else:
        tree, top = v2_tree(tmp_path, "/outer/inner"), V2
        tree.cgroup_files(f"{top}/outer", {"cpu.max": "50000 100000"})
        tree.cgroup_files(f"{top}/outer/inner", {"cpu.max": "300000 100000"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None
    assert (limits.quota.cpus, limits.quota.cgroup) == (0.5, "/outer")


def test_hybrid_host_reads_v1_cpu_and_v2_unified(tmp_path: Path) -> None:
    """This machine's layout: v1 cpu next to a v2 tree at /sys/fs/cgroup/unified."""
    tree = FakeBudgetTree(tmp_path)
    tree.mount_v1(PID, "/sys/fs/cgroup/cpu", "rw,cpu")
    tree.mount_v2(PID, "/sys/fs/cgroup/unified")
    tree.process(PID, "0-3", "1:cpu:/batch\n0::/batch/svc")
    tree.cgroup_files("/sys/fs/cgroup/cpu/batch", cfs(300000))
    tree.cgroup_files("/sys/fs/cgroup/unified/batch/svc", {"cpu.max": "max 100000"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None
    assert (limits.quota.cpus, limits.quota.version) == (3.0, 1)

    # The tighter of the two wins, whichever version holds it.
    tree.cgroup_files("/sys/fs/cgroup/unified/batch", {"cpu.max": "120000 100000"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None
    assert (limits.quota.cpus, limits.quota.version, limits.quota.cgroup) == (1.2, 2, "/batch")


def test_container_mount_root_is_stripped(tmp_path: Path) -> None:
    """A container sees its own cgroup at the mount point (mountinfo root = the cgroup)."""
    tree = FakeBudgetTree(tmp_path)
    tree.mount_v1(PID, "/sys/fs/cgroup/cpu", "rw,cpu,cpuacct", root="/docker/abc")
    tree.mount_v1(PID, "/sys/fs/cgroup/cpuset", "rw,cpuset", root="/docker/abc")
    tree.process(PID, "0-7", "4:cpuset:/docker/abc\n2:cpu,cpuacct:/docker/abc/worker\n0::/")
    tree.cgroup_files("/sys/fs/cgroup/cpu", cfs(250000))
    tree.cgroup_files("/sys/fs/cgroup/cpu/worker", cfs(-1))
    tree.cgroup_files("/sys/fs/cgroup/cpuset", {"cpuset.cpus": "4-5"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None
    assert (limits.quota.cpus, limits.quota.cgroup) == (2.5, "/docker/abc")
    assert limits.cpuset is not None
    assert (limits.cpuset.cpus, limits.cpuset.cgroup) == ((4, 5), "/docker/abc")
    assert limits.notes == ()


def test_v2_cgroup_namespace(tmp_path: Path) -> None:
    """With a cgroup namespace both the path and the mount root read "/"."""
    tree = v2_tree(tmp_path, "/")
    tree.cgroup_files(V2, {"cpu.max": "100000 100000", "cpuset.cpus.effective": "1"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None and limits.quota.cpus == 1.0
    assert limits.cpuset is not None and limits.cpuset.cpus == (1,)


def test_cgroup_outside_the_mounted_view_is_noted(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.mount_v2(PID, V2, root="/docker/abc")
    tree.process(PID, "0-3", "0::/system.slice/other")
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is None
    assert any("not visible" in note for note in limits.notes)


def test_unreadable_quota_becomes_a_note_and_others_still_count(tmp_path: Path) -> None:
    tree = v2_tree(tmp_path, "/a/b")
    tree.cgroup_files(f"{V2}/a", {"cpu.max": "400000 100000"})
    tree.make_unreadable(f"{V2}/a/b/cpu.max")
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is not None and limits.quota.cgroup == "/a"
    assert any("CPU quota of /a/b" in note for note in limits.notes)


def test_garbage_quota_and_cpuset_become_notes(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path)
    tree.cgroup_files(f"{V1_CPU}/job", {"cpu.cfs_quota_us": "lots", "cpu.cfs_period_us": "1"})
    tree.cgroup_files(f"{V1_CPUSET}/job", {"cpuset.cpus": "0-x"})
    tree.cgroup_files(V1_CPUSET, {"cpuset.cpus": "0-3"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is None
    assert limits.cpuset is not None and limits.cpuset.cgroup == "/"  # fell back to the parent
    assert len(limits.notes) == 2


def test_missing_cgroup_directory_is_noted(tmp_path: Path) -> None:
    tree = v2_tree(tmp_path, "/gone")
    tree.path(V2).mkdir(parents=True)
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is None
    assert any("/gone" in note and "not found" in note for note in limits.notes)


def test_v1_cpu_not_mounted_is_noted(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.mount_v1(PID, V1_CPUSET, "rw,cpuset")
    tree.process(PID, "0-3", "3:cpu:/job\n5:cpuset:/\n0::/")
    tree.cgroup_files(V1_CPUSET, {"cpuset.cpus": "0-3"})
    limits = read_cgroup_limits(PID, tree.root)
    assert limits.quota is None
    assert any("v1 cpu hierarchy is not mounted" in note for note in limits.notes)
    assert limits.cpuset is not None


def test_no_cgroup_file_is_noted(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.write(f"/proc/{PID}/status", "Cpus_allowed_list:\t0\n")
    limits = read_cgroup_limits(PID, tree.root)
    assert (limits.quota, limits.cpuset) == (None, None)
    assert any("cgroup limits unknown" in note for note in limits.notes)


def test_this_process_on_this_machine() -> None:
    limits = read_cgroup_limits(os.getpid())
    if limits.quota is not None:
        assert limits.quota.cpus > 0
        assert limits.quota.cgroup.startswith("/")
    if limits.cpuset is not None:
        # The kernel keeps affinity inside the cpuset.
        assert set(os.sched_getaffinity(0)) <= set(limits.cpuset.cpus)
