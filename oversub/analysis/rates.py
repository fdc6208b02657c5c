"""Rates between two samples of a process tree: CPU, demand, run delay, context switches.

Pure arithmetic on two `TreeSample`s; the probe took both, and its clock stamped them.
Every thread is, at each instant, running, runnable-but-waiting or sleeping, so over an
interval of Δt seconds, summed over threads:

- CPU% = Δcpu / Δt * 100 (100 = one vCPU busy all the time);
- demand = (Δcpu + Δrun_delay) / Δt = the average number of runnable threads;
- run delay ratio = Δrun_delay / (Δrun_delay + Δcpu) = the share of runnable time spent waiting.

Missing counters (no schedstat, unreadable status, no PSI, no quota) give None, never a
crash and never a silent zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from oversub.analysis.forktime import parent_threads
from oversub.analysis.ownercounts import with_floor
from oversub.analysis.poolsize import pool_threads
from oversub.core.names import Signal
from oversub.core.results import HostRates, Interval, ProcessRates, Totals
from oversub.core.samples import HostSample, ProcessSample, ThreadSample, TreeSample
from oversub.core.thresholds import Thresholds

_NS = 1_000_000_000


class _Delta(NamedTuple):
    """Counter changes of one process over the interval, summed over its threads."""

    cpu_ns: int
    run_delay_ns: int | None
    voluntary: int | None
    involuntary: int | None
    runnable_ns: tuple[int, ...] = ()
    """Per thread: CPU time plus run delay (what decides whether it was active)."""
    switches: tuple[tuple[int, int], ...] = ()
    """Per thread: (voluntary, involuntary) switches; empty when any is unknown."""


def _counter_delta(prev: int | None, curr: int | None, reused: bool) -> int | None:
    """Δ of one cumulative counter; the full value when the thread is new or its tid reused."""
    if curr is None:
        return None
    if reused:
        return curr
    if prev is None:
        return None
    return curr - prev


def _thread_delta(
    prev: ThreadSample | None, curr: ThreadSample, dt_ns: int
) -> tuple[int, int | None, int | None, int | None]:
    """(Δcpu, Δrun_delay, Δvoluntary, Δinvoluntary) of one thread.

    A thread absent from `prev` started within the interval, so all its counters are new.
    A counter that went down means the tid was reused by a new thread: its counters are new
    too. A thread can neither run nor wait longer than the interval, so both are capped at
    Δt; this bounds the error when a thread older than the interval is first seen.
    """
    reused = prev is None or any(
        c is not None and p is not None and c < p
        for p, c in (
            (prev.cpu_ns, curr.cpu_ns),
            (prev.run_delay_ns, curr.run_delay_ns),
            (prev.voluntary_ctx, curr.voluntary_ctx),
            (prev.involuntary_ctx, curr.involuntary_ctx),
        )
    )
    p = prev if prev is not None else curr  # unused when reused
    cpu = _counter_delta(p.cpu_ns, curr.cpu_ns, reused)
    cpu_ns = min(cpu if cpu is not None else 0, dt_ns)
    delay = _counter_delta(p.run_delay_ns, curr.run_delay_ns, reused)
    if delay is not None:
        delay = min(delay, dt_ns - cpu_ns)
    return (
        cpu_ns,
        delay,
        _counter_delta(p.voluntary_ctx, curr.voluntary_ctx, reused),
        _counter_delta(p.involuntary_ctx, curr.involuntary_ctx, reused),
    )


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    """Sum, or None when any term is unknown (a partial sum would undercount silently)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _process_delta(prev: ProcessSample | None, curr: ProcessSample, dt_ns: int) -> _Delta:
    """Counter changes of a process; `prev` is None when the process is new in the interval."""
    if prev is curr:
        # The very same reading twice (node mode keeps an idle process's last reading):
        # nothing ran, nothing waited; unknown counters stay unknown.
        return _unchanged(curr)
    before = {t.tid: t for t in prev.threads} if prev is not None else {}
    per_thread = [_thread_delta(before.get(t.tid), t, dt_ns) for t in curr.threads]
    runnable = tuple(d[0] + (d[1] or 0) for d in per_thread)
    switches = tuple((d[2], d[3]) for d in per_thread if d[2] is not None and d[3] is not None)
    return _Delta(
        switches=switches if len(switches) == len(per_thread) else (),
        cpu_ns=sum(d[0] for d in per_thread),
        run_delay_ns=_sum_or_none(d[1] for d in per_thread),
        voluntary=_sum_or_none(d[2] for d in per_thread),
        involuntary=_sum_or_none(d[3] for d in per_thread),
        runnable_ns=runnable,
    )


def _unchanged(p: ProcessSample) -> _Delta:
    """Zero deltas of a process whose reading did not change (one pass over its threads:
    most processes of a node, every interval)."""
    delay = voluntary = involuntary = True
    for t in p.threads:
        delay = delay and t.run_delay_ns is not None
        voluntary = voluntary and t.voluntary_ctx is not None
        involuntary = involuntary and t.involuntary_ctx is not None
    n = len(p.threads)
    return _Delta(
        cpu_ns=0,
        run_delay_ns=0 if delay else None,
        voluntary=0 if voluntary else None,
        involuntary=0 if involuntary else None,
        runnable_ns=(0,) * n,
        switches=((0, 0),) * n if voluntary and involuntary else (),
    )


def delay_ratio(delay: float | None, cpu: float) -> float | None:
    """Share of runnable time spent waiting (any one unit for both); None when unknown or
    nothing was runnable."""
    if delay is None or delay + cpu <= 0:
        return None
    return delay / (delay + cpu)


def per_s(count: float | None, seconds: float) -> float | None:
    """A count per second; None when the count is unknown or no time passed."""
    return None if count is None or seconds <= 0 else count / seconds


class Measures(NamedTuple):
    """The raw deltas of a process or a tree over `seconds`, and the rates they give: the one
    formula behind every `ProcessRates` and `Totals` (of an interval and of a whole run)."""

    cpu_percent: float
    demand: float
    run_delay_ratio: float | None
    involuntary_ctx_per_s: float | None
    voluntary_ctx_per_s: float | None
    cpu_s: float
    delay_s: float | None
    involuntary_ctx: int | None
    voluntary_ctx: int | None


def measures(
    seconds: float,
    cpu_s: float,
    delay_s: float | None,
    involuntary: int | None,
    voluntary: int | None,
) -> Measures:
    """Rates from raw deltas over `seconds` (none when no time was observed)."""
    return Measures(
        cpu_percent=cpu_s / seconds * 100.0 if seconds > 0 else 0.0,
        demand=(cpu_s + (delay_s or 0.0)) / seconds if seconds > 0 else 0.0,
        run_delay_ratio=delay_ratio(delay_s, cpu_s),
        involuntary_ctx_per_s=per_s(involuntary, seconds),
        voluntary_ctx_per_s=per_s(voluntary, seconds),
        cpu_s=cpu_s,
        delay_s=delay_s,
        involuntary_ctx=involuntary,
        voluntary_ctx=voluntary,
    )


def _delta_measures(d: _Delta, dt_s: float) -> Measures:
    delay = None if d.run_delay_ns is None else d.run_delay_ns / _NS
    return measures(dt_s, d.cpu_ns / _NS, delay, d.involuntary, d.voluntary)


CARRIED = (
    "pid",
    "ppid",
    "name",
    "cmdline",
    "pools",
    "thread_env",
    "live_pools",
    "live_threads",
    "wait",
    "start_ticks",
    "owners",
    "wait_share",
)
"""What a process's rates carry over from its sample as read: what it is, not what it did."""


def _process_rates(
    p: ProcessSample, d: _Delta, dt_s: float, exited: bool, sample: TreeSample
) -> ProcessRates:
    """The rates of `p` in `sample` (whose processes hold its parent) from its deltas."""
    return ProcessRates(
        parent_threads_at_start=parent_threads(p.pid, p.ppid, p.start_ticks, sample),
        threads=len(p.threads),
        active_threads=0,
        thread_runnable_s=tuple(r / _NS for r in d.runnable_ns),
        thread_ids=tuple(t.tid for t in p.threads) if d.runnable_ns else (),
        thread_switches=d.switches if d.runnable_ns else (),
        exited=exited,
        **{name: getattr(p, name) for name in CARRIED},
        **_delta_measures(d, dt_s)._asdict(),
    )


def _exited_delta(p: ProcessSample) -> _Delta:
    """Zero deltas for a process gone by the end: its work after `prev` was not seen."""
    return _unchanged(p)._replace(runnable_ns=(), switches=())


BUSY_DEMAND = 0.5
"""A process keeping at least half a thread runnable counts as busy (one of the M sharing N)."""


def _change(prev: int | None, curr: int | None) -> int | None:
    """Δ of a host counter; None when unknown or when it went backwards (counter reset)."""
    if prev is None or curr is None or curr < prev:
        return None
    return curr - prev


def _host_rates(prev: HostSample, curr: HostSample, tree_cpu_ns: int, dt_s: float) -> HostRates:
    busy = _change(prev.busy_ns, curr.busy_ns)
    # Host busy time includes the tree's own CPU; what is left ran outside it. Clamp at 0:
    # the two counters are read at slightly different instants. `tree_cpu_ns` includes the
    # CPU of children reaped in the interval, so short-lived workers are not "outside".
    # oversub's own sampling is not "other load" either (0.2 CPU at a 0.1 s interval on
    # 3,000 threads would turn a healthy tree into a starved one).
    observer = _change(prev.observer_cpu_ns, curr.observer_cpu_ns) or 0
    outside = None if busy is None else max(0.0, (busy - tree_cpu_ns - observer) / _NS / dt_s)
    steal = _change(prev.steal_ns, curr.steal_ns)
    psi = _change(prev.psi_some_us, curr.psi_some_us)
    throttled_ratio: float | None = None
    throttled_s: float | None = None
    if prev.throttle is not None and curr.throttle is not None:
        periods = _change(prev.throttle.nr_periods, curr.throttle.nr_periods)
        throttled = _change(prev.throttle.nr_throttled, curr.throttle.nr_throttled)
        if periods and throttled is not None:
            throttled_ratio = throttled / periods
        throttled_ns = _change(prev.throttle.throttled_ns, curr.throttle.throttled_ns)
        throttled_s = None if throttled_ns is None else throttled_ns / _NS
    return HostRates(
        outside_cpus=outside,
        steal_cpus=None if steal is None else steal / _NS / dt_s,
        # A share of time, at most 1: the host is read after the tree's scan and the interval
        # is stamped before it, so a scan slower than the last one (a saturated machine: PSI
        # near 100 %) stretches the counter's delta past dt ("PSI some 101%").
        psi_some=None if psi is None else min(1.0, psi / (dt_s * 1e6)),
        throttled_ratio=throttled_ratio,
        throttled_s=throttled_s,
    )


def _totals(live: list[tuple[ProcessRates, _Delta]], dt_s: float, vcpus: int) -> Totals:
    """Sums over live processes (exited ones have zero deltas by construction)."""
    deltas = [d for _, d in live]
    total = _Delta(
        cpu_ns=sum(d.cpu_ns for d in deltas),
        run_delay_ns=_sum_or_none(d.run_delay_ns for d in deltas),
        involuntary=_sum_or_none(d.involuntary for d in deltas),
        voluntary=_sum_or_none(d.voluntary for d in deltas),
    )
    return tree_totals(
        _delta_measures(total, dt_s),
        [r for r, _ in live],
        vcpus,
        processes=len(live),
        threads=sum(r.threads for r, _ in live),
        active=0,
    )


def tree_totals(
    m: Measures, live: list[ProcessRates], vcpus: int, *, processes: int, threads: int, active: int
) -> Totals:
    """The tree's `Totals` from its summed raw deltas `m` and its live processes: the one
    constructor behind a live interval, a recorded one read back and two merged ones."""
    in_pools, with_pools = pool_threads(live, vcpus)
    return Totals(
        processes=processes,
        threads=threads,
        active_threads=active,
        involuntary_ctx_per_cpu_s=per_cpu_s(m.involuntary_ctx, m.cpu_s),
        busy_processes=sum(1 for p in live if p.demand >= BUSY_DEMAND),
        pool_threads=in_pools,
        pool_processes=with_pools,
        **m._asdict(),
    )


def per_cpu_s(involuntary: float | None, cpu_s: float) -> float | None:
    """Involuntary switches per CPU-second used: the normalised contention signal."""
    return involuntary / cpu_s if involuntary is not None and cpu_s > 0 else None


def _reaped_cpu_ns(prev: TreeSample, curr: TreeSample) -> int:
    """CPU of children the tree's processes reaped during the interval (cutime + cstime).

    A child that starts and exits between two samples is never seen; its parent's counter
    is. It may also hold CPU an earlier interval already saw (a child observed, then
    reaped), which only makes the outside estimate smaller: the safe side for blaming others.
    """
    total = 0
    for pid, p in curr.processes.items():
        before = prev.processes.get(pid)
        if before is not None and before.start_ticks == p.start_ticks:
            total += max(0, p.children_cpu_ns - before.children_cpu_ns)
    return total


class KeptRates:
    """The rates of kept readings, carried from one interval of a run to the next.

    A probe that keeps a process's last reading (nothing of it ran: `probe.sampler`) hands
    the very same `ProcessSample` object in both samples, and its rates are then zero
    deltas that depend on that object alone, and on its parent's reading (what
    `parent_threads_at_start` counts). Interval after interval they are the same, so a run
    that follows a target computes them once: one `KeptRates` per target, handed to every
    `interval` of its run (most processes of a node or an idle tree, every second).
    An entry lives while its process is kept; one not used in an interval is dropped.
    """

    __slots__ = ("_last", "_next")

    def __init__(self) -> None:
        self._last: dict[int, _Kept] = {}
        self._next: dict[int, _Kept] = {}

    def get(self, p: ProcessSample, parent: ProcessSample | None) -> _Kept | None:
        kept = self._last.get(p.pid)
        if kept is None or kept.sample is not p or kept.parent is not parent:
            return None
        self._next[p.pid] = kept
        return kept

    def put(self, kept: _Kept) -> None:
        self._next[kept.sample.pid] = kept

    def floored(self, p: ProcessRates, floor_ns: float) -> ProcessRates:
        """`ownercounts.with_floor(p, floor_ns)`, computed once for the rates of a kept
        reading and then the same object (what a run summary and the NDJSON encoder take
        as the same again): zero deltas, none of whose threads any floor above zero makes
        active. Call it after the `interval` that made `p`."""
        kept = self._last.get(p.pid)
        if kept is None or kept.rates is not p or floor_ns <= 0:
            return with_floor(p, floor_ns)
        floored = kept.floored
        if floored is None:
            floored = with_floor(p, floor_ns)
            self._last[p.pid] = kept._replace(floored=floored)
        return floored

    def end_interval(self) -> None:
        self._last, self._next = self._next, {}


class _Kept(NamedTuple):
    sample: ProcessSample
    parent: ProcessSample | None
    rates: ProcessRates
    delta: _Delta
    floored: ProcessRates | None = None
    """`rates` under the thresholds' floor (`KeptRates.floored`), once computed."""


def _lacks_delay(p: ProcessSample) -> bool:
    return any(t.run_delay_ns is None for t in p.threads)


def interval(
    prev: TreeSample, curr: TreeSample, vcpus: int, kept: KeptRates | None = None
) -> Interval:
    """Rates of the tree between two samples of it: measured, no threshold applied (its
    active threads are 0 until `counted` counts them under the thresholds of a verdict).

    Processes in `curr` are matched to `prev` by pid and start time (a pid whose start time
    changed is a new process: the old one is gone and the pid was reused). A process new in
    `curr` started within the interval and counts its full counters. A process only in `prev`
    (or whose pid now belongs to a new process) is kept with `exited=True` and zero deltas.
    Totals count live processes and threads.
    "schedstat" is added to `unavailable` when any thread lacks run delay.

    `kept`: the memo of a run that follows this target (`KeptRates`); the result is the
    same without it.

    Raises ValueError when `curr` is not later than `prev`: that is a caller bug.
    """
    dt_s = curr.t - prev.t
    if dt_s <= 0:
        raise ValueError(f"samples out of order: t0={prev.t} t1={curr.t}")
    dt_ns = round(dt_s * _NS)

    live: list[tuple[ProcessRates, _Delta]] = []
    no_delay = False
    for pid, p in curr.processes.items():
        before = prev.processes.get(pid)
        if before is p and kept is not None:
            parent = curr.processes.get(p.ppid)
            hit = kept.get(p, parent)
            if hit is None:
                d = _unchanged(p)
                hit = _Kept(p, parent, _process_rates(p, d, dt_s, False, curr), d)
                kept.put(hit)
            live.append((hit.rates, hit.delta))
            no_delay = no_delay or hit.delta.run_delay_ns is None
            continue
        if before is not None and before.start_ticks != p.start_ticks:
            before = None
        d = _process_delta(before, p, dt_ns)
        live.append((_process_rates(p, d, dt_s, False, curr), d))
        no_delay = no_delay or _lacks_delay(p)
    if kept is not None:
        kept.end_interval()

    gone_rates = [
        _process_rates(p, _exited_delta(p), dt_s, True, prev)
        for pid, p in prev.processes.items()
        # Gone, or its pid already reused by a new process: either way this one exited.
        if pid not in curr.processes or curr.processes[pid].start_ticks != p.start_ticks
    ]

    totals = _totals(live, dt_s, vcpus)
    tree_cpu = sum(d.cpu_ns for _, d in live)
    unavailable = list(dict.fromkeys((*prev.unavailable, *curr.unavailable)))
    no_delay = no_delay or any(
        _lacks_delay(p)
        for pid, p in prev.processes.items()
        if curr.processes.get(pid) is not p  # the same reading: looked at above
    )
    if no_delay and Signal.SCHEDSTAT not in unavailable:
        unavailable.append(Signal.SCHEDSTAT)
    processes = sorted(
        [r for r, _ in live] + gone_rates, key=lambda r: (-r.cpu_percent, r.exited, r.pid)
    )
    return Interval(
        t0=prev.t,
        t1=curr.t,
        root_pid=curr.root_pid,
        vcpus=vcpus,
        processes=tuple(processes),
        totals=totals,
        host=_host_rates(prev.host, curr.host, tree_cpu + _reaped_cpu_ns(prev, curr), dt_s),
        unavailable=tuple(unavailable),
    )


def counted(iv: Interval, thresholds: Thresholds, kept: KeptRates | None = None) -> Interval:
    """A measured interval (live from `interval`, or recorded) with its active threads
    counted under `thresholds`: what a verdict judges and every format shows.

    Only the active threads depend on thresholds (a thread is active when it was runnable at
    least `active_cpu` of the interval: `ProcessRates.thread_runnable_s`), and through them
    the pool threads of the totals; every other number is a raw delta or a rate of it.
    `kept`: the memo the interval was made with; the result is the same without it."""
    # Whole nanoseconds, as the kernel counts them.
    floor_ns = thresholds.active_cpu * iv.seconds * _NS
    floor = with_floor if kept is None else kept.floored
    processes = tuple(floor(p, floor_ns) for p in iv.processes)
    live = [p for p in processes if not p.exited]
    in_pools, with_pools = pool_threads(live, iv.vcpus)
    totals = iv.totals._replace(
        active_threads=sum(p.active_threads for p in live),
        pool_threads=in_pools,
        pool_processes=with_pools,
    )
    return iv._replace(processes=processes, totals=totals)
