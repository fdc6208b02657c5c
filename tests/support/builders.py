"""Builders of the tests' data: synthetic `TreeSample` pairs (a test says what each
thread did, the builders make two cumulative samples that differ by exactly that), the
model objects with defaults (`make_*`: override only what a test is about), and
recordings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oversub.analysis.rates import counted, interval
from oversub.core.model import Budget, CpuQuota, CpusetLimit, Plan
from oversub.core.names import Severity, Verdict
from oversub.core.results import (
    Assessment,
    Finding,
    HostRates,
    Interval,
    ProcessRates,
    ProcessSummary,
    Summary,
    Totals,
)
from oversub.core.samples import HostSample, ProcessSample, ThreadSample, ThrottleStat, TreeSample
from oversub.core.thresholds import Thresholds

NS = 1_000_000_000
ROOT = 100
"""Default root pid of a synthetic tree."""
T0 = 1000.0
"""Monotonic time of `prev`."""
BASE_CPU_NS = 50 * NS
BASE_DELAY_NS = 7 * NS
BASE_CTX = 5000


@dataclass(frozen=True)
class Load:
    """What one thread did during the interval."""

    cpu: float = 0.0
    """CPUs used on average (1.0 = one CPU busy the whole interval)."""
    delay: float = 0.0
    """Average share of the interval spent runnable but waiting."""
    involuntary: float = 0.0
    """Involuntary switches per second."""
    voluntary: float = 0.0
    """Voluntary switches per second."""


BUSY = Load(cpu=1.0)
IDLE = Load()


@dataclass(frozen=True)
class Proc:
    """A process of the synthetic tree and what its threads did."""

    pid: int
    loads: Sequence[Load] = (IDLE,)
    ppid: int = ROOT
    cmdline: str = "python train.py"
    name: str = "python"
    pools: tuple[str, ...] | None = ()
    env: Mapping[str, str] | None = field(default_factory=dict)
    start_ticks: int = 1000
    schedstat: bool = True
    ctx: bool = True
    wait: str | None = None
    """What it is blocked in (probe.waits), e.g. "futex-private" for the fork hang."""
    reaped_cpu: float = 0.0
    """CPU-seconds of children it reaped during the interval (cutime + cstime)."""
    live: Mapping[str, int] | None = None
    """Live pool sizes read from its memory (probe.livesizes); None = unknown."""
    live_threads: Mapping[str, int] | None = None
    """Threads those pools run beside the caller; by default each pool's size - 1 (started)."""
    thread_starts: Sequence[int] | None = None
    """Start time (clock ticks) of each thread of `loads`; None: unknown (as psutil)."""
    owners: Sequence[str] | None = None
    """The owner (`runtimes` key, or "unattributed") of each thread of `loads`, as
    `probe.owners` reads it; None: not read."""


def thread(
    tid: int,
    cpu_ns: int,
    delay_ns: int | None,
    vol: int | None = BASE_CTX,
    invol: int | None = BASE_CTX,
    start_ticks: int | None = None,
) -> ThreadSample:
    """One thread's cumulative counters."""
    return ThreadSample(
        tid=tid,
        state="R",
        cpu_ns=cpu_ns,
        run_delay_ns=delay_ns,
        voluntary_ctx=vol,
        involuntary_ctx=invol,
        start_ticks=start_ticks,
    )


def _sample(p: Proc, dt: float, after: bool) -> ProcessSample:
    threads = []
    for i, load in enumerate(p.loads):
        k = dt if after else 0.0
        threads.append(
            thread(
                tid=p.pid if i == 0 else p.pid * 100 + i,
                cpu_ns=BASE_CPU_NS + round(load.cpu * k * NS),
                delay_ns=BASE_DELAY_NS + round(load.delay * k * NS) if p.schedstat else None,
                vol=BASE_CTX + round(load.voluntary * k) if p.ctx else None,
                invol=BASE_CTX + round(load.involuntary * k) if p.ctx else None,
                start_ticks=None if p.thread_starts is None else p.thread_starts[i],
            )
        )
    return ProcessSample(
        pid=p.pid,
        ppid=p.ppid,
        name=p.name,
        cmdline=p.cmdline,
        start_ticks=p.start_ticks,
        threads=tuple(threads),
        pools=p.pools,
        thread_env=p.env,
        children_cpu_ns=round(p.reaped_cpu * NS) if after else 0,
        wait=p.wait,
        live_pools=p.live,
        live_threads=p.live_threads
        if p.live_threads is not None or p.live is None
        else {k: v - 1 for k, v in p.live.items()},
        owners=None
        if p.owners is None
        else {t.tid: owner for t, owner in zip(threads, p.owners, strict=True)},
    )


def process_pair(p: Proc, dt: float = 1.0) -> tuple[ProcessSample, ProcessSample]:
    """The process at the start and at the end of an interval of `dt` seconds."""
    return _sample(p, dt, after=False), _sample(p, dt, after=True)


@dataclass(frozen=True)
class Host:
    """What the host did during the interval, besides the tree."""

    outside: float | None = 0.0
    """CPUs used outside the tree (None: /proc/stat unreadable)."""
    steal: float | None = 0.0
    psi: float | None = None
    """Share of the interval with some task waiting (None: no PSI)."""
    periods: int | None = None
    """cgroup periods elapsed in the interval (None: no quota)."""
    throttled: int = 0
    """Periods throttled in the interval."""
    throttled_s: float = 0.0
    """Seconds throttled in the interval."""


def host_pair(host: Host, tree_cpu: float, dt: float) -> tuple[HostSample, HostSample]:
    """Host counters whose busy time covers the tree's `tree_cpu` CPUs plus `host.outside`."""
    base_busy, base_steal, base_psi = 900 * NS, 3 * NS, 4_000_000

    def at(k: float) -> HostSample:
        throttle = None
        if host.periods is not None:
            throttle = ThrottleStat(
                nr_periods=200 + round(host.periods * k),
                nr_throttled=20 + round(host.throttled * k),
                throttled_ns=NS + round(host.throttled_s * k * NS),
            )
        return HostSample(
            busy_ns=None
            if host.outside is None
            else base_busy + round((tree_cpu + host.outside) * dt * k * NS),
            steal_ns=None if host.steal is None else base_steal + round(host.steal * dt * k * NS),
            psi_some_us=None if host.psi is None else base_psi + round(host.psi * dt * k * 1e6),
            throttle=throttle,
        )

    return at(0.0), at(1.0)


def tree_pair(
    procs: Sequence[Proc],
    *,
    dt: float = 1.0,
    host: Host = Host(),
    root_pid: int = ROOT,
    unavailable: tuple[str, ...] = (),
    t0: float = T0,
) -> tuple[TreeSample, TreeSample]:
    """Two samples of a tree whose processes all lived through the interval from `t0`."""
    pairs = [process_pair(p, dt) for p in procs]
    tree_cpu = sum(load.cpu for p in procs for load in p.loads)
    hp, hc = host_pair(host, tree_cpu, dt)
    prev = TreeSample(
        t=t0,
        root_pid=root_pid,
        processes={a.pid: a for a, _ in pairs},
        host=hp,
        unavailable=unavailable,
    )
    curr = TreeSample(
        t=t0 + dt,
        root_pid=root_pid,
        processes={b.pid: b for _, b in pairs},
        host=hc,
        unavailable=unavailable,
    )
    return prev, curr


def without(sample: TreeSample, *pids: int) -> TreeSample:
    """The same sample with some processes missing (not yet born, or already gone)."""
    kept = {pid: p for pid, p in sample.processes.items() if pid not in pids}
    return sample._replace(processes=kept)


def analyse(
    procs: Sequence[Proc],
    vcpus: int,
    *,
    dt: float = 1.0,
    host: Host = Host(),
    thresholds: Thresholds | None = None,
    t0: float = T0,
) -> Interval:
    """`rates.interval` of a synthetic tree pair."""
    prev, curr = tree_pair(procs, dt=dt, host=host, t0=t0)
    return counted(interval(prev, curr, vcpus), thresholds or Thresholds())


def budget(vcpus: int, pid: int = ROOT) -> Budget:
    """A plain budget of `vcpus` CPUs limited by affinity."""
    return Budget(
        pid=pid,
        vcpus=vcpus,
        logical=vcpus,
        physical=None,
        affinity=tuple(range(vcpus)),
        quota=None,
        cpuset=None,
        numa={},
        cores=(),
        limited_by="affinity",
    )


def busy_workers(
    count: int,
    threads: int,
    *,
    delay: float = 0.0,
    pools: tuple[str, ...] | None = (),
    env: Mapping[str, str] | None = None,
    first_pid: int = 201,
) -> list[Proc]:
    """A root (idle, one thread) and `count` workers each running `threads` busy threads.

    Each busy thread uses `1 - delay` of a CPU and waits `delay` of the interval.
    """
    root = Proc(ROOT, (IDLE,), ppid=1, cmdline="python launch.py")
    load = Load(cpu=1.0 - delay, delay=delay, involuntary=200.0)
    workers = [
        Proc(
            first_pid + i,
            (load,) * threads,
            pools=pools,
            env=dict(env) if env is not None else {},
            cmdline=f"python worker.py {i}",
        )
        for i in range(count)
    ]
    return [root, *workers]


CAUSE_KINDS = ("polars", "ort", "openblas", "single", "gil", "app")
"""The kinds of `cause_proc`."""


def cause_proc(kind: str, pid: int) -> Proc:
    """One busy process whose own threads show one kind of cause, each busy thread half
    running, half waiting (issue 38: the causes of one target's processes):

    - polars: two threads named `polars-0`, `polars-1` (polars' pool, its threads sleep);
    - ort: ONNX Runtime's intra-op pool, attributed by its code, beside the caller (spins);
    - openblas: a busy thread no evidence names beside a default-sized OpenBLAS (spins);
    - single: one busy thread;
    - gil: three interpreter threads that yield more than they are preempted (1.2 CPUs);
    - app: three interpreter threads that are preempted (the application's own threads).
    """
    half = Load(cpu=0.5, delay=0.5, involuntary=200.0)
    if kind == "polars":
        return Proc(pid, (IDLE, half, half), owners=("python", "polars", "polars"))
    if kind == "ort":
        return Proc(pid, (half, half), owners=("python", "onnxruntime"), pools=("onnxruntime",))
    if kind == "openblas":
        return Proc(pid, (half, half), owners=("python", "unattributed"), pools=("openblas",))
    if kind == "single":
        return Proc(pid, (half,), owners=("python",))
    if kind == "gil":
        gil = Load(cpu=0.4, delay=0.4, voluntary=300.0, involuntary=50.0)
        return Proc(pid, (gil,) * 3, owners=("python",) * 3)
    if kind == "app":
        return Proc(pid, (half,) * 3, owners=("python",) * 3)
    raise ValueError(f"unknown cause kind {kind!r}")


def recording_lines(
    intervals: Sequence[Interval],
    *,
    thresholds: Thresholds | None = None,
    vcpus: int = 2,
    ending: bool = True,
    mode: str = "watch",
) -> list[str]:
    """A recording (`--record`) of `intervals`, as the recorder writes it, line by line."""
    from oversub.analysis.summary import RunSummary
    from oversub.cli.record.writer import summary_record
    from oversub.recording.format import Encoder, dumps, header_record
    from oversub.recording.types import Header

    th = thresholds or Thresholds()
    b = budget(vcpus)
    head = Header("0.1.0", "host", "2026-01-01T00:00:00.000Z", mode, ROOT, None, 0.5, b, th)
    enc = Encoder()
    lines = [dumps(header_record(head))]
    lines += [
        dumps(enc.interval(iv, f"2026-01-01T00:00:{i % 60:02d}.000Z"))
        for i, iv in enumerate(intervals)
    ]
    if ending:
        run = RunSummary(root_pid=ROOT)
        for iv in intervals:
            run.add(iv)
        lines.append(dumps(summary_record(run.result(b, th, target_exited=True))))
    return lines


def oversubscribed_run(
    n: int, *, threads: int = 2, delay: float = 0.3, dt: float = 0.5, first_pid: int = 201
) -> list[Interval]:
    """n consecutive intervals of 3 workers x `threads` busy threads (a changing load) and
    a process with a mix of busy and idle threads, on N = 2."""
    out = []
    for i in range(n):
        procs = [
            *busy_workers(3, threads, delay=delay if i % 3 else delay / 2, first_pid=first_pid),
            Proc(150, (Load(cpu=0.3), Load(cpu=0.1, delay=0.25), IDLE), ppid=ROOT),
        ]
        prev, curr = tree_pair(procs, dt=dt, t0=T0 + i * dt, host=Host(outside=0.1 * i))
        out.append(counted(interval(prev, curr, 2), Thresholds()))
    return out


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
    return base._replace(**overrides)


def make_cpuset(**overrides: Any) -> CpusetLimit:
    """A cgroup v2 cpuset of CPUs 0-1 in /kubepods/pod1."""
    return CpusetLimit(cpus=(0, 1), cgroup="/kubepods/pod1", version=2)._replace(**overrides)


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
    return base._replace(**overrides)


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
    return base._replace(**overrides)


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
    return base._replace(**overrides)


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
    return base._replace(**overrides)


def make_host_rates(**overrides: Any) -> HostRates:
    """A quiet host: little outside load, no steal, no throttling data."""
    base = HostRates(
        outside_cpus=0.05,
        steal_cpus=0.0,
        psi_some=0.48,
        throttled_ratio=None,
        throttled_s=None,
    )
    return base._replace(**overrides)


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
    return base._replace(**overrides)


def make_assessment(**overrides: Any) -> Assessment:
    """An oversubscribed verdict with the headline finding."""
    base = Assessment(verdict=Verdict.OVERSUBSCRIBED, findings=(make_finding(),))
    return base._replace(**overrides)


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
    return base._replace(**overrides)


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
    return base._replace(**overrides)


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
    return base._replace(**overrides)
