"""A cgroup as the target on fake trees, v1 and v2: the hierarchy found through mountinfo,
`--cgroup` as a hierarchy path or a directory, bad paths, members of a subtree, the budget of
the cgroup itself (not oversub's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus, NoSuchCgroup, UnsupportedPlatform, UsageError
from oversub.probe.cgroup_target import (
    cgroup_budget,
    find_hierarchy,
    find_job_hierarchy,
    job_root,
    node_budget,
    read_members,
    ref_of,
    resolve_cgroup,
)
from tests.support.fake_budget_tree import FakeBudgetTree

V1_SELF = "4:cpuset:/\n3:cpu,cpuacct:/\n0::/\n"


def v1_tree(tmp_path: Path) -> FakeBudgetTree:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-3")
    tree.process("self", "0-3", V1_SELF)  # type: ignore[arg-type]
    tree.mount_v1("self", "/sys/fs/cgroup/cpu,cpuacct", "rw,cpu,cpuacct")  # type: ignore[arg-type]
    tree.mount_v1("self", "/sys/fs/cgroup/cpuset", "rw,cpuset")  # type: ignore[arg-type]
    tree.mount_v2("self", "/sys/fs/cgroup/unified")  # type: ignore[arg-type]
    cpu = "/sys/fs/cgroup/cpu,cpuacct"
    tree.cgroup_files(
        cpu, {"cgroup.procs": "1\n2", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}
    )
    tree.cgroup_files(
        f"{cpu}/slurm",
        {"cgroup.procs": "", "cpu.cfs_quota_us": "200000", "cpu.cfs_period_us": "100000"},
    )
    tree.cgroup_files(
        f"{cpu}/slurm/job_42",
        {
            "cgroup.procs": "",
            "cpu.cfs_quota_us": "-1",
            "cpu.cfs_period_us": "100000",
            "cpu.stat": "nr_periods 1\nnr_throttled 0\nthrottled_time 0",
        },
    )
    tree.cgroup_files(
        f"{cpu}/slurm/job_42/step_0",
        {"cgroup.procs": "100\n101", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"},
    )
    tree.cgroup_files(f"{cpu}/slurm/job_42/step_1", {"cgroup.procs": "102"})
    tree.cgroup_files("/sys/fs/cgroup/cpuset", {"cpuset.cpus": "0-3"})
    tree.cgroup_files("/sys/fs/cgroup/cpuset/slurm/job_42", {"cpuset.cpus": "2-3"})
    tree.process(100, "2-3", "4:cpuset:/slurm/job_42\n3:cpu,cpuacct:/slurm/job_42/step_0\n0::/\n")
    tree.mount_v1(100, "/sys/fs/cgroup/cpu,cpuacct", "rw,cpu,cpuacct")
    tree.mount_v1(100, "/sys/fs/cgroup/cpuset", "rw,cpuset")
    return tree


def v2_tree(tmp_path: Path) -> FakeBudgetTree:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-7")
    tree.process("self", "0-7", "0::/user.slice/session-1.scope\n")  # type: ignore[arg-type]
    tree.mount_v2("self", "/sys/fs/cgroup")  # type: ignore[arg-type]
    base = "/sys/fs/cgroup"
    tree.cgroup_files(base, {"cgroup.procs": "1", "cpuset.cpus.effective": "0-7"})
    tree.cgroup_files(
        f"{base}/kubepods.slice",
        {"cgroup.procs": "", "cpu.max": "400000 100000", "cpuset.cpus.effective": "0-7"},
    )
    pod = f"{base}/kubepods.slice/pod1"
    tree.cgroup_files(
        pod, {"cgroup.procs": "", "cpu.max": "150000 100000", "cpuset.cpus.effective": "0-5"}
    )
    tree.cgroup_files(f"{pod}/c1", {"cgroup.procs": "200\n201", "cpu.max": "max 100000"})
    return tree


def test_v1_hierarchy_is_the_cpu_controller(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path)
    h = find_hierarchy(tree.root)
    assert h.version == 1
    assert h.mount.mount_point == "/sys/fs/cgroup/cpu,cpuacct"


def test_v2_hierarchy(tmp_path: Path) -> None:
    tree = v2_tree(tmp_path)
    h = find_hierarchy(tree.root)
    assert (h.version, h.mount.mount_point) == (2, "/sys/fs/cgroup")


def test_no_hierarchy_is_unsupported(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.process("self", "0", "0::/\n")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedPlatform):
        find_hierarchy(tree.root)


@pytest.mark.parametrize(
    "argument", ["/slurm/job_42", "/sys/fs/cgroup/cpu,cpuacct/slurm/job_42", "/slurm/job_42/"]
)
def test_resolve_path_or_directory(tmp_path: Path, argument: str) -> None:
    tree = v1_tree(tmp_path)
    ref = resolve_cgroup(argument, tree.root)
    assert ref.path == "/slurm/job_42"
    assert ref.directory == str(tree.path("/sys/fs/cgroup/cpu,cpuacct/slurm/job_42"))


@pytest.mark.parametrize(
    ("argument", "error", "words"),
    [
        ("slurm/job_42", UsageError, "absolute"),
        ("/slurm/../etc", UsageError, ".."),
        ("/slurm/job_43", NoSuchCgroup, "no cgroup /slurm/job_43 in the cgroup v1 cpu hierarchy"),
    ],
)
def test_bad_cgroup_paths(tmp_path: Path, argument: str, error: type, words: str) -> None:
    tree = v1_tree(tmp_path)
    with pytest.raises(error, match=words.replace(".", r"\.")) as caught:
        resolve_cgroup(argument, tree.root)
    expected = ExitStatus.USAGE if error is UsageError else ExitStatus.UNOBSERVABLE
    assert caught.value.status is expected


def test_members_of_a_subtree(tmp_path: Path) -> None:
    tree = v1_tree(tmp_path)
    h = find_hierarchy(tree.root)
    members = read_members(ref_of("/slurm/job_42", h))
    assert members == {
        100: "/slurm/job_42/step_0",
        101: "/slurm/job_42/step_0",
        102: "/slurm/job_42/step_1",
    }
    assert read_members(ref_of("/gone", h)) is None


def test_v1_budget_is_the_cgroups_own(tmp_path: Path) -> None:
    """The quota is the parent's (2 CPUs, walking up from the job), the cpuset the job's,
    read through a member (v1 keeps cpuset in another hierarchy)."""
    tree = v1_tree(tmp_path)
    ref = resolve_cgroup("/slurm/job_42", tree.root)
    budget = cgroup_budget(ref, root=tree.root, member=100)
    assert budget.cgroup == "/slurm/job_42"
    assert budget.quota is not None and budget.quota.cpus == 2.0
    assert budget.quota.cgroup == "/slurm"
    assert budget.cpuset is not None and budget.cpuset.cpus == (2, 3)
    assert budget.vcpus == 2 and budget.limited_by == "cpuset"
    assert not budget.given
    no_member = cgroup_budget(ref, root=tree.root)
    assert no_member.cpuset is None and no_member.limited_by == "quota"
    assert any("cpuset unknown" in note for note in no_member.notes)


def test_v2_budget_walks_up_and_reads_the_cpuset(tmp_path: Path) -> None:
    tree = v2_tree(tmp_path)
    ref = resolve_cgroup("/kubepods.slice/pod1", tree.root)
    budget = cgroup_budget(ref, root=tree.root, member=200)
    assert budget.quota is not None and budget.quota.cpus == 1.5
    assert budget.cpuset is not None and budget.cpuset.cpus == (0, 1, 2, 3, 4, 5)
    assert (budget.vcpus, budget.limited_by) == (1, "quota")
    h = find_hierarchy(tree.root)
    assert read_members(ref) == {200: "/kubepods.slice/pod1/c1", 201: "/kubepods.slice/pod1/c1"}
    assert set(read_members(ref_of("/", h)) or {}) == {1, 200, 201}


def test_node_budget_is_every_online_cpu(tmp_path: Path) -> None:
    tree = v2_tree(tmp_path)
    budget = node_budget(tree.root)
    assert (budget.vcpus, budget.limited_by, budget.cgroup) == (8, "none", "/")


# --------------------------------------------------------------------------- SLURM on v1


def slurm_v1_tree(tmp_path: Path) -> FakeBudgetTree:
    """What slurm-wlm 22.05's task/cgroup makes on a hybrid v1 host (measured): the job in
    the cpuset (and freezer) hierarchy only, its tasks at the root of the cpu controller."""
    tree = v1_tree(tmp_path)
    job = "/sys/fs/cgroup/cpuset/slurm_vm/uid_0/job_7"
    tree.cgroup_files("/sys/fs/cgroup/cpuset/slurm_vm", {"cgroup.procs": "", "cpuset.cpus": "0-3"})
    tree.cgroup_files(f"{job}", {"cgroup.procs": "", "cpuset.cpus": "1"})
    tree.cgroup_files(f"{job}/step_0", {"cgroup.procs": "300\n301", "cpuset.cpus": "1"})
    tree.process(300, "1", "4:cpuset:/slurm_vm/uid_0/job_7/step_0\n3:cpu,cpuacct:/\n0::/\n")
    tree.mount_v1(300, "/sys/fs/cgroup/cpu,cpuacct", "rw,cpu,cpuacct")
    tree.mount_v1(300, "/sys/fs/cgroup/cpuset", "rw,cpuset")
    return tree


def test_job_hierarchy_is_the_separate_cpuset_mount(tmp_path: Path) -> None:
    tree = slurm_v1_tree(tmp_path)
    jobs = find_job_hierarchy(tree.root)
    assert jobs is not None
    assert (jobs.version, jobs.controller, jobs.mount.mount_point) == (
        1,
        "cpuset",
        "/sys/fs/cgroup/cpuset",
    )
    assert "v1 cpuset hierarchy" in jobs.describe()
    assert find_job_hierarchy(v2_tree(tmp_path / "v2").root) is None
    root = job_root(find_hierarchy(tree.root), tree.root)
    assert root is not None and root.path == "/"


@pytest.mark.parametrize(
    "argument", ["/slurm_vm/uid_0/job_7", "/sys/fs/cgroup/cpuset/slurm_vm/uid_0/job_7"]
)
def test_a_job_only_in_the_cpuset_hierarchy_resolves(tmp_path: Path, argument: str) -> None:
    tree = slurm_v1_tree(tmp_path)
    ref = resolve_cgroup(argument, tree.root)
    assert ref.path == "/slurm_vm/uid_0/job_7"
    assert ref.hierarchy.controller == "cpuset"
    assert read_members(ref) == {300: "/slurm_vm/uid_0/job_7/step_0", 301: ref.path + "/step_0"}
    budget = cgroup_budget(ref, root=tree.root, member=300)
    assert (budget.vcpus, budget.limited_by, budget.cgroup) == (1, "cpuset", ref.path)
    assert budget.cpuset is not None and budget.cpuset.cgroup == ref.path
    assert budget.quota is None  # its member's cpu cgroup (the root) sets none


def test_the_cpuset_fallback_is_for_slurm_jobs_only(tmp_path: Path) -> None:
    # Any other cpuset-only cgroup is not a target of the cpu hierarchy's `--cgroup`.
    tree = slurm_v1_tree(tmp_path)
    with pytest.raises(NoSuchCgroup, match="v1 cpu hierarchy"):
        resolve_cgroup("/slurm_vm", tree.root)
