"""The whole run: per-process and tree means and peaks, and the run's verdict.

`RunSummary` folds intervals in as they come. It keeps one accumulator per process seen
and one for the tree, so memory grows with the number of processes, not with run length.
Each interval carries its raw deltas (CPU-seconds, delay-seconds, switches); they are
summed and divided by the time observed (`rates.measures`, the same formula as an
interval's), so means are time-weighted. An interval at the end of which no process of the tree
was alive adds nothing to the tree's means (the work done before the exit was not seen).

The run verdict is `assess()` on one whole-run `Interval` built from those sums, except
that active threads are *sustained peaks*: the most threads active at once for at least
`SUSTAINED_SHARE` of the observed time. The at-risk rules ask what can happen, so a mean
would hide a pool that runs in bursts; a single interval would let one hand-off spike of a
helper thread (a DataLoader queue feeder waiting for a CPU) count as a live pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from oversub.analysis.poolsize import pool_threads
from oversub.analysis.rates import measures, per_cpu_s
from oversub.analysis.verdict import assess
from oversub.model import Budget, Thresholds
from oversub.names import Signal
from oversub.results import (
    Assessment,
    HostRates,
    Interval,
    ProcessRates,
    ProcessSummary,
    Summary,
    Totals,
)

SUSTAINED_SHARE = 0.25
"""Share of observed time a count of active threads must hold to count for the verdict."""


def _sustained(seconds_at: Mapping[int, float], total: float) -> int:
    """Largest k such that k or more threads were active for SUSTAINED_SHARE of `total`."""
    best = 0
    for k in sorted(seconds_at, reverse=True):
        if sum(s for n, s in seconds_at.items() if n >= k) >= SUSTAINED_SHARE * total:
            best = k
            break
    return best


NO_INTERVAL_NOTE = "no complete interval was sampled"
"""Why a run that ended before a second sample is not judged (nothing could be measured)."""


def _add(total: float | None, value: float | None) -> float | None:
    """Sum that turns unknown once any term is unknown."""
    return None if total is None or value is None else total + value


def _peak(current: float | None, value: float | None) -> float | None:
    """Maximum over known values (unknown intervals do not erase a known peak)."""
    if value is None:
        return current
    return value if current is None else max(current, value)


@dataclass
class _ProcessAccumulator:
    """Sums and peaks of one process over the intervals it was seen in."""

    latest: ProcessRates
    seconds: float = 0.0
    cpu_s: float = 0.0
    delay_s: float | None = 0.0
    involuntary: int | None = 0
    voluntary: int | None = 0
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

    def add(self, p: ProcessRates, seconds: float) -> None:
        self.latest = p
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
        self.seconds += seconds
        self.cpu_s += p.cpu_s
        self.delay_s = _add(self.delay_s, p.delay_s)
        self.involuntary = _add_count(self.involuntary, p.involuntary_ctx)
        self.voluntary = _add_count(self.voluntary, p.voluntary_ctx)
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
        s = self.seconds
        return replace(
            self.latest,
            active_threads=_sustained(self.active_seconds, s),
            pools=self.pools,
            thread_env=self.thread_env,
            live_pools=self.live_pools,
            live_threads=self.live_threads,
            seconds=s,
            **measures(s, self.cpu_s, self.delay_s, self.involuntary, self.voluntary)._asdict(),
        )

    def summary(self) -> ProcessSummary:
        r = self.rates()
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
            seconds=self.seconds,
            live_pools=r.live_pools,
        )


def _add_count(total: int | None, value: int | None) -> int | None:
    """Sum of counts that turns unknown once any term is unknown."""
    return None if total is None or value is None else total + value


@dataclass
class _MeanAccumulator:
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
class _TreeAccumulator:
    """Tree sums (for means), the peak of every total, and host means."""

    seconds: float = 0.0
    cpu_s: float = 0.0
    delay_s: float | None = 0.0
    involuntary: int | None = 0
    voluntary: int | None = 0
    processes_s: float = 0.0
    threads_s: float = 0.0
    active_seconds: dict[int, float] = field(default_factory=dict)
    busy_seconds: dict[int, float] = field(default_factory=dict)
    """Observed seconds per number of processes busy at once."""
    peak: dict[str, float | None] = field(default_factory=dict)
    host: dict[str, _MeanAccumulator] = field(default_factory=dict)
    throttled_s: float | None = None

    def add(self, iv: Interval) -> None:
        t, s = iv.totals, iv.seconds
        for name in ("outside_cpus", "steal_cpus", "psi_some", "throttled_ratio"):
            self.host.setdefault(name, _MeanAccumulator()).add(getattr(iv.host, name), s)
        if iv.host.throttled_s is not None:
            self.throttled_s = (self.throttled_s or 0.0) + iv.host.throttled_s
        if t.processes == 0:
            # Nothing of the tree was alive at the end (it exited during the interval): its
            # last work was not seen, so zeros here would only dilute the means.
            return
        self.seconds += s
        self.cpu_s += t.cpu_s
        self.delay_s = _add(self.delay_s, t.delay_s)
        self.involuntary = _add_count(self.involuntary, t.involuntary_ctx)
        self.voluntary = _add_count(self.voluntary, t.voluntary_ctx)
        self.processes_s += t.processes * s
        self.threads_s += t.threads * s
        self.active_seconds[t.active_threads] = self.active_seconds.get(t.active_threads, 0.0) + s
        self.busy_seconds[t.busy_processes] = self.busy_seconds.get(t.busy_processes, 0.0) + s
        for name in _PEAKS:
            self.peak[name] = _peak(self.peak.get(name), getattr(t, name))

    def totals(self) -> Totals:
        """Means over the run; active threads is the sustained tree total (see module doc)."""
        s = self.seconds
        if s <= 0:
            return Totals.empty()
        return Totals(
            processes=round(self.processes_s / s),
            threads=round(self.threads_s / s),
            active_threads=_sustained(self.active_seconds, s),
            involuntary_ctx_per_cpu_s=per_cpu_s(self.involuntary, self.cpu_s),
            busy_processes=_sustained(self.busy_seconds, s),
            **measures(s, self.cpu_s, self.delay_s, self.involuntary, self.voluntary)._asdict(),
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


def unmeasured_summary(
    budget: Budget,
    root_pid: int,
    thresholds: Thresholds | None = None,
    *,
    note: str | None = None,
    assessment: Assessment | None = None,
    target_exited: bool = False,
    unavailable: tuple[Signal, ...] = (),
    notes: tuple[str, ...] = (),
) -> Summary:
    """A summary with no measurement behind it: a static preflight (judged by its
    `assessment`), or a run in which nothing could be measured (not judged: `note` says
    why, and is also a note of the run when given)."""
    return Summary(
        root_pid=root_pid,
        budget=budget,
        verdict=None if assessment is None else assessment.verdict,
        not_judged=(note or NO_INTERVAL_NOTE) if assessment is None else None,
        findings=() if assessment is None else assessment.findings,
        processes=(),
        totals=Totals.empty(),
        totals_peak=Totals.empty(),
        host=HostRates.unknown(),
        samples=0,
        duration_s=0.0,
        target_exited=target_exited,
        unavailable=unavailable,
        notes=notes if note is None else (*notes, note),
        thresholds=thresholds if thresholds is not None else Thresholds(),
    )


class RunSummary:
    """Accumulates intervals of one run; `result()` turns them into a `Summary`. No I/O."""

    def __init__(self, root_pid: int | None = None) -> None:
        """`root_pid`: the watched pid, so that a run with no interval still names it
        (without it, the budget's pid, which may be oversub's own)."""
        self._processes: dict[tuple[int, int | None], _ProcessAccumulator] = {}
        """By process identity: pid and start time (a reused pid is another process)."""
        self._tree = _TreeAccumulator()
        self._intervals = 0
        self._t0: float | None = None
        self._t1: float | None = None
        self._root_pid: int | None = root_pid
        self._vcpus: int | None = None
        self._unavailable: dict[Signal, None] = {}

    def add(self, interval: Interval) -> None:
        """Fold in one interval (in time order)."""
        seconds = interval.seconds
        if interval.totals.processes > 0:
            # An interval by whose end the whole tree had exited measured nothing: counting
            # it would let `check` pass a command it never saw running.
            self._intervals += 1
        if self._t0 is None:
            self._t0 = interval.t0
        self._t1 = interval.t1
        self._root_pid = interval.root_pid
        self._vcpus = interval.vcpus
        self._unavailable.update(dict.fromkeys(interval.unavailable))
        self._tree.add(interval)
        for p in interval.processes:
            key = (p.pid, p.start_ticks)
            acc = self._processes.get(key)
            if acc is None:
                acc = self._processes[key] = _ProcessAccumulator(latest=p)
            acc.add(p, seconds)

    def result(
        self,
        budget: Budget,
        thresholds: Thresholds,
        *,
        target_exited: bool,
        notes: tuple[str, ...] = (),
    ) -> Summary:
        """The run so far: means, peaks, and the verdict of the whole run.

        `samples` counts complete intervals; with none, the run is not judged: no verdict,
        and `not_judged` says that nothing could be measured.
        """
        if self._intervals == 0 or self._t0 is None or self._t1 is None:  # nothing measured
            return unmeasured_summary(
                budget,
                self._root_pid if self._root_pid is not None else budget.pid,
                thresholds,
                target_exited=target_exited,
                unavailable=tuple(self._unavailable),
                notes=notes,
            )
        accs = list(self._processes.values())
        rates = [a.rates() for a in accs]
        order = sorted(range(len(accs)), key=lambda i: (-rates[i].cpu_percent, rates[i].pid))
        in_pools, with_pools = pool_threads(rates, budget.vcpus)
        # Pools at the end of the run (their latest live sizes), not a mean over intervals.
        totals = replace(self._tree.totals(), pool_threads=in_pools, pool_processes=with_pools)
        host = self._tree.host_rates()
        whole_run = Interval(
            t0=self._t0,
            t1=self._t1,
            root_pid=self._root_pid if self._root_pid is not None else budget.pid,
            vcpus=budget.vcpus,
            processes=tuple(rates[i] for i in order),
            totals=totals,
            host=host,
            unavailable=tuple(self._unavailable),
        )
        assessment = assess(whole_run, thresholds)
        processes = [accs[i].summary() for i in order]
        if target_exited:
            # The run ended because the root exited, after the last interval saw it alive:
            # the root's line must agree with `target_exited`.
            processes = [
                replace(p, exited=True) if p.pid == whole_run.root_pid else p for p in processes
            ]
        return Summary(
            root_pid=whole_run.root_pid,
            budget=budget,
            verdict=assessment.verdict,
            findings=assessment.findings,
            processes=tuple(processes),
            totals=totals,
            totals_peak=self._tree.totals_peak(),
            host=host,
            samples=self._intervals,
            duration_s=self._t1 - self._t0,
            target_exited=target_exited,
            unavailable=tuple(self._unavailable),
            notes=notes,
            thresholds=thresholds,
        )
