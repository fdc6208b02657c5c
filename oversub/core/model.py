"""Data types shared by probes, analysis and renderers: the budget and the plan.

Samples live in `oversub.core.samples`, analysis results in `oversub.core.results` and the
thresholds beside the settings table in `oversub.core.settings`; the split keeps `oversub
recommend --format env` (run inside launch scripts) from creating ~20 record types it never
uses.

Everything here is an immutable record (a NamedTuple: docs/development.md, Performance,
says why) with no I/O; `_replace` makes a changed copy. Probes build them from the system,
analysis turns them into results, renderers turn results into text. Mappings are plain
dicts by convention and must not be mutated after construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

LimitSource = Literal["affinity", "quota", "cpuset", "launcher", "none"]
"""What sets the effective budget N (`limited_by` in JSON). "launcher": a launcher's
per-task share (SLURM_CPUS_PER_TASK) narrower than what the process sees."""

MAX_VCPUS = 65536
"""The largest budget N accepted as input (`--cpus`, `cpus=`): no Linux kernel runs more CPUs
(NR_CPUS tops out at 8192); a larger N is a typo, and planning bindings for it only burns memory."""


# --------------------------------------------------------------------------- budget


class CpuQuota(NamedTuple):
    """The tightest cgroup CPU bandwidth limit on the path from a process's cgroup to the root."""

    cpus: float
    """Exact quota in CPUs (quota / period), e.g. 1.5."""
    quota_us: int
    """Quota per period, microseconds."""
    period_us: int
    """Period, microseconds."""
    cgroup: str
    """The cgroup (path inside the hierarchy, e.g. "/kubepods/pod1") that sets this quota."""
    version: Literal[1, 2]
    """cgroup version of the controller that holds it."""
    stat_path: str | None
    """Filesystem path of that cgroup's `cpu.stat` (throttling counters), if readable."""


class CpusetLimit(NamedTuple):
    """The CPUs a cgroup cpuset allows."""

    cpus: tuple[int, ...]
    """Sorted CPU ids."""
    cgroup: str
    """The cgroup (path inside the hierarchy) the list was read from."""
    version: Literal[1, 2]
    """cgroup version of the cpuset controller."""


class Budget(NamedTuple):
    """How many vCPUs a process may really use, and why."""

    pid: int
    """The process the budget was measured for."""
    vcpus: int
    """Effective N: the tightest limit, an integer >= 1 (fractional quotas round down)."""
    logical: int
    """Logical CPUs online on the host."""
    physical: int | None
    """Physical cores on the host (None when the platform does not say)."""
    affinity: tuple[int, ...]
    """CPU ids the process may be scheduled on (sched_getaffinity)."""
    quota: CpuQuota | None
    """Tightest cgroup CPU quota, or None when unlimited or unknown."""
    cpuset: CpusetLimit | None
    """cgroup cpuset, or None when none applies or it is unknown."""
    numa: Mapping[int, tuple[int, ...]]
    """NUMA node id -> its CPU ids (empty when the platform does not say)."""
    cores: tuple[tuple[int, ...], ...]
    """SMT sibling groups: the logical CPUs of each physical core, sorted by first CPU."""
    limited_by: LimitSource
    """Which limit sets `vcpus`."""
    notes: tuple[str, ...] = ()
    """What could not be read, and what that means (degradations, not errors)."""
    cpu_model: str | None = None
    """CPU model name (only with `--detail`)."""
    cpu_flags: tuple[str, ...] = ()
    """CPU feature flags (only with `--detail`)."""
    launcher: str | None = None
    """The launcher setting that sets N when `limited_by` is "launcher", e.g.
    "SLURM_CPUS_PER_TASK=1"; None otherwise."""
    cgroup: str | None = None
    """The budget of a cgroup target (`--cgroup`, `--all`): its path in the hierarchy ("/"
    for the whole node); `pid` is then one of its processes, or 0 while it has none."""

    @property
    def given(self) -> bool:
        """A budget given as a count (`--cpus N`, `cpus=`), not measured: pid 0 marks it
        (`analysis.plans.synthetic_budget`). Its CPU ids are not this machine's."""
        return self.pid == 0 and self.cgroup is None


# --------------------------------------------------------------------------- recommend


class Plan(NamedTuple):
    """A thread plan for M processes (each with W single-thread helpers) on a budget."""

    budget: Budget
    """The budget the plan divides."""
    procs: int
    """M: main processes sharing the budget."""
    workers: int
    """W: single-thread helper processes per main process (DataLoader/pool workers)."""
    threads_per_process: int
    """T: threads for each main process's native pools, >= 1."""
    leftover: int
    """N - M*(T + W): CPUs not handed out (negative when oversubscribed)."""
    oversubscribed: bool
    """True when even this plan needs more threads than N (M*(T+W) > N; M > N when W = 0)."""
    env: Mapping[str, str]
    """Thread variables for the main processes (OMP_NUM_THREADS=T, ...)."""
    worker_env: Mapping[str, str]
    """Thread variables for the helper workers (all 1); empty when W = 0."""
    binding: tuple[tuple[int, ...], ...]
    """One CPU list per main process (its workers share it); empty when no sensible plan."""
    warnings: tuple[str, ...]
    """Plain-language warnings (M > N, workers eat the budget, ...)."""
    procs_source: str | None = None
    """Launcher variable M came from with `--procs auto` (e.g. "LOCAL_WORLD_SIZE")."""
    launcher_procs: int | None = None
    """Processes the launcher starts on this node, when the plan is for one of them (a
    SLURM task with its own CPUs: `procs` is 1 and this is SLURM_NTASKS_PER_NODE)."""
