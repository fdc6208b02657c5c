"""The sums and peaks a run summary keeps: one accumulator per process and one for the tree.

Memory grows with the number of processes seen, not with the length of the run. Raw deltas
are summed (CPU-seconds, delay-seconds, switches) and turned into rates by the same formula
as an interval's (`rates.measures`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from oversub.analysis.ownercounts import RunOwners
from oversub.analysis.poolsize import pool_threads
from oversub.analysis.rates import Measures, measures, per_cpu_s
from oversub.core.names import Signal
from oversub.core.pcprofile import WaitShare
from oversub.core.results import (
    HostRates,
    Interval,
    ProcessRates,
    ProcessSummary,
    Totals,
)

SUSTAINED_SHARE = 0.25
"""Share of observed time a count of active threads must hold to count for the verdict."""


def sustained(seconds_at: Mapping[int, float], total: float) -> int:
    """Largest k such that k or more threads were active for SUSTAINED_SHARE of `total`."""
    best = 0
    for k in sorted(seconds_at, reverse=True):
        if sum(s for n, s in seconds_at.items() if n >= k) >= SUSTAINED_SHARE * total:
            best = k
            break
    return best


def _add(total: float | None, value: float | None) -> float | None:
    """Sum that turns unknown once any term is unknown."""
    return None if total is None or value is None else total + value


def _peak(current: float | None, value: float | None) -> float | None:
    """Maximum over known values (unknown intervals do not erase a known peak)."""
    if value is None:
        return current
    return value if current is None else max(current, value)


@dataclass
class Work:
    """Raw deltas summed over the intervals observed: the source of every mean."""

    seconds: float = 0.0
    cpu_s: float = 0.0
    delay_s: float | None = 0.0
    involuntary: int | None = 0
    voluntary: int | None = 0

    def add(self, seconds: float, rates: ProcessRates | Totals) -> None:
        """Add one interval's raw deltas (unknown once any interval's is unknown)."""
        self.seconds += seconds
        self.cpu_s += rates.cpu_s
        self.delay_s = _add(self.delay_s, rates.delay_s)
        self.involuntary = _add_count(self.involuntary, rates.involuntary_ctx)
        self.voluntary = _add_count(self.voluntary, rates.voluntary_ctx)

    def measures(self) -> Measures:
        return measures(self.seconds, self.cpu_s, self.delay_s, self.involuntary, self.voluntary)


def most(a: int | None, b: int | None) -> int | None:
    """The larger of two counts, either unknown (None)."""
    return b if a is None else a if b is None else max(a, b)


@dataclass
class ProcessAccumulator:
    """Sums and peaks of one process over the intervals it was seen in."""

    latest: ProcessRates
    work: Work = field(default_factory=Work)
    threads_peak: int = 0
    active_peak: int = 0
    active_seconds: dict[int, float] = field(default_factory=dict)
    """Observed seconds per number of active threads (bounded by the thread count)."""
    cpu_peak: float = 0.0
    demand_peak: float = 0.0
    ratio_peak: float | None = None
    involuntary_peak: float | None = None
    voluntary_peak: float | None = None
    pools: tuple[str, ...] | None = None
    thread_env: Mapping[str, str] | None = None
    live_pools: Mapping[str, int] | None = None
    live_threads: Mapping[str, int] | None = None
    parent_threads_at_start: int | None = None
    """The most threads its parent was seen to have had when it forked this process."""
    owners: RunOwners | None = None
    """Threads by owner over the run (`ownercounts.RunOwners`); None while no owner was read."""
    wait_share: WaitShare | None = None
    """Every window measured over the run, summed (`summed_share`)."""

    def add(self, p: ProcessRates, seconds: float) -> None:
        if p is self.latest and self.work.seconds > 0 and not p.exited:
            # The very same rates again (a kept reading, `rates.KeptRates`): its peaks,
            # pools, variables and owners are in already (none of its threads ran); only
            # the time it covers grows.
            self.work.add(seconds, p)
            self.active_seconds[p.active_threads] += seconds
            return
        self.latest = p
        self.parent_threads_at_start = most(self.parent_threads_at_start, p.parent_threads_at_start)
        if not p.exited and p.owners is not None:
            self.owners = self.owners or RunOwners()
            self.owners.add(p)
        self.wait_share = summed_share(self.wait_share, p.wait_share)
        self.threads_peak = max(self.threads_peak, p.threads)
        if p.pools is not None:
            self.pools = p.pools
        if p.live_pools is not None:
            # The latest setting: code may change it mid-run.
            self.live_pools, self.live_threads = p.live_pools, p.live_threads
        if p.thread_env is not None:
            self.thread_env = p.thread_env
        if p.exited:  # zero deltas by construction: the process was not observed running
            return
        self.work.add(seconds, p)
        self.active_peak = max(self.active_peak, p.active_threads)
        self.active_seconds[p.active_threads] = (
            self.active_seconds.get(p.active_threads, 0.0) + seconds
        )
        self.cpu_peak = max(self.cpu_peak, p.cpu_percent)
        self.demand_peak = max(self.demand_peak, p.demand)
        self.ratio_peak = _peak(self.ratio_peak, p.run_delay_ratio)
        self.involuntary_peak = _peak(self.involuntary_peak, p.involuntary_ctx_per_s)
        self.voluntary_peak = _peak(self.voluntary_peak, p.voluntary_ctx_per_s)

    def rates(self) -> ProcessRates:
        """The process over its observed time, with its sustained active threads."""
        s = self.work.seconds
        return self.latest._replace(
            active_threads=sustained(self.active_seconds, s),
            pools=self.pools,
            thread_env=self.thread_env,
            live_pools=self.live_pools,
            live_threads=self.live_threads,
            parent_threads_at_start=self.parent_threads_at_start,
            owner_counts=None if self.owners is None else self.owners.counts(),
            wait_share=self.wait_share,
            seconds=s,
            thread_runnable_s=(),
            thread_ids=(),
            **self.work.measures()._asdict(),
        )

    def summary(self, r: ProcessRates) -> ProcessSummary:
        """The process over the run; `r`: its `rates()` (the caller has them already)."""
        return ProcessSummary(
            pid=r.pid,
            ppid=r.ppid,
            name=r.name,
            cmdline=r.cmdline,
            threads=self.threads_peak,
            cpu_percent=r.cpu_percent,
            cpu_percent_peak=self.cpu_peak,
            demand=r.demand,
            demand_peak=self.demand_peak,
            run_delay_ratio=r.run_delay_ratio,
            run_delay_ratio_peak=self.ratio_peak,
            involuntary_ctx_per_s=r.involuntary_ctx_per_s,
            involuntary_ctx_per_s_peak=self.involuntary_peak,
            voluntary_ctx_per_s=r.voluntary_ctx_per_s,
            voluntary_ctx_per_s_peak=self.voluntary_peak,
            active_threads_peak=self.active_peak,
            pools=r.pools,
            thread_env=r.thread_env,
            exited=r.exited,
            seconds=self.work.seconds,
            live_pools=r.live_pools,
            owners=r.owner_counts,
        )


def summed_share(total: WaitShare | None, new: WaitShare | None) -> WaitShare | None:
    """A run's windows summed: `new` adds its samples when it is a window not seen yet (a
    later `at`); a measured one replaces a run of unmeasured ones, never the reverse."""
    if new is None or total is None:
        return total if new is None else new
    if new.at <= total.at:
        return total
    if new.unmeasured is not None:
        return total if total.unmeasured is None else new
    if total.unmeasured is not None:
        return new
    runtime = new.runtime if new.waiting >= total.waiting else total.runtime
    return WaitShare(
        total.samples + new.samples,
        total.waiting + new.waiting,
        runtime,
        new.at,
        total.windows + new.windows,
    )


def _add_count(total: int | None, value: int | None) -> int | None:
    """Sum of counts that turns unknown once any term is unknown."""
    return None if total is None or value is None else total + value


@dataclass
class MeanAccumulator:
    """Time-weighted mean of a host rate over the intervals where it was known."""

    weighted: float = 0.0
    seconds: float = 0.0

    def add(self, value: float | None, seconds: float) -> None:
        if value is not None:
            self.weighted += value * seconds
            self.seconds += seconds

    def mean(self) -> float | None:
        return self.weighted / self.seconds if self.seconds > 0 else None


@dataclass
class TreeAccumulator:
    """Tree sums (for means), the peak of every total, and host means."""

    work: Work = field(default_factory=Work)
    processes_s: float = 0.0
    threads_s: float = 0.0
    active_seconds: dict[int, float] = field(default_factory=dict)
    busy_seconds: dict[int, float] = field(default_factory=dict)
    """Observed seconds per number of processes busy at once."""
    peak: dict[str, float | None] = field(default_factory=dict)
    host: dict[str, MeanAccumulator] = field(default_factory=dict)
    throttled_s: float | None = None

    def add(self, iv: Interval) -> None:
        t, s = iv.totals, iv.seconds
        for name in ("outside_cpus", "steal_cpus", "psi_some", "throttled_ratio"):
            self.host.setdefault(name, MeanAccumulator()).add(getattr(iv.host, name), s)
        if iv.host.throttled_s is not None:
            self.throttled_s = (self.throttled_s or 0.0) + iv.host.throttled_s
        if t.processes == 0:
            # Nothing of the tree was alive at the end (it exited during the interval): its
            # last work was not seen, so zeros here would only dilute the means.
            return
        self.work.add(s, t)
        self.processes_s += t.processes * s
        self.threads_s += t.threads * s
        self.active_seconds[t.active_threads] = self.active_seconds.get(t.active_threads, 0.0) + s
        self.busy_seconds[t.busy_processes] = self.busy_seconds.get(t.busy_processes, 0.0) + s
        for name in _PEAKS:
            self.peak[name] = _peak(self.peak.get(name), getattr(t, name))

    def totals(self) -> Totals:
        """Means over the run; active threads is the sustained tree total (see module doc)."""
        s = self.work.seconds
        if s <= 0:
            return Totals.empty()
        return Totals(
            processes=round(self.processes_s / s),
            threads=round(self.threads_s / s),
            active_threads=sustained(self.active_seconds, s),
            involuntary_ctx_per_cpu_s=per_cpu_s(self.work.involuntary, self.work.cpu_s),
            busy_processes=sustained(self.busy_seconds, s),
            **self.work.measures()._asdict(),
        )

    def totals_peak(self) -> Totals:
        p = self.peak
        return Totals(
            processes=int(p.get("processes") or 0),
            threads=int(p.get("threads") or 0),
            active_threads=int(p.get("active_threads") or 0),
            cpu_percent=p.get("cpu_percent") or 0.0,
            demand=p.get("demand") or 0.0,
            run_delay_ratio=p.get("run_delay_ratio"),
            involuntary_ctx_per_s=p.get("involuntary_ctx_per_s"),
            voluntary_ctx_per_s=p.get("voluntary_ctx_per_s"),
            involuntary_ctx_per_cpu_s=p.get("involuntary_ctx_per_cpu_s"),
            busy_processes=int(p.get("busy_processes") or 0),
            pool_threads=int(p.get("pool_threads") or 0),
            pool_processes=int(p.get("pool_processes") or 0),
        )

    def host_rates(self) -> HostRates:
        def mean(name: str) -> float | None:
            acc = self.host.get(name)
            return None if acc is None else acc.mean()

        return HostRates(
            outside_cpus=mean("outside_cpus"),
            steal_cpus=mean("steal_cpus"),
            psi_some=mean("psi_some"),
            throttled_ratio=mean("throttled_ratio"),
            throttled_s=self.throttled_s,
        )


class Span:
    """Consecutive intervals folded: one accumulator per process seen (by pid and start
    time: a reused pid is another process) and one for the tree. A whole run is a span
    (`summary.RunSummary`), and so is each episode of it (`episodes`)."""

    def __init__(self) -> None:
        self.processes: dict[tuple[int, int | None], ProcessAccumulator] = {}
        self.tree = TreeAccumulator()
        self.t0: float | None = None
        self.t1: float | None = None
        self.unavailable: dict[Signal, None] = {}

    def add(self, iv: Interval) -> None:
        """Fold in one interval (in time order)."""
        if self.t0 is None:
            self.t0 = iv.t0
        self.t1 = iv.t1
        self.unavailable.update(dict.fromkeys(iv.unavailable))
        self.tree.add(iv)
        seconds = iv.seconds
        for p in iv.processes:
            key = (p.pid, p.start_ticks)
            acc = self.processes.get(key)
            if acc is None:
                acc = self.processes[key] = ProcessAccumulator(latest=p)
            acc.add(p, seconds)

    def whole(
        self, vcpus: int, root_pid: int
    ) -> tuple[Interval, list[tuple[ProcessAccumulator, ProcessRates]]]:
        """The span as one interval (its processes by CPU use, highest first, with their
        sustained active threads; pools as at its end), and each process's accumulator
        with its rates, in the same order. Call only after an interval was added."""
        assert self.t0 is not None and self.t1 is not None
        accs = list(self.processes.values())
        rates = [a.rates() for a in accs]
        order = sorted(range(len(accs)), key=lambda i: (-rates[i].cpu_percent, rates[i].pid))
        in_pools, with_pools = pool_threads(rates, vcpus)
        # Pools at the end of the span (their latest live sizes), not a mean over intervals.
        totals = self.tree.totals()._replace(pool_threads=in_pools, pool_processes=with_pools)
        whole = Interval(
            t0=self.t0,
            t1=self.t1,
            root_pid=root_pid,
            vcpus=vcpus,
            processes=tuple(rates[i] for i in order),
            totals=totals,
            host=self.tree.host_rates(),
            unavailable=tuple(self.unavailable),
        )
        return whole, [(accs[i], rates[i]) for i in order]


_PEAKS = (
    "processes",
    "threads",
    "active_threads",
    "cpu_percent",
    "demand",
    "run_delay_ratio",
    "involuntary_ctx_per_s",
    "voluntary_ctx_per_s",
    "involuntary_ctx_per_cpu_s",
    "busy_processes",
    "pool_threads",
    "pool_processes",
)
"""The totals whose peak over the intervals a run reports (`Summary.totals_peak`)."""
