"""`--procs auto`: how many processes share this node, according to the launcher.

Pure: the environment is passed in as a mapping (the CLI passes `os.environ`). Only the
launcher variables named here are read. The CLI does

    info = procs_from_env(os.environ)
    plan = plan_for_launcher(budget, info, workers)

and never calls `make_plan` with `info.procs` itself, because a SLURM task with
`--cpus-per-task` needs a plan per task, not a share of the node (see `plan_for_launcher`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from oversub.analysis.plans import make_plan
from oversub.core.errors import UsageError
from oversub.core.model import Budget, Plan
from oversub.core.plural import count, noun

TORCHRUN = "LOCAL_WORLD_SIZE"
SLURM_STEP_TASKS = "SLURM_STEP_TASKS_PER_NODE"
SLURM_JOB_TASKS = "SLURM_TASKS_PER_NODE"
SLURM_TASKS = "SLURM_NTASKS_PER_NODE"
SLURM_NODEID = "SLURM_NODEID"
SLURM_CPUS = "SLURM_CPUS_PER_TASK"
SLURM_BIND_TYPE = "SLURM_CPU_BIND_TYPE"
SLURM_BIND_LIST = "SLURM_CPU_BIND_LIST"
OPEN_MPI = "OMPI_COMM_WORLD_LOCAL_SIZE"
MPICH = "MPI_LOCALNRANKS"

SLURM_COUNTS: tuple[str, ...] = (SLURM_STEP_TASKS, SLURM_JOB_TASKS, SLURM_TASKS)
"""SLURM's tasks-per-node variables, most specific first. Inside a job step (`srun`)
SLURM_STEP_TASKS_PER_NODE is the step's own layout; SLURM_TASKS_PER_NODE is the job's (what
a batch script sees outside a step); SLURM_NTASKS_PER_NODE is set only with
`--ntasks-per-node`. The first two are compressed over nodes ("2(x3),1")."""

LAUNCHER_VARS: tuple[str, ...] = (TORCHRUN, *SLURM_COUNTS, OPEN_MPI, MPICH)
"""Variables that give the processes per node, in the order they are looked at.

torchrun first: it is often started inside a SLURM or MPI allocation, and then its own
count is the one that describes the Python processes sharing the CPUs."""

# SLURM writes repeated counts compressed: "4(x2)" = 4 on each of 2 nodes, and
# "4(x2),3" for uneven nodes. Bounded: a count or a repeat of at most 9 digits, at most
# 4,096 characters in all (SLURM writes one entry per run of equal nodes).
_SLURM_COUNT = re.compile(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?\Z")
_SLURM_MAX = 4096
_DIGITS = re.compile(r"[0-9]{1,9}\Z")
_MASK = re.compile(r"(?:0x)?([0-9A-Fa-f]{1,1024})\Z")


class LauncherInfo(NamedTuple):
    """What the launcher says about this node."""

    procs: int
    """Processes (tasks, ranks) started on this node, >= 1."""
    source: str
    """The variable `procs` was read from, e.g. "LOCAL_WORLD_SIZE"."""
    per_task_cpus: int | None
    """SLURM_CPUS_PER_TASK when the count came from SLURM and it is set; else None."""
    bound_cpus: int | None = None
    """When SLURM bound each of the node's `procs` tasks to CPUs of its own
    (SLURM_CPU_BIND_LIST holds `procs` disjoint masks; task/affinity does this by default,
    also without --cpus-per-task, where each task gets SLURM's default of one CPU): the
    CPUs of the largest mask. Else None."""


def _positive_int(name: str, value: str) -> int:
    text = value.strip()
    # ASCII digits only, at most 9: str.isdigit takes "²" and int() refuses 5,000 digits.
    if not _DIGITS.match(text) or int(text) < 1:
        raise UsageError(f"--procs auto: {name}={value[:80]!r} is not a positive integer")
    return int(text)


def _slurm_entries(name: str, value: str) -> list[tuple[int, int]]:
    """(count, nodes) of each entry of SLURM's compressed form ("4", "4(x2)", "4(x2),3")."""
    text = value.strip()
    bad = UsageError(f"--procs auto: {name}={value[:80]!r} is not a task count")
    if len(text) > _SLURM_MAX:
        raise bad
    entries = []
    for part in text.split(","):
        match = _SLURM_COUNT.match(part.strip())
        if match is None:
            raise bad
        count_text, repeat = match.groups()
        nodes = int(repeat) if repeat is not None else 1
        if int(count_text) < 1 or nodes < 1:
            raise UsageError(f"--procs auto: {name}={value[:80]!r} is not a positive integer")
        entries.append((int(count_text), nodes))
    return entries


def _slurm_tasks(name: str, value: str, node_id: str) -> int:
    """This node's tasks from SLURM's compressed form: the one count when every node has
    the same, else the entry of node SLURM_NODEID (0-based, in the order of the list)."""
    entries = _slurm_entries(name, value)
    counts = {count for count, _ in entries}
    if len(counts) == 1:
        (only,) = counts
        return only
    text = node_id.strip()
    if not _DIGITS.match(text):
        # This node's own count cannot be told from the list: refuse rather than guess.
        why = "is unset" if not text else f"={node_id[:20]!r} is not a node index"
        raise UsageError(
            f"--procs auto: {name}={value[:80]!r} differs between nodes and {SLURM_NODEID} "
            f"{why}; pass --procs"
        )
    index = int(text)
    for count_on, nodes in entries:
        if index < nodes:
            return count_on
        index -= nodes
    raise UsageError(
        f"--procs auto: {SLURM_NODEID}={text} is beyond the {sum(n for _, n in entries)} "
        f"nodes of {name}={value[:80]!r}; pass --procs"
    )


def _disjoint_binding(env: Mapping[str, str], procs: int) -> int | None:
    """Whether srun bound each of the node's `procs` tasks to CPUs no other task has.

    SLURM_CPU_BIND_TYPE "mask_cpu:" with SLURM_CPU_BIND_LIST "0x1,0x2" (a hex mask per
    local task) or "map_cpu:" with "0,1" (a CPU per task). Anything else, a list of another
    length, overlapping masks or a value of another form: None (not known to be bound).
    Else the CPUs of the largest mask."""
    kind = env.get(SLURM_BIND_TYPE, "").strip()
    items = env.get(SLURM_BIND_LIST, "").strip()
    if not items or len(items) > _SLURM_MAX:
        return None
    parts = items.split(",")
    if len(parts) != procs:
        return None
    masks: list[int] = []
    for part in parts:
        if kind.startswith("mask_cpu"):
            found = _MASK.match(part.strip())
            if found is None:
                return None
            masks.append(int(found.group(1), 16))
        elif kind.startswith("map_cpu"):
            if not _DIGITS.match(part.strip()) or int(part) > 65535:
                return None
            masks.append(1 << int(part))
        else:
            return None
    seen = 0
    for mask in masks:
        if mask == 0 or mask & seen:
            return None
        seen |= mask
    return max(bin(mask).count("1") for mask in masks)


def procs_from_env(env: Mapping[str, str]) -> LauncherInfo:
    """The processes per node from the first launcher variable set in `env`.

    An empty variable counts as unset (it carries no count). Raises UsageError when none
    is set, or when the first one set does not hold a positive integer.
    """
    for name in LAUNCHER_VARS:
        value = env.get(name, "")
        if not value.strip():
            continue
        if name in SLURM_COUNTS:
            procs = _slurm_tasks(name, value, env.get(SLURM_NODEID, ""))
            cpus_text = env.get(SLURM_CPUS, "")
            per_task = _positive_int(SLURM_CPUS, cpus_text) if cpus_text.strip() else None
            bound = _disjoint_binding(env, procs)
            return LauncherInfo(procs=procs, source=name, per_task_cpus=per_task, bound_cpus=bound)
        return LauncherInfo(procs=_positive_int(name, value), source=name, per_task_cpus=None)
    raise UsageError(
        "--procs auto: no launcher variable set (looked for " + ", ".join(LAUNCHER_VARS) + ")"
    )


def task_vcpus(budget: Budget, info: LauncherInfo) -> int | None:
    """The CPUs one SLURM task may use, or None when the node's budget must be shared out.

    With C = SLURM_CPUS_PER_TASK, M tasks per node and N = the budget this process sees:
    - N <= C: SLURM confined the task (cgroup or task affinity): its budget is N, and it
      is the only one of the M tasks in it.
    - N >= M*C: the task sees the whole node, but every task has room for its C CPUs:
      each task gets C, the per-task budget min(C, N / M) = C.
    - C < N < M*C: the tasks see shared CPUs that cannot hold M*C: None, and the caller
      shares N out among the M tasks as for any other launcher.
    """
    cpus_per_task = info.per_task_cpus
    if cpus_per_task is None:
        return None
    if budget.vcpus <= cpus_per_task:
        return budget.vcpus
    if budget.vcpus >= info.procs * cpus_per_task:
        return cpus_per_task
    return None


def plan_for_launcher(budget: Budget, info: LauncherInfo, workers: int = 0) -> Plan:
    """The plan for `--procs auto`.

    Without SLURM_CPUS_PER_TASK the M processes share the budget: `make_plan(budget, M, W)`.
    With it, SLURM has already given each task its own CPUs, so the plan is made for one
    task: procs = 1 on vcpus = the task's CPUs (`task_vcpus`), with the binding left to
    SLURM (`srun --cpu-bind`) unless the task is confined and its own CPUs are all it sees.
    When the tasks' CPUs do not fit in what this process sees, the budget is shared out
    among the M tasks instead and the plan says so.
    """
    per_task = task_vcpus(budget, info)
    cpus_per_task = info.per_task_cpus
    if cpus_per_task is None and info.bound_cpus and budget.vcpus <= info.bound_cpus:
        # Bound by srun without --cpus-per-task, and this task sees no more than its mask:
        # the CPUs it sees are its own.
        note = (
            f"planned for one SLURM task of {info.procs} on this node: srun bound each task "
            f"to CPUs of its own ({SLURM_BIND_LIST}), so its "
            f"{count(budget.vcpus, 'vCPU')} {noun(budget.vcpus, 'is', 'are')} its own"
        )
        return _one_task(budget, info, workers, note, bind=True)
    if cpus_per_task is None or per_task is None:
        if cpus_per_task is None:
            return make_plan(budget, info.procs, workers, procs_source=info.source)
        note = (
            f"{SLURM_CPUS}={cpus_per_task} x {count(info.procs, 'task')} = "
            f"{count(cpus_per_task * info.procs, 'CPU')}, but this task sees "
            f"{count(budget.vcpus, 'vCPU')} shared by all {count(info.procs, 'task')}: "
            "planned on that share"
        )
        return make_plan(budget, info.procs, workers, procs_source=info.source, context=(note,))
    if budget.vcpus <= cpus_per_task:
        # Confined: the CPUs this process sees are its task's own, so binding inside them
        # is exact, and N keeps the limit that confines it (affinity, cgroup).
        note = (
            f"planned for one SLURM task of {info.procs} on this node: its "
            f"{count(per_task, 'vCPU')} {noun(per_task, 'is', 'are')} its own "
            f"({SLURM_CPUS}={cpus_per_task})"
        )
        return _one_task(budget, info, workers, note, bind=True)
    # Unconfined: every task sees the same CPUs, so one binding computed here would pin
    # all tasks onto the same CPUs. SLURM must place them. N is the task's share: a limit
    # of its own, the launcher's.
    task_budget = budget._replace(
        vcpus=per_task,
        limited_by="launcher",
        launcher=f"{SLURM_CPUS}={cpus_per_task}",
    )
    note = (
        f"planned for one SLURM task of {info.procs} on this node ({SLURM_CPUS}="
        f"{cpus_per_task}); every task sees all {count(budget.vcpus, 'vCPU')}, so bind them "
        "with srun --cpu-bind=cores"
    )
    return _one_task(task_budget, info, workers, note, bind=False)


def plan_for_procs(budget: Budget, procs: int | str, workers: int, env: Mapping[str, str]) -> Plan:
    """The plan of `--procs M|auto` on `budget`: `auto` from the launcher variables of `env`
    (`plan_for_launcher`; UsageError when none is set), M as given (`make_plan`). The one
    place that branches on `auto`: `recommend`, the Python API, `run` and `check --apply`."""
    if procs == "auto":
        return plan_for_launcher(budget, procs_from_env(env), workers)
    if not isinstance(procs, int):
        raise UsageError(f"--procs {procs[:40]!r} is not a whole number of processes or 'auto'")
    return make_plan(budget, procs, workers)


def launcher_set(env: Mapping[str, str]) -> bool:
    """True when `env` holds a launcher variable (`--procs auto` reads it)."""
    return any(env.get(name, "").strip() for name in LAUNCHER_VARS)


def _one_task(budget: Budget, info: LauncherInfo, workers: int, note: str, *, bind: bool) -> Plan:
    """The plan of one task of the launcher's `info.procs` on this node."""
    return make_plan(
        budget,
        1,
        workers,
        procs_source=info.source,
        launcher_procs=info.procs,
        context=(note,),
        bind=bind,
    )


# --------------------------------------------------------------------------- identity

_INTEGER = re.compile(r"[0-9]{1,10}\Z")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}\Z")
_NODE_LIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._,\[\]-]{0,255}\Z")

IDENTITY_VARS: dict[str, re.Pattern[str]] = {
    # SLURM: the job, its step, this node's and this task's place in it.
    "SLURM_JOB_ID": _INTEGER,
    "SLURM_ARRAY_JOB_ID": _INTEGER,
    "SLURM_ARRAY_TASK_ID": _INTEGER,
    "SLURM_STEP_ID": _ID,
    "SLURM_NODEID": _INTEGER,
    "SLURM_PROCID": _INTEGER,
    "SLURM_LOCALID": _INTEGER,
    "SLURM_NNODES": _INTEGER,
    "SLURM_NTASKS": _INTEGER,
    "SLURMD_NODENAME": _ID,
    "SLURM_JOB_NODELIST": _NODE_LIST,
    # torchrun (torch.distributed.run); NODE_RANK is the usual name of its --node-rank.
    "TORCHELASTIC_RUN_ID": _ID,
    "RANK": _INTEGER,
    "LOCAL_RANK": _INTEGER,
    "WORLD_SIZE": _INTEGER,
    TORCHRUN: _INTEGER,
    "GROUP_RANK": _INTEGER,
    "NODE_RANK": _INTEGER,
    # Open MPI, MPICH / Intel MPI (PMI), PMIx.
    "OMPI_COMM_WORLD_RANK": _INTEGER,
    "OMPI_COMM_WORLD_SIZE": _INTEGER,
    "OMPI_COMM_WORLD_LOCAL_RANK": _INTEGER,
    OPEN_MPI: _INTEGER,
    "PMI_RANK": _INTEGER,
    "PMI_SIZE": _INTEGER,
    "PMIX_RANK": _INTEGER,
    "MPI_LOCALRANKID": _INTEGER,
    MPICH: _INTEGER,
}
"""The launcher variables a report may carry, each with the form its value must have.

An allow-list, never a pattern of names: an environment holds secrets, and only these ids
(integers, short ids, a SLURM node list) say where a report comes from."""


def _valid_identity(env: Mapping[str, object]) -> Iterator[tuple[str, str]]:
    for name, form in IDENTITY_VARS.items():
        value = env.get(name)
        if isinstance(value, str) and form.match(value):
            yield name, value


def launcher_identity(env: Mapping[str, object]) -> dict[str, str]:
    """The allow-listed launcher variables of `env` whose values have their form, in
    `IDENTITY_VARS` order. Anything else is left out: other names (they may hold secrets),
    empty or malformed values (at most 10 digits for a number, 64 characters for an id, 256
    for a node list). Used on oversub's own environment and on reports read back (`merge`)."""
    return dict(_valid_identity(env))
