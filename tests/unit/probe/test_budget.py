"""The effective CPU budget: rounding, sources, fake trees, and real processes and cgroups."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.core.errors import NoSuchProcess, PermissionDenied
from oversub.core.model import LimitSource
from oversub.probe.budget import effective_vcpus, read_budget
from tests.support.cgroup_sandbox import quota_cgroup, write
from tests.support.fake_budget_tree import FakeBudgetTree

PID = 777
V2 = "/sys/fs/cgroup"

# --------------------------------------------------------------------------- rounding


@pytest.mark.parametrize(
    ("quota", "vcpus"),
    [(0.01, 1), (0.5, 1), (1.0, 1), (1.5, 1), (1.9999999, 2), (2.0, 2), (2.99, 2), (3.0, 3)],
)
def test_fractional_quota_rounds_down_with_a_floor_of_one(quota: float, vcpus: int) -> None:
    assert effective_vcpus(8, 8, quota, None) == (vcpus, "quota")


@pytest.mark.parametrize(
    ("logical", "affinity", "quota", "cpuset", "expected"),
    [
        (8, 8, None, None, (8, "none")),
        (8, 4, None, 4, (4, "cpuset")),  # a cpuset narrows affinity to match: cpuset is the cause
        (8, 4, 4.0, 4, (4, "cpuset")),
        (8, 4, 4.5, None, (4, "quota")),  # quota ties affinity: quota wins
        (8, 3, 4.0, 6, (3, "affinity")),
        (8, 8, 8.0, 8, (8, "none")),  # limits equal to the host limit nothing
        (8, 8, 12.0, None, (8, "none")),
        (1, 1, 0.5, None, (1, "none")),  # 0.5 on a 1-CPU host: N=1 = logical
        (4, None, None, None, (4, "none")),
    ],
)
def test_limited_by_and_ties(
    logical: int,
    affinity: int | None,
    quota: float | None,
    cpuset: int | None,
    expected: tuple[int, LimitSource],
) -> None:
    assert effective_vcpus(logical, affinity, quota, cpuset) == expected


# --------------------------------------------------------------------------- fake trees


def host_tree(tmp_path: Path, affinity: str = "0-7", cgroup_path: str = "/job") -> FakeBudgetTree:
    """An 8-CPU, 2-socket SMT host with a v2 cgroup tree; the process sits in `cgroup_path`."""
    tree = FakeBudgetTree(tmp_path)
    siblings = {cpu: f"{cpu % 4},{cpu % 4 + 4}" for cpu in range(8)}
    tree.host(online="0-7", siblings=siblings, numa={0: "0-1,4-5", 1: "2-3,6-7"})
    tree.mount_v2(PID, V2)
    tree.process(PID, affinity, f"0::{cgroup_path}")
    tree.cgroup_files(V2, {"cpuset.cpus.effective": "0-7"})
    tree.cgroup_files(f"{V2}{cgroup_path}", {"cpu.max": "max 100000"})
    return tree


def test_unlimited_process_gets_the_host(tmp_path: Path) -> None:
    budget = read_budget(PID, root=host_tree(tmp_path).root)
    assert (budget.pid, budget.vcpus, budget.logical, budget.physical) == (PID, 8, 8, 4)
    assert budget.limited_by == "none"
    assert budget.cpuset is None  # the root cpuset allows every online CPU: no limit
    assert budget.affinity == tuple(range(8))
    assert budget.quota is None
    assert budget.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert dict(budget.numa) == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
    assert budget.notes == ()
    assert (budget.cpu_model, budget.cpu_flags) == (None, ())


def test_affinity_narrower_than_host(tmp_path: Path) -> None:
    budget = read_budget(PID, root=host_tree(tmp_path, affinity="2,5-6").root)
    assert budget.affinity == (2, 5, 6)
    assert (budget.vcpus, budget.limited_by) == (3, "affinity")


@pytest.mark.parametrize(
    ("cpu_max", "vcpus", "limited_by"),
    [
        ("50000 100000", 1, "quota"),
        ("150000 100000", 1, "quota"),
        ("200000 100000", 2, "quota"),
        ("max 100000", 8, "none"),
        ("1600000 100000", 8, "none"),
    ],
)
def test_quota_sets_the_budget(tmp_path: Path, cpu_max: str, vcpus: int, limited_by: str) -> None:
    tree = host_tree(tmp_path)
    tree.cgroup_files(f"{V2}/job", {"cpu.max": cpu_max})
    budget = read_budget(PID, root=tree.root)
    assert (budget.vcpus, budget.limited_by) == (vcpus, limited_by)
    if cpu_max.startswith("max"):
        assert budget.quota is None
    else:
        assert budget.quota is not None
        assert budget.quota.cpus == int(cpu_max.split()[0]) / 100000  # exact, not rounded


def test_parent_quota_binds_the_child(tmp_path: Path) -> None:
    tree = host_tree(tmp_path, cgroup_path="/team/job")
    tree.cgroup_files(f"{V2}/team", {"cpu.max": "300000 100000", "cpu.stat": "nr_periods 1"})
    tree.cgroup_files(f"{V2}/team/job", {"cpu.max": "600000 100000"})
    budget = read_budget(PID, root=tree.root)
    assert budget.quota is not None
    assert (budget.quota.cgroup, budget.quota.cpus) == ("/team", 3.0)
    assert budget.quota.stat_path == str(tree.path(f"{V2}/team/cpu.stat"))
    assert (budget.vcpus, budget.limited_by) == (3, "quota")


def test_cpuset_tie_with_affinity_blames_the_cpuset(tmp_path: Path) -> None:
    tree = host_tree(tmp_path, affinity="4-5")
    tree.cgroup_files(f"{V2}/job", {"cpuset.cpus.effective": "4-5"})
    budget = read_budget(PID, root=tree.root)
    assert budget.cpuset is not None and budget.cpuset.cpus == (4, 5)
    assert (budget.vcpus, budget.limited_by) == (2, "cpuset")


def test_v1_host_with_quota_and_cpuset(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-3")
    tree.mount_v1(PID, "/sys/fs/cgroup/cpu", "rw,cpu")
    tree.mount_v1(PID, "/sys/fs/cgroup/cpuset", "rw,cpuset")
    tree.process(PID, "0-2", "2:cpu:/a\n3:cpuset:/a")
    quota = {"cpu.cfs_quota_us": "250000", "cpu.cfs_period_us": "100000"}
    tree.cgroup_files("/sys/fs/cgroup/cpu/a", quota)
    tree.cgroup_files("/sys/fs/cgroup/cpuset/a", {"cpuset.cpus": "0-2"})
    budget = read_budget(PID, root=tree.root)
    assert budget.quota is not None and budget.quota.version == 1
    assert (budget.vcpus, budget.limited_by) == (2, "quota")


def test_unreadable_files_become_notes(tmp_path: Path) -> None:
    tree = host_tree(tmp_path)
    tree.make_unreadable(f"{V2}/job/cpu.max")
    tree.make_unreadable("/sys/devices/system/cpu/cpu3/topology/thread_siblings_list")
    budget = read_budget(PID, root=tree.root)
    assert budget.vcpus == 8
    assert budget.physical is None
    assert len(budget.notes) == 2


def test_missing_affinity_field_assumes_online_cpus(tmp_path: Path) -> None:
    tree = host_tree(tmp_path)
    tree.write(f"/proc/{PID}/status", "Name:\tpython\n")
    budget = read_budget(PID, root=tree.root)
    assert budget.affinity == tuple(range(8))
    assert any("Cpus_allowed_list" in note for note in budget.notes)


def test_nonexistent_pid(tmp_path: Path) -> None:
    tree = host_tree(tmp_path)
    with pytest.raises(NoSuchProcess, match="no process with pid 123"):
        read_budget(123, root=tree.root)
    with pytest.raises(NoSuchProcess):
        read_budget(0, root=tree.root)


def test_a_thread_id_names_its_process(tmp_path: Path) -> None:
    # Issue 11 item 11: `watch TID` said "cannot read /proc/TID/stat" with no hint.
    tree = host_tree(tmp_path)
    tree.write(f"/proc/{PID + 1}/status", f"Name:\tpython\nTgid:\t{PID}\nPid:\t{PID + 1}\n")
    with pytest.raises(NoSuchProcess, match=f"{PID + 1} is a thread of process {PID}"):
        read_budget(PID + 1, root=tree.root)


def test_a_real_thread_id_names_its_process() -> None:
    import threading

    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        tid = thread.native_id
        assert tid is not None
        with pytest.raises(NoSuchProcess) as caught:
            read_budget(tid)
        assert str(caught.value) == (
            f"{tid} is a thread of process {os.getpid()}, not a process: use pid {os.getpid()}"
        )
    finally:
        release.set()
        thread.join()


def test_detail_on_a_fake_tree_reads_its_cpuinfo(tmp_path: Path) -> None:
    tree = host_tree(tmp_path)
    tree.write(
        "/proc/cpuinfo",
        "processor\t: 0\nmodel name\t: Fake CPU 9000\nflags\t\t: sse2 avx2 fpu\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: x\n",
    )
    budget = read_budget(PID, root=tree.root, detail=True)
    assert budget.cpu_model == "Fake CPU 9000"
    assert budget.cpu_flags == ("avx2", "fpu", "sse2")


# --------------------------------------------------------------------------- this machine


def test_this_process_on_this_machine() -> None:
    budget = read_budget()
    affinity = os.sched_getaffinity(0)
    assert budget.pid == os.getpid()
    assert budget.affinity == tuple(sorted(affinity))
    assert budget.logical == os.cpu_count()
    assert 1 <= budget.vcpus <= len(affinity)
    psutil = pytest.importorskip("psutil")
    assert budget.physical == psutil.cpu_count(logical=False)
    unlimited = budget.quota is None and (
        budget.cpuset is None or len(budget.cpuset.cpus) >= len(affinity)
    )
    if unlimited:
        assert budget.vcpus == len(affinity)
        expected = "none" if len(affinity) == budget.logical else "affinity"
        assert budget.limited_by == expected


def test_permission_denied_from_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int) -> set[int]:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_getaffinity", refuse)
    with pytest.raises(PermissionDenied, match=f"cannot read process {os.getpid()}: permission"):
        read_budget()


def test_failing_sched_getaffinity_falls_back_to_status(monkeypatch: pytest.MonkeyPatch) -> None:
    real_affinity = tuple(sorted(os.sched_getaffinity(0)))

    def fail(pid: int) -> set[int]:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_getaffinity", fail)
    budget = read_budget()
    assert budget.affinity == real_affinity
    assert any("sched_getaffinity failed" in note for note in budget.notes)


def test_real_nonexistent_pid() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    with pytest.raises(NoSuchProcess, match=f"no process with pid {pid_max + 1}"):
        read_budget(pid_max + 1)


def test_platform_without_procfs_uses_psutil(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psutil")
    monkeypatch.setattr(sys, "platform", "darwin")
    budget = read_budget()
    assert budget.affinity == tuple(sorted(os.sched_getaffinity(0)))
    assert budget.quota is None and budget.cpuset is None
    assert any("cgroup limits are unavailable" in note for note in budget.notes)
    with pytest.raises(NoSuchProcess):
        read_budget(int(Path("/proc/sys/kernel/pid_max").read_text()) + 1)


def test_import_does_not_load_cpuinfo() -> None:
    code = "import sys, oversub.probe.budget as b; b.read_budget(); print('cpuinfo' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.integration
def test_detail_fills_model_and_flags() -> None:
    budget = read_budget(detail=True)
    assert budget.cpu_model
    if Path("/proc/cpuinfo").read_text().count("flags"):
        assert len(budget.cpu_flags) > 0
        assert all(isinstance(flag, str) and flag for flag in budget.cpu_flags)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A child that sleeps until killed; always killed and reaped."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield child
    finally:
        child.kill()
        child.wait(timeout=30)


@pytest.mark.integration
def test_child_that_narrows_its_affinity_sees_one_cpu() -> None:
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from oversub.probe.budget import read_budget; print(read_budget().vcpus)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "1"


@pytest.mark.integration
def test_reading_another_process_with_narrow_affinity(
    sleeper: subprocess.Popen[bytes],
) -> None:
    cpu = max(os.sched_getaffinity(0))
    os.sched_setaffinity(sleeper.pid, {cpu})
    budget = read_budget(sleeper.pid)
    assert (budget.pid, budget.affinity, budget.vcpus) == (sleeper.pid, (cpu,), 1)


@pytest.mark.integration
def test_real_cgroup_quota_of_half_a_cpu(sleeper: subprocess.Popen[bytes]) -> None:
    try:
        with quota_cgroup(0.5, nested=True) as (mount, outer, inner):
            # The quota sits on the parent of the child's cgroup: the walk up must find it.
            write(os.path.join(inner, "cgroup.procs"), str(sleeper.pid))
            budget = read_budget(sleeper.pid)
            assert budget.quota is not None
            assert budget.quota.cpus == 0.5
            assert budget.quota.cgroup.endswith("/" + os.path.basename(outer))
            assert budget.quota.version == mount.version
            assert budget.quota.stat_path == os.path.join(outer, "cpu.stat")
            assert budget.vcpus == 1
            assert budget.limited_by == ("quota" if budget.logical > 1 else "none")
            sleeper.kill()
            sleeper.wait(timeout=30)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)
