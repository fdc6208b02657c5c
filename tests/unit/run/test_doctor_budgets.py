"""The budgets doctor starts its children under: which it plans, and the cgroup it makes for
a quota (on a fake cgroup tree: cgroup v1 as a hybrid machine mounts it, and v2), or why it
makes none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oversub.core.checkups import RunKind, RunSpec
from oversub.run import confine
from oversub.run.confine import Cell, cpu_hierarchy, open_cell
from oversub.run.doctoring import plan_runs

V1_MOUNTS = (
    "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "31 25 0:27 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
V1_CGROUP = "3:cpuset:/\n1:cpu:/job\n0::/\n"
V2_MOUNTS = "30 25 0:26 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"


def test_without_a_budget_the_host_and_two_comparisons() -> None:
    assert plan_runs((0, 1, 2, 3), None, None) == (
        RunSpec(RunKind.HOST, None, None),
        RunSpec(RunKind.AFFINITY, (0, 1), None),
        RunSpec(RunKind.QUOTA, None, 2.0),
    )


def test_an_asked_budget_comes_first_and_replaces_the_comparison_it_equals() -> None:
    assert plan_runs((0, 1), 1.0, None) == (
        RunSpec(RunKind.BUDGET, None, 1.0),
        RunSpec(RunKind.HOST, None, None),
        RunSpec(RunKind.AFFINITY, (0,), None),
    )
    assert plan_runs((0, 1), None, (0,)) == (
        RunSpec(RunKind.BUDGET, (0,), None),
        RunSpec(RunKind.HOST, None, None),
        RunSpec(RunKind.QUOTA, None, 1.0),
    )
    assert [r.kind for r in plan_runs((0, 1), 1.5, (1,))] == [
        RunKind.BUDGET,
        RunKind.HOST,
        RunKind.AFFINITY,
        RunKind.QUOTA,
    ]


def test_one_cpu_has_nothing_to_compare() -> None:
    assert plan_runs((3,), None, None) == (RunSpec(RunKind.HOST, None, None),)


def _tree(tmp_path: Path, mounts: str, cgroup: str) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(mounts)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    return tmp_path


def test_v1_quota_cell_is_a_child_of_its_own_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, V1_MOUNTS, V1_CGROUP)
    (root / "sys/fs/cgroup/cpu/job").mkdir(parents=True)
    monkeypatch.setattr(confine.os, "geteuid", lambda: 0)
    assert cpu_hierarchy(str(root)) == (1, str(root / "sys/fs/cgroup/cpu/job"), "/job")
    cell, confined = open_cell(RunSpec(RunKind.QUOTA, None, 1.5), "quota", str(root))
    directory = root / f"sys/fs/cgroup/cpu/job/oversub-doctor-{os.getpid()}-quota"
    assert confined.applied and confined.version == 1
    assert confined.cgroup == f"/job/oversub-doctor-{os.getpid()}-quota"
    assert (directory / "cpu.cfs_quota_us").read_text() == "150000"
    assert (directory / "cpu.cfs_period_us").read_text() == "100000"
    for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"):  # a real cgroup has no files to remove
        (directory / name).unlink()
    cell.close()
    assert not directory.exists()


def test_v2_quota_cell_writes_cpu_max_once_the_controller_is_enabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path, V2_MOUNTS, "0::/\n")
    base = root / "sys/fs/cgroup"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (base / "cgroup.subtree_control").write_text("memory\n")
    monkeypatch.setattr(confine.os, "geteuid", lambda: 0)
    _cell, confined = open_cell(RunSpec(RunKind.BUDGET, None, 0.5), "budget", str(root))
    assert confined.applied and confined.version == 2
    assert (base / "cgroup.subtree_control").read_text() == "+cpu"
    assert (base / f"oversub-doctor-{os.getpid()}-budget/cpu.max").read_text() == "50000 100000"


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("not-root", "creating a cgroup under"),
        ("no-hierarchy", "no cgroup hierarchy with the cpu controller"),
        ("v2-no-cpu", "cgroup v2 cpu controller is not available"),
        ("read-only", "cannot create a cgroup under"),
    ],
)
def test_a_quota_that_cannot_be_imposed_is_not_applied_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, why: str
) -> None:
    monkeypatch.setattr(confine.os, "geteuid", lambda: 1000 if case == "not-root" else 0)
    if case == "v2-no-cpu":
        root = _tree(tmp_path, V2_MOUNTS, "0::/\n")
        (root / "sys/fs/cgroup").mkdir(parents=True)
        (root / "sys/fs/cgroup/cgroup.controllers").write_text("memory pids\n")
        (root / "sys/fs/cgroup/cgroup.subtree_control").write_text("")
    elif case == "no-hierarchy":
        root = _tree(tmp_path, V1_MOUNTS.splitlines()[1] + "\n", "3:cpuset:/\n")
    else:
        root = _tree(tmp_path, V1_MOUNTS, V1_CGROUP)
        if case == "read-only":
            monkeypatch.setattr(confine.os, "mkdir", _refuse)
    cell, confined = open_cell(RunSpec(RunKind.BUDGET, None, 1.0), "budget", str(root))
    assert not confined.applied and confined.note is not None and why in confined.note
    assert cell.directory is None


def _refuse(path: str, mode: int = 0o777) -> None:
    raise OSError(30, "Read-only file system", path)


def test_an_affinity_cell_needs_no_cgroup() -> None:
    cell, confined = open_cell(RunSpec(RunKind.AFFINITY, (0,), None), "affinity")
    assert confined.applied and confined.cgroup is None and cell.directory is None
    Cell(RunSpec(RunKind.HOST, None, None)).close()  # nothing to remove
