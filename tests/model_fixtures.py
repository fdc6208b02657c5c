"""Builders of model objects for tests: realistic defaults, any field overridable.

Each `make_*` returns a frozen dataclass of `oversub.model` (budget, plan) or
`oversub.results` (rates, findings, summaries): a plausible default (two busy PyTorch-like
workers oversubscribing 2 vCPUs; see each docstring) with keyword overrides applied through
`dataclasses.replace`. A shared helper module: test modules import these, never each
other's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from oversub.model import Budget, CpuQuota, CpusetLimit, Plan
from oversub.names import Severity, Verdict
from oversub.results import (
    Assessment,
    Finding,
    HostRates,
    Interval,
    ProcessRates,
    ProcessSummary,
    Summary,
    Totals,
)


def make_quota(**overrides: Any) -> CpuQuota:
    """A cgroup v2 quota of 1.5 CPUs set by /kubepods/pod1."""
    base = CpuQuota(
        cpus=1.5,
        quota_us=150000,
        period_us=100000,
        cgroup="/kubepods/pod1",
        version=2,
        stat_path="/sys/fs/cgroup/kubepods/pod1/cpu.stat",
    )
    return replace(base, **overrides)


def make_cpuset(**overrides: Any) -> CpusetLimit:
    """A cgroup v2 cpuset of CPUs 0-1 in /kubepods/pod1."""
    return replace(CpusetLimit(cpus=(0, 1), cgroup="/kubepods/pod1", version=2), **overrides)


def make_budget(**overrides: Any) -> Budget:
    """A 4-CPU host (2 cores x 2 SMT, one NUMA node) with affinity 0-3 and no cgroup limits."""
    base = Budget(
        pid=1234,
        vcpus=4,
        logical=4,
        physical=2,
        affinity=(0, 1, 2, 3),
        quota=None,
        cpuset=None,
        numa={0: (0, 1, 2, 3)},
        cores=((0, 2), (1, 3)),
        limited_by="none",
    )
    return replace(base, **overrides)


def make_quota_budget(**overrides: Any) -> Budget:
    """The 4-CPU host under a 1.5-CPU quota: N = 1, limited by quota."""
    return make_budget(vcpus=1, quota=make_quota(), limited_by="quota", **overrides)


def make_plan(**overrides: Any) -> Plan:
    """2 processes x 2 threads on the 4-CPU budget, no workers, bound to 0-1 and 2-3."""
    env = {
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "OPENBLAS_NUM_THREADS": "2",
    }
    base = Plan(
        budget=make_budget(),
        procs=2,
        workers=0,
        threads_per_process=2,
        leftover=0,
        oversubscribed=False,
        env=env,
        worker_env={},
        binding=((0, 1), (2, 3)),
        warnings=(),
    )
    return replace(base, **overrides)


def make_process_rates(**overrides: Any) -> ProcessRates:
    """A busy worker: 2 threads, 100% CPU, demand 2, half its runnable time waiting."""
    base = ProcessRates(
        pid=2001,
        ppid=1234,
        name="python",
        cmdline="python train.py --worker",
        threads=3,
        active_threads=2,
        cpu_percent=100.0,
        demand=2.0,
        run_delay_ratio=0.5,
        involuntary_ctx_per_s=260.0,
        voluntary_ctx_per_s=3.0,
        pools=("libgomp", "torch"),
        thread_env={},
    )
    return replace(base, **overrides)


def make_totals(**overrides: Any) -> Totals:
    """Two busy workers: 200% CPU, demand 4 on 2 CPUs, delay 0.5."""
    base = Totals(
        processes=3,
        threads=7,
        active_threads=4,
        cpu_percent=200.0,
        demand=4.0,
        run_delay_ratio=0.5,
        involuntary_ctx_per_s=520.0,
        voluntary_ctx_per_s=6.0,
        involuntary_ctx_per_cpu_s=260.0,
    )
    return replace(base, **overrides)


def make_host_rates(**overrides: Any) -> HostRates:
    """A quiet host: little outside load, no steal, no throttling data."""
    base = HostRates(
        outside_cpus=0.05,
        steal_cpus=0.0,
        psi_some=0.48,
        throttled_ratio=None,
        throttled_s=None,
    )
    return replace(base, **overrides)


def make_finding(**overrides: Any) -> Finding:
    """The headline finding: two OpenMP pools each sized to every vCPU."""
    base = Finding(
        rule="oversubscribed-pools",
        severity=Severity.CRITICAL,
        verdict=Verdict.OVERSUBSCRIBED,
        message="2 processes run OpenMP pools of 2 threads each on 2 vCPUs.",
        pids=(2001, 2002),
        evidence={"demand": 4.0, "vcpus": 2, "run_delay_ratio": 0.5},
        fix="export OMP_NUM_THREADS=1 before starting the job.",
    )
    return replace(base, **overrides)


def make_assessment(**overrides: Any) -> Assessment:
    """An oversubscribed verdict with the headline finding."""
    base = Assessment(verdict=Verdict.OVERSUBSCRIBED, findings=(make_finding(),))
    return replace(base, **overrides)


def make_interval(**overrides: Any) -> Interval:
    """One second of the two-worker tree (root idle, two busy workers) on 2 vCPUs."""
    processes = (
        make_process_rates(pid=2001),
        make_process_rates(pid=2002, cpu_percent=98.5, demand=1.97),
        make_process_rates(
            pid=1234,
            ppid=1,
            name="launcher",
            cmdline="python train.py",
            threads=1,
            active_threads=0,
            cpu_percent=1.5,
            demand=0.02,
            run_delay_ratio=None,
            involuntary_ctx_per_s=None,
            voluntary_ctx_per_s=None,
            pools=None,
            thread_env=None,
        ),
    )
    base = Interval(
        t0=100.0,
        t1=101.0,
        root_pid=1234,
        vcpus=2,
        processes=processes,
        totals=make_totals(),
        host=make_host_rates(),
    )
    return replace(base, **overrides)


def make_process_summary(**overrides: Any) -> ProcessSummary:
    """A busy worker over a 10-second run."""
    base = ProcessSummary(
        pid=2001,
        ppid=1234,
        name="python",
        cmdline="python train.py --worker",
        threads=3,
        cpu_percent=99.0,
        cpu_percent_peak=100.0,
        demand=1.9,
        demand_peak=2.0,
        run_delay_ratio=0.48,
        run_delay_ratio_peak=0.52,
        involuntary_ctx_per_s=250.0,
        involuntary_ctx_per_s_peak=265.0,
        voluntary_ctx_per_s=3.0,
        voluntary_ctx_per_s_peak=5.0,
        active_threads_peak=2,
        pools=("libgomp", "torch"),
        thread_env={"OMP_NUM_THREADS": "2"},
        exited=False,
        seconds=10.0,
    )
    return replace(base, **overrides)


def make_summary(**overrides: Any) -> Summary:
    """A 10-second oversubscribed run of two workers on a 2-vCPU affinity budget."""
    base = Summary(
        root_pid=1234,
        budget=make_budget(vcpus=2, affinity=(0, 1), limited_by="affinity"),
        verdict=Verdict.OVERSUBSCRIBED,
        findings=(make_finding(),),
        processes=(
            make_process_summary(pid=2001),
            make_process_summary(pid=2002, exited=True, seconds=8.0),
        ),
        totals=make_totals(),
        totals_peak=make_totals(cpu_percent=201.0, demand=4.2, run_delay_ratio=0.55),
        host=make_host_rates(),
        samples=20,
        duration_s=10.0,
        target_exited=False,
    )
    return replace(base, **overrides)
