"""`--procs auto`: launcher variables and per-task SLURM plans."""

from __future__ import annotations

import pytest

from oversub.analysis.launcher import (
    LAUNCHER_VARS,
    LauncherInfo,
    plan_for_launcher,
    procs_from_env,
    task_vcpus,
)
from oversub.analysis.plans import make_plan, synthetic_budget
from oversub.core.errors import ExitStatus, UsageError
from oversub.core.model import Budget


@pytest.mark.parametrize(
    ("env", "procs", "source"),
    [
        ({"LOCAL_WORLD_SIZE": "4"}, 4, "LOCAL_WORLD_SIZE"),
        ({"SLURM_NTASKS_PER_NODE": "8"}, 8, "SLURM_NTASKS_PER_NODE"),
        ({"SLURM_NTASKS_PER_NODE": "4(x2)"}, 4, "SLURM_NTASKS_PER_NODE"),
        ({"SLURM_NTASKS_PER_NODE": "4(x2),4"}, 4, "SLURM_NTASKS_PER_NODE"),
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}, 3, "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ({"MPI_LOCALNRANKS": "2"}, 2, "MPI_LOCALNRANKS"),
        ({"MPI_LOCALNRANKS": " 2\n"}, 2, "MPI_LOCALNRANKS"),
    ],
)
def test_each_launcher(env: dict[str, str], procs: int, source: str) -> None:
    info = procs_from_env(env)
    assert (info.procs, info.source) == (procs, source)
    assert info.per_task_cpus is None


def test_torchrun_wins_inside_slurm_and_mpi() -> None:
    env = {
        "MPI_LOCALNRANKS": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_CPUS_PER_TASK": "16",
        "LOCAL_WORLD_SIZE": "4",
    }
    info = procs_from_env(env)
    assert info == LauncherInfo(procs=4, source="LOCAL_WORLD_SIZE", per_task_cpus=None)


def test_slurm_before_mpi() -> None:
    info = procs_from_env({"SLURM_NTASKS_PER_NODE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "6"})
    assert info.source == "SLURM_NTASKS_PER_NODE"


def test_slurm_cpus_per_task() -> None:
    info = procs_from_env({"SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_CPUS_PER_TASK": "8"})
    assert info == LauncherInfo(procs=4, source="SLURM_NTASKS_PER_NODE", per_task_cpus=8)


def test_empty_variable_counts_as_unset() -> None:
    info = procs_from_env({"LOCAL_WORLD_SIZE": "", "MPI_LOCALNRANKS": "2"})
    assert info.source == "MPI_LOCALNRANKS"


def test_no_launcher_names_every_variable() -> None:
    with pytest.raises(UsageError) as excinfo:
        procs_from_env({"PATH": "/bin", "SLURM_CPUS_PER_TASK": "4"})
    message = str(excinfo.value)
    assert message.startswith("--procs auto: no launcher variable set")
    for name in LAUNCHER_VARS:
        assert name in message
    assert excinfo.value.status is ExitStatus.USAGE


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LOCAL_WORLD_SIZE", "four"),
        ("LOCAL_WORLD_SIZE", "0"),
        ("LOCAL_WORLD_SIZE", "-2"),
        ("LOCAL_WORLD_SIZE", "2.5"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "x"),
        ("MPI_LOCALNRANKS", "0"),
        ("SLURM_NTASKS_PER_NODE", "0"),
        ("SLURM_NTASKS_PER_NODE", "4(x"),
        ("SLURM_NTASKS_PER_NODE", "(x2)"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(UsageError) as excinfo:
        procs_from_env({name: value})
    assert name in str(excinfo.value)
    assert repr(value) in str(excinfo.value)


def test_slurm_uneven_nodes_is_refused() -> None:
    with pytest.raises(UsageError, match="differs between nodes"):
        procs_from_env({"SLURM_NTASKS_PER_NODE": "4(x2),3"})


@pytest.mark.parametrize("value", ["0", "many", "-1"])
def test_bad_slurm_cpus_per_task(value: str) -> None:
    with pytest.raises(UsageError, match="SLURM_CPUS_PER_TASK"):
        procs_from_env({"SLURM_NTASKS_PER_NODE": "2", "SLURM_CPUS_PER_TASK": value})


# --------------------------------------------------------------------------- plans


def test_plain_launcher_shares_the_budget() -> None:
    budget = synthetic_budget(8)
    info = LauncherInfo(procs=4, source="LOCAL_WORLD_SIZE", per_task_cpus=None)
    plan = plan_for_launcher(budget, info, workers=0)
    assert plan == make_plan(budget, 4, procs_source="LOCAL_WORLD_SIZE")
    assert plan.threads_per_process == 2


def measured(vcpus: int) -> Budget:
    """A measured budget of `vcpus` CPUs (a given one, pid 0, gets no binding)."""
    return synthetic_budget(vcpus)._replace(pid=4242, notes=())


def test_slurm_task_confined_to_its_cpus() -> None:
    # SLURM bound the task: the process sees exactly its 4 CPUs.
    budget = measured(4)
    info = LauncherInfo(procs=8, source="SLURM_NTASKS_PER_NODE", per_task_cpus=4)
    assert task_vcpus(budget, info) == 4
    plan = plan_for_launcher(budget, info, workers=1)
    assert (plan.procs, plan.threads_per_process, plan.workers) == (1, 3, 1)
    assert not plan.oversubscribed
    assert plan.binding == ((0, 1, 2, 3),)
    assert plan.procs_source == "SLURM_NTASKS_PER_NODE" and plan.launcher_procs == 8
    assert plan.budget.limited_by == budget.limited_by  # its own limit confines it
    assert "one SLURM task" in plan.warnings[0]


def test_slurm_task_sees_whole_node() -> None:
    # 4 tasks x 8 CPUs on a 32-CPU node without task binding: plan on the task's 8.
    budget = synthetic_budget(32)
    info = LauncherInfo(procs=4, source="SLURM_NTASKS_PER_NODE", per_task_cpus=8)
    assert task_vcpus(budget, info) == 8
    plan = plan_for_launcher(budget, info, workers=0)
    assert (plan.procs, plan.threads_per_process, plan.leftover) == (1, 8, 0)
    assert plan.budget.vcpus == 8
    assert plan.budget.limited_by == "launcher"
    assert plan.budget.launcher == "SLURM_CPUS_PER_TASK=8"
    # Every task sees the same CPUs: one binding would pin them all together.
    assert plan.binding == ()
    assert "--cpu-bind" in plan.warnings[0]
    assert not any("binding exists" in w for w in plan.warnings)


def test_slurm_labels_agree_with_the_numbers() -> None:
    # Issue 11 item 3: `SLURM_NTASKS_PER_NODE=2 SLURM_CPUS_PER_TASK=1 recommend --procs auto`
    # on 2 CPUs said "N 1 usable vCPUs (all host CPUs)", "M 1 (from SLURM_NTASKS_PER_NODE)"
    # and "no limit: all 2 logical CPUs"; the JSON had limited_by "none" beside vcpus 1.

    from oversub.render.phrases import budget_limit_line
    from oversub.render.plan_formats import plan_dict
    from oversub.render.plan_text import plan_text

    info = procs_from_env({"SLURM_NTASKS_PER_NODE": "2", "SLURM_CPUS_PER_TASK": "1"})
    plan = plan_for_launcher(measured(2), info)
    assert budget_limit_line(plan.budget) == (
        "N = 1 usable vCPU (limited by launcher: SLURM_CPUS_PER_TASK=1 per task)"
    )
    d = plan_dict(plan)
    assert (d["vcpus"], d["budget"]["limited_by"], d["budget"]["launcher"]) == (
        1,
        "launcher",
        "SLURM_CPUS_PER_TASK=1",
    )
    assert (d["procs"], d["launcher_procs"]) == (1, 2)
    text = plan_text(plan, width=200)
    n_row = next(line for line in text.splitlines() if line.strip().startswith("N "))
    m_row = next(line for line in text.splitlines() if line.strip().startswith("M "))
    assert "usable vCPU (limited by launcher)" in n_row
    assert "one task of the 2 that SLURM_NTASKS_PER_NODE starts" in m_row
    assert "all host CPUs" not in text and "no limit" not in text and "1 usable vCPUs" not in text


def test_slurm_tasks_overcommit_shared_cpus() -> None:
    # 4 tasks x 8 CPUs but only 16 visible and shared: share the 16 out.
    budget = synthetic_budget(16)
    info = LauncherInfo(procs=4, source="SLURM_NTASKS_PER_NODE", per_task_cpus=8)
    assert task_vcpus(budget, info) is None
    plan = plan_for_launcher(budget, info, workers=0)
    assert (plan.procs, plan.threads_per_process) == (4, 4)
    assert "shared by all 4 tasks" in plan.warnings[0]


def test_slurm_more_tasks_than_cpus() -> None:
    budget = synthetic_budget(2)
    info = LauncherInfo(procs=4, source="SLURM_NTASKS_PER_NODE", per_task_cpus=1)
    plan = plan_for_launcher(budget, info, workers=0)
    assert plan.oversubscribed
    assert any("at most 2 processes" in w for w in plan.warnings)


def test_task_vcpus_without_cpus_per_task() -> None:
    info = LauncherInfo(procs=2, source="MPI_LOCALNRANKS", per_task_cpus=None)
    assert task_vcpus(synthetic_budget(8), info) is None


# --------------------------------------------------------------------------- SLURM steps


def test_plain_srun_step() -> None:
    # What a real `srun --ntasks=2 --cpus-per-task=1` task sees (slurm-wlm 22.05): no
    # SLURM_NTASKS_PER_NODE without --ntasks-per-node.
    env = {
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "SLURM_TASKS_PER_NODE": "2",
        "SLURM_NTASKS": "2",
        "SLURM_NODEID": "0",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_CPU_BIND_TYPE": "mask_cpu:",
        "SLURM_CPU_BIND_LIST": "0x1,0x2",
    }
    assert procs_from_env(env) == LauncherInfo(2, "SLURM_STEP_TASKS_PER_NODE", 1, 1)


def test_step_before_job_before_ntasks_per_node() -> None:
    # A step of 1 task per node inside a job of 4 per node: the step's tasks share the node.
    env = {
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    }
    assert procs_from_env(env).source == "SLURM_STEP_TASKS_PER_NODE"
    assert procs_from_env(env).procs == 1
    del env["SLURM_STEP_TASKS_PER_NODE"]
    assert (procs_from_env(env).procs, procs_from_env(env).source) == (4, "SLURM_TASKS_PER_NODE")
    del env["SLURM_TASKS_PER_NODE"]
    assert procs_from_env(env).source == "SLURM_NTASKS_PER_NODE"


@pytest.mark.parametrize(
    ("value", "node", "procs"),
    [
        ("2(x3)", "", 2),
        ("2(x3)", "2", 2),
        ("3(x2),1", "0", 3),
        ("3(x2),1", "1", 3),
        ("3(x2),1", "2", 1),
        ("1,2,3", "1", 2),
        (" 4(x2),3\n", " 2 ", 3),
        ("2(x999999999),1", "999999999", 1),
    ],
)
def test_compressed_counts_pick_this_node(value: str, node: str, procs: int) -> None:
    env = {"SLURM_TASKS_PER_NODE": value, "SLURM_NODEID": node}
    assert procs_from_env(env).procs == procs


@pytest.mark.parametrize(
    ("value", "node", "message"),
    [
        ("3(x2),1", "", "differs between nodes and SLURM_NODEID is unset"),
        ("3(x2),1", "x", "is not a node index"),
        ("3(x2),1", "-1", "is not a node index"),
        ("3(x2),1", "²", "is not a node index"),
        ("3(x2),1", "9" * 5000, "is not a node index"),
        ("3(x2),1", "3", "SLURM_NODEID=3 is beyond the 3 nodes"),
        ("2(x0)", "0", "is not a positive integer"),
        ("0(x2)", "0", "is not a positive integer"),
        ("2(x3", "0", "is not a task count"),
        ("2(x3))", "0", "is not a task count"),
        ("2(y3)", "0", "is not a task count"),
        ("2,,3", "0", "is not a task count"),
        ("²", "0", "is not a task count"),
        ("1" * 10, "0", "is not a task count"),
        ("2(x" + "9" * 10 + ")", "0", "is not a task count"),
        (",".join(["1"] * 3000), "0", "is not a task count"),
        ("2\x1b[31m", "0", "is not a task count"),
    ],
)
def test_hostile_compressed_counts(value: str, node: str, message: str) -> None:
    env = {"SLURM_STEP_TASKS_PER_NODE": value, "SLURM_NODEID": node}
    with pytest.raises(UsageError, match=message) as excinfo:
        procs_from_env(env)
    text = str(excinfo.value)
    assert "SLURM_STEP_TASKS_PER_NODE" in text or "SLURM_NODEID" in text
    assert len(text) < 300
    assert "\x1b" not in text  # repr escapes it
    assert excinfo.value.status is ExitStatus.USAGE


@pytest.mark.parametrize("value", ["²", "9" * 5000, "1e3", "0x2"])
def test_hostile_plain_counts(value: str) -> None:
    with pytest.raises(UsageError, match="is not a positive integer") as excinfo:
        procs_from_env({"LOCAL_WORLD_SIZE": value})
    assert len(str(excinfo.value)) < 300


def test_bound_step_without_cpus_per_task_plans_one_task() -> None:
    # `srun --ntasks=2` with task/affinity: no SLURM_CPUS_PER_TASK, each task bound to one
    # CPU. Sharing that 1 CPU among 2 tasks said "2 processes on 1 vCPU ... run at most 1".
    env = {
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "SLURM_CPU_BIND_TYPE": "mask_cpu:",
        "SLURM_CPU_BIND_LIST": "0x1,0x2",
    }
    info = procs_from_env(env)
    assert info.bound_cpus == 1 and info.per_task_cpus is None
    plan = plan_for_launcher(measured(1), info)
    assert (plan.procs, plan.threads_per_process, plan.launcher_procs) == (1, 1, 2)
    assert not plan.oversubscribed
    assert "srun bound each task" in plan.warnings[0]
    # The same variables, but this process sees more than its mask (its affinity was
    # widened): not known to be its own, so the M tasks share what it sees.
    plan = plan_for_launcher(measured(2), info)
    assert (plan.procs, plan.threads_per_process) == (2, 1)


@pytest.mark.parametrize(
    ("kind", "items", "bound"),
    [
        ("mask_cpu:", "0x3,0xC", 2),
        ("mask_cpu:", "0x1,0x6", 2),
        ("map_cpu:", "0,1", 1),
        ("mask_cpu:", "0x1,0x1", None),  # overlapping: not each its own
        ("mask_cpu:", "0x3,0x2", None),
        ("mask_cpu:", "0x1", None),  # one mask for two tasks
        ("mask_cpu:", "0x1,0x2,0x4", None),
        ("mask_cpu:", "0x0,0x2", None),
        ("mask_cpu:", "0xZ,0x2", None),
        ("mask_cpu:", "0x" + "f" * 2000 + ",0x2", None),
        ("map_cpu:", "0,99999999", None),
        ("map_cpu:", "0,²", None),
        ("none", "0x1,0x2", None),
        ("", "0x1,0x2", None),
        ("mask_cpu:", "", None),
    ],
)
def test_bind_list_forms(kind: str, items: str, bound: int | None) -> None:
    env = {
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "SLURM_CPU_BIND_TYPE": kind,
        "SLURM_CPU_BIND_LIST": items,
    }
    assert procs_from_env(env).bound_cpus == bound
