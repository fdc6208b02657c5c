"""Data types shared by probes, analysis and renderers.

Everything here is a frozen dataclass with no I/O. Probes build them from the system,
analysis turns them into results, renderers turn results into text. Mappings are plain
dicts by convention and must not be mutated after construction.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

LimitSource = Literal["affinity", "quota", "cpuset", "none"]
"""What sets the effective budget N (`limited_by` in JSON)."""


# --------------------------------------------------------------------------- budget


@dataclass(frozen=True)
class CpuQuota:
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


@dataclass(frozen=True)
class CpusetLimit:
    """The CPUs a cgroup cpuset allows."""

    cpus: tuple[int, ...]
    """Sorted CPU ids."""
    cgroup: str
    """The cgroup (path inside the hierarchy) the list was read from."""
    version: Literal[1, 2]
    """cgroup version of the cpuset controller."""


@dataclass(frozen=True)
class Budget:
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


# --------------------------------------------------------------------------- recommend


@dataclass(frozen=True)
class Plan:
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


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class ThreadSample:
    """Cumulative counters of one thread at one instant."""

    tid: int
    state: str
    """One letter from /proc/.../stat: R running/runnable, S sleeping, D disk, Z zombie, ..."""
    cpu_ns: int
    """CPU time consumed (schedstat field 1, else utime+stime)."""
    run_delay_ns: int | None
    """Time spent runnable but waiting for a CPU (schedstat field 2); None without schedstat."""
    voluntary_ctx: int | None
    """Voluntary context switches (task status); None when unreadable."""
    involuntary_ctx: int | None
    """Involuntary context switches (task status); None when unreadable."""


@dataclass(frozen=True)
class ProcessSample:
    """One process of the watched tree at one instant."""

    pid: int
    ppid: int
    name: str
    """comm (up to 15 characters)."""
    cmdline: str
    """Command line, arguments joined by spaces, truncated to 200 characters."""
    start_ticks: int
    """Start time in clock ticks after boot (stat field 22): tells a reused pid apart."""
    threads: tuple[ThreadSample, ...]
    """Threads that could be read (some may have vanished while reading)."""
    pools: tuple[str, ...] | None
    """Native thread-pool libraries mapped (e.g. "libgomp", "openblas"); None = unknown."""
    thread_env: Mapping[str, str] | None
    """Thread-related environment variables only (OMP_*, MKL_*, ...); None = unknown."""


@dataclass(frozen=True)
class ThrottleStat:
    """cgroup CPU bandwidth counters (cpu.stat), cumulative."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int


@dataclass(frozen=True)
class HostSample:
    """Host-wide counters at one instant, cumulative."""

    busy_ns: int | None
    """CPU time spent busy by all CPUs of the host (/proc/stat, not idle/iowait/steal)."""
    steal_ns: int | None
    """Time stolen by the hypervisor, all CPUs."""
    psi_some_us: int | None
    """PSI cpu `some total` in microseconds; None without PSI."""
    throttle: ThrottleStat | None
    """Throttling of the cgroup that holds the target's quota; None without a quota."""


@dataclass(frozen=True)
class TreeSample:
    """The watched tree and the host at one instant."""

    t: float
    """Monotonic seconds, taken by the probe (analysis never reads a clock)."""
    root_pid: int
    processes: Mapping[int, ProcessSample]
    """pid -> process, the root and all its descendants that could be read."""
    host: HostSample
    unavailable: tuple[str, ...] = ()
    """Signals this platform/kernel does not provide (e.g. "schedstat", "psi")."""


# --------------------------------------------------------------------------- analysis


class Verdict(str, enum.Enum):
    """Overall verdict, ordered from worst to best by `rank`."""

    OVERSUBSCRIBED = "oversubscribed"
    STARVED = "starved"
    AT_RISK = "at-risk"
    OK = "ok"

    @property
    def rank(self) -> int:
        """Higher is worse: ok 0, at-risk 1, starved 2, oversubscribed 3."""
        return {"ok": 0, "at-risk": 1, "starved": 2, "oversubscribed": 3}[self.value]


class Severity(str, enum.Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Thresholds:
    """Every number the verdict depends on; each is a CLI flag and a pyproject key."""

    margin: float = 0.15
    """Demand may exceed N by this fraction of N before it counts (measurement noise)."""
    delay_ratio: float = 0.10
    """Share of runnable time spent waiting above which threads 'wait'."""
    active_cpu: float = 0.20
    """A thread runnable (running or waiting) this share of an interval counts as active.

    Runnable, not running: under contention a busy thread gets little CPU but stays runnable."""
    throttle_ratio: float = 0.10
    """Share of cgroup periods throttled above which the quota 'bites'."""
    outside_cpu: float = 0.50
    """CPUs used outside the tree above which other processes count as the cause."""
    idle_seconds: float = 3.0
    """A forked child idle this long with OpenMP mapped is reported as hung."""


@dataclass(frozen=True)
class ProcessRates:
    """One process over one interval (or over the whole run, for summaries)."""

    pid: int
    ppid: int
    name: str
    cmdline: str
    threads: int
    """Threads at the end of the interval."""
    active_threads: int
    """Threads runnable (running or waiting for a CPU) at least `active_cpu` of the interval."""
    cpu_percent: float
    """CPU use, 100 = one vCPU."""
    demand: float
    """Average runnable threads: (Δcpu + Δrun_delay) / Δt."""
    run_delay_ratio: float | None
    """Δrun_delay / (Δrun_delay + Δcpu); None without schedstat or without any runnable time."""
    involuntary_ctx_per_s: float | None
    voluntary_ctx_per_s: float | None
    pools: tuple[str, ...] | None
    thread_env: Mapping[str, str] | None
    exited: bool = False
    """The process was gone by the end of the interval (its last counters were kept)."""


@dataclass(frozen=True)
class HostRates:
    """Host context over an interval."""

    outside_cpus: float | None
    """CPUs used by processes outside the tree (host busy minus tree), averaged over Δt."""
    steal_cpus: float | None
    """CPUs stolen by the hypervisor."""
    psi_some: float | None
    """Share of the interval in which some task on the host waited for a CPU (PSI)."""
    throttled_ratio: float | None
    """Share of cgroup periods in the interval that were throttled."""
    throttled_s: float | None
    """Seconds of throttling in the interval."""


@dataclass(frozen=True)
class Totals:
    """The tree as a whole over an interval."""

    processes: int
    threads: int
    active_threads: int
    cpu_percent: float
    demand: float
    run_delay_ratio: float | None
    involuntary_ctx_per_s: float | None
    voluntary_ctx_per_s: float | None
    involuntary_ctx_per_cpu_s: float | None
    """Involuntary switches per CPU-second used: the normalised contention signal."""


@dataclass(frozen=True)
class Interval:
    """Rates between two samples: the pure result of `analysis.rates.interval`."""

    t0: float
    t1: float
    root_pid: int
    vcpus: int
    processes: tuple[ProcessRates, ...]
    """Sorted by CPU use, highest first."""
    totals: Totals
    host: HostRates
    unavailable: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


@dataclass(frozen=True)
class Finding:
    """One rule that fired, with its evidence and the fix."""

    rule: str
    """Stable rule id, e.g. "oversubscribed-pools" (documented in README)."""
    severity: Severity
    verdict: Verdict
    """The verdict this finding argues for (hazards may argue for at-risk)."""
    message: str
    """One sentence."""
    pids: tuple[int, ...]
    evidence: Mapping[str, float | int | str | None]
    """The numbers that triggered the rule."""
    fix: str
    """What to change, concretely."""


@dataclass(frozen=True)
class Assessment:
    """Verdict and findings for an interval or a run."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    """Worst first."""


@dataclass(frozen=True)
class ProcessSummary:
    """One process over the whole run: mean and peak of each metric."""

    pid: int
    ppid: int
    name: str
    cmdline: str
    threads: int
    """Peak thread count."""
    cpu_percent: float
    cpu_percent_peak: float
    demand: float
    demand_peak: float
    run_delay_ratio: float | None
    run_delay_ratio_peak: float | None
    involuntary_ctx_per_s: float | None
    involuntary_ctx_per_s_peak: float | None
    voluntary_ctx_per_s: float | None
    voluntary_ctx_per_s_peak: float | None
    active_threads_peak: int
    pools: tuple[str, ...] | None
    thread_env: Mapping[str, str] | None
    exited: bool
    seconds: float
    """How long the process was observed."""


@dataclass(frozen=True)
class Summary:
    """A whole `watch`/`check` run (the `--format json` object)."""

    root_pid: int
    budget: Budget
    verdict: Verdict
    findings: tuple[Finding, ...]
    processes: tuple[ProcessSummary, ...]
    totals: Totals
    """Tree totals over the whole run (means)."""
    totals_peak: Totals
    """Peak of each total over the intervals."""
    host: HostRates
    """Host context over the whole run."""
    samples: int
    duration_s: float
    target_exited: bool
    unavailable: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
