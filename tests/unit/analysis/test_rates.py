"""Rates between two synthetic samples: CPU, demand, run delay, switches, host context."""

from __future__ import annotations

from itertools import pairwise

import pytest

from oversub.analysis.rates import KeptRates, counted, interval
from oversub.core.results import HostRates, ProcessRates
from oversub.core.samples import ProcessSample, TreeSample
from oversub.core.thresholds import Thresholds
from tests.support.builders import (
    BUSY,
    IDLE,
    NS,
    ROOT,
    Host,
    Load,
    Proc,
    analyse,
    busy_workers,
    thread,
    tree_pair,
    without,
)

TH = Thresholds()


def _by_pid(processes: tuple[ProcessRates, ...]) -> dict[int, ProcessRates]:
    return {p.pid: p for p in processes}


def test_two_pools_on_two_cpus_give_demand_four_and_half_waiting() -> None:
    iv = analyse(busy_workers(2, 2, delay=0.5), vcpus=2, dt=2.0)
    worker = next(p for p in iv.processes if p.pid == 201)
    assert worker.cpu_percent == pytest.approx(100.0)
    assert worker.demand == pytest.approx(2.0)
    assert worker.run_delay_ratio == pytest.approx(0.5)
    assert worker.active_threads == 2
    assert worker.involuntary_ctx_per_s == pytest.approx(400.0)
    assert iv.totals.demand == pytest.approx(4.0)
    assert iv.totals.cpu_percent == pytest.approx(200.0)
    assert iv.totals.run_delay_ratio == pytest.approx(0.5)
    assert iv.totals.active_threads == 4
    assert iv.totals.processes == 3
    assert iv.totals.threads == 5
    # 800 switches/s over 2 CPU-seconds per second.
    assert iv.totals.involuntary_ctx_per_cpu_s == pytest.approx(400.0)
    assert iv.seconds == pytest.approx(2.0)
    assert iv.vcpus == 2
    assert iv.unavailable == ()


def test_processes_sorted_by_cpu_highest_first() -> None:
    procs = [
        Proc(ROOT, (IDLE,), ppid=1),
        Proc(201, (Load(cpu=0.3),)),
        Proc(202, (Load(cpu=0.9),)),
        Proc(203, (Load(cpu=0.6),)),
    ]
    iv = analyse(procs, vcpus=2)
    assert [p.pid for p in iv.processes] == [202, 203, 201, ROOT]


@pytest.mark.parametrize("dt", [0.0, -1.0])
def test_interval_not_later_than_previous_is_a_caller_bug(dt: float) -> None:
    prev, curr = tree_pair(busy_workers(1, 1))
    with pytest.raises(ValueError):
        counted(interval(prev, curr._replace(t=prev.t + dt), 2), TH)


@pytest.mark.parametrize(("cpu", "active"), [(0.19, 0), (0.20, 1), (0.21, 1)])
def test_active_thread_boundary(cpu: float, active: int) -> None:
    iv = analyse([Proc(ROOT, (Load(cpu=cpu),), ppid=1)], vcpus=2)
    assert iv.processes[0].active_threads == active
    assert iv.totals.active_threads == active


@pytest.mark.parametrize(("delay", "active"), [(0.09, 0), (0.11, 1)])
def test_waiting_counts_towards_active(delay: float, active: int) -> None:
    # 10% running + 11% waiting = runnable 21% of the interval: a starved busy thread is active.
    iv = analyse([Proc(ROOT, (Load(cpu=0.10, delay=delay),), ppid=1)], vcpus=2)
    assert iv.processes[0].active_threads == active


def _fresh(pid: int, cpu_s: float, delay_s: float, ticks: int = 1000) -> ProcessSample:
    """A process whose one thread has small counters: it started recently."""
    t = thread(pid, round(cpu_s * NS), round(delay_s * NS), vol=3, invol=4)
    return ProcessSample(pid, ROOT, "python", "python w.py", ticks, (t,), (), {})


def _with(sample: TreeSample, *procs: ProcessSample) -> TreeSample:
    return sample._replace(processes={**sample.processes, **{p.pid: p for p in procs}})


def test_process_new_in_interval_counts_its_full_counters() -> None:
    prev, curr = tree_pair([Proc(ROOT, (IDLE,), ppid=1)])
    curr = _with(curr, _fresh(300, cpu_s=0.3, delay_s=0.1))
    iv = counted(interval(prev, curr, 2), TH)
    new = _by_pid(iv.processes)[300]
    assert new.cpu_percent == pytest.approx(30.0)
    assert new.demand == pytest.approx(0.4)
    assert new.run_delay_ratio == pytest.approx(0.25)
    assert new.involuntary_ctx_per_s == pytest.approx(4.0)
    assert not new.exited
    assert iv.totals.processes == 2


def test_thread_first_seen_with_old_counters_is_capped_at_the_interval() -> None:
    """A thread older than the interval cannot have run more than Δt within it."""
    prev, curr = tree_pair([Proc(ROOT, (BUSY,), ppid=1), Proc(201, (BUSY,))])
    iv = counted(interval(without(prev, 201), curr, 2), TH)
    worker = _by_pid(iv.processes)[201]
    assert worker.cpu_percent == pytest.approx(100.0)
    assert worker.demand == pytest.approx(1.0)


def test_process_gone_by_the_end_is_kept_as_exited_with_zero_deltas() -> None:
    prev, curr = tree_pair(
        [Proc(ROOT, (BUSY,), ppid=1), Proc(201, (BUSY, BUSY), pools=("libgomp",))]
    )
    iv = counted(interval(prev, without(curr, 201), 2), TH)
    gone = _by_pid(iv.processes)[201]
    assert gone.exited
    assert gone.cpu_percent == 0.0
    assert gone.demand == 0.0
    assert gone.active_threads == 0
    assert gone.threads == 2
    assert gone.pools == ("libgomp",)
    assert iv.totals.processes == 1
    assert iv.totals.cpu_percent == pytest.approx(100.0)
    assert iv.processes[-1].pid == 201


def test_reused_pid_is_a_new_process() -> None:
    prev, curr = tree_pair([Proc(ROOT, (IDLE,), ppid=1), Proc(201, (BUSY,))])
    # Same pid, later start time, small counters: subtracting the old ones would go negative.
    curr = _with(curr, _fresh(201, cpu_s=0.2, delay_s=0.0, ticks=5000))
    iv = counted(interval(prev, curr, 2), TH)
    old, new = sorted((p for p in iv.processes if p.pid == 201), key=lambda p: not p.exited)
    assert new.cpu_percent == pytest.approx(20.0)
    assert (new.exited, new.start_ticks) == (False, 5000)
    # The process that had the pid before is not lost: it exited during the interval.
    assert old.exited and old.start_ticks != 5000 and old.cpu_percent == 0.0


def test_reused_pid_counts_full_counters_even_when_they_grew() -> None:
    prev, curr = tree_pair([Proc(ROOT, (IDLE,), ppid=1)])
    prev = _with(prev, _fresh(201, cpu_s=0.1, delay_s=0.0, ticks=1000))
    curr = _with(curr, _fresh(201, cpu_s=0.3, delay_s=0.0, ticks=5000))
    iv = counted(interval(prev, curr, 2), TH)
    (new,) = [p for p in iv.processes if p.pid == 201 and not p.exited]
    assert new.cpu_percent == pytest.approx(30.0)


def test_new_thread_counts_full_counters_and_reused_tid_restarts() -> None:
    prev, curr = tree_pair([Proc(ROOT, (Load(cpu=0.5),), ppid=1)])
    root = curr.processes[ROOT]
    new_thread = thread(ROOT * 100 + 7, round(0.25 * NS), 0, vol=1, invol=2)
    # The main thread's tid now belongs to a new thread whose counters restarted.
    restarted = thread(ROOT, round(0.1 * NS), round(0.05 * NS), vol=1, invol=1)
    curr = _with(curr, root._replace(threads=(restarted, new_thread)))
    iv = counted(interval(prev, curr, 2), TH)
    p = iv.processes[0]
    assert p.cpu_percent == pytest.approx(35.0)
    assert p.demand == pytest.approx(0.4)
    assert p.involuntary_ctx_per_s == pytest.approx(3.0)
    assert p.threads == 2
    assert p.active_threads == 1


def test_without_schedstat_delay_is_unknown_not_zero() -> None:
    procs = [Proc(ROOT, (BUSY, Load(cpu=0.5)), ppid=1, schedstat=False)]
    iv = analyse(procs, vcpus=2)
    assert iv.processes[0].run_delay_ratio is None
    assert iv.processes[0].demand == pytest.approx(1.5)  # CPU only: a lower bound
    assert iv.totals.run_delay_ratio is None
    assert "schedstat" in iv.unavailable


def test_unreadable_switches_give_none() -> None:
    iv = analyse([Proc(ROOT, (BUSY,), ppid=1, ctx=False)], vcpus=2)
    assert iv.processes[0].involuntary_ctx_per_s is None
    assert iv.processes[0].voluntary_ctx_per_s is None
    assert iv.totals.involuntary_ctx_per_s is None
    assert iv.totals.involuntary_ctx_per_cpu_s is None


def test_idle_tree_has_no_delay_ratio_but_schedstat_is_available() -> None:
    iv = analyse([Proc(ROOT, (IDLE, IDLE), ppid=1)], vcpus=2)
    assert iv.totals.run_delay_ratio is None
    assert iv.totals.demand == 0.0
    assert iv.totals.involuntary_ctx_per_cpu_s is None
    assert "schedstat" not in iv.unavailable


def test_host_rates() -> None:
    host = Host(outside=0.7, steal=0.2, psi=0.25, periods=10, throttled=3, throttled_s=0.4)
    iv = analyse(busy_workers(1, 1), vcpus=2, dt=2.0, host=host)
    assert iv.host.outside_cpus == pytest.approx(0.7)
    assert iv.host.steal_cpus == pytest.approx(0.2)
    assert iv.host.psi_some == pytest.approx(0.25)
    assert iv.host.throttled_ratio == pytest.approx(0.3)
    assert iv.host.throttled_s == pytest.approx(0.4)  # seconds, not a rate


def test_psi_some_is_never_more_than_the_whole_interval() -> None:
    # The host read after a scan slower than the last: PSI's delta spans more than dt.
    iv = analyse(busy_workers(1, 2), vcpus=2, host=Host(psi=1.01))
    assert iv.host.psi_some == 1.0


def test_outside_cpus_never_negative() -> None:
    # Host busy time read a little before the tree's: it looks smaller than the tree's CPU.
    iv = analyse(busy_workers(1, 2), vcpus=2, host=Host(outside=-0.3))
    assert iv.host.outside_cpus == 0.0


def test_missing_host_counters_give_none() -> None:
    iv = analyse(busy_workers(1, 1), vcpus=2, host=Host(outside=None, steal=None))
    assert iv.host == HostRates(None, None, None, None, None)


def test_no_elapsed_periods_give_no_throttle_ratio() -> None:
    iv = analyse(busy_workers(1, 1), vcpus=2, host=Host(periods=0))
    assert iv.host.throttled_ratio is None
    assert iv.host.throttled_s == pytest.approx(0.0)


def test_unavailable_signals_are_carried() -> None:
    prev, curr = tree_pair(busy_workers(1, 1), unavailable=("psi",))
    iv = counted(interval(prev, curr, 2), TH)
    assert iv.unavailable == ("psi",)


def test_cpu_of_children_reaped_in_the_interval_is_not_outside_load() -> None:
    # A child that lived and died between two samples shows only in its parent's cutime:
    # 0.8 of the 1.0 CPU "outside" was the tree's own short-lived worker.
    procs = [Proc(ROOT, (Load(cpu=0.5),), ppid=1, reaped_cpu=0.8)]
    iv = analyse(procs, vcpus=2, host=Host(outside=1.0))
    assert iv.host.outside_cpus == pytest.approx(0.2, abs=1e-6)


def test_busy_processes_count_those_keeping_half_a_thread_runnable() -> None:
    procs = [Proc(ROOT, (IDLE,), ppid=1), *busy_workers(3, 1, delay=0.0)]
    procs.append(Proc(500, (Load(cpu=0.3, delay=0.1),)))  # 0.4 runnable: not busy
    assert analyse(procs, vcpus=4).totals.busy_processes == 3


def test_oversubs_own_cpu_is_not_outside_load() -> None:
    # oversub sampling 3,000 threads at a 0.1 s interval used 0.2 CPU, which /proc/stat counts
    # as busy: "outside the tree" must not include it (it turned healthy trees "starved").
    prev, curr = tree_pair(busy_workers(1, 1), host=Host(outside=0.5))
    base = 7 * NS
    prev = prev._replace(host=prev.host._replace(observer_cpu_ns=base))
    curr = curr._replace(host=curr.host._replace(observer_cpu_ns=base + round(0.2 * NS)))
    iv = counted(interval(prev, curr, 2), Thresholds())
    assert iv.host.outside_cpus == pytest.approx(0.3, abs=1e-6)
    unknown = counted(
        interval(*tree_pair(busy_workers(1, 1), host=Host(outside=0.5)), 2), Thresholds()
    )
    assert unknown.host.outside_cpus == pytest.approx(0.5, abs=1e-6)  # not read: nothing taken


# ------------------------------------------------ raw deltas (issue 13 item 5)


def test_an_interval_carries_its_raw_deltas() -> None:
    loads = (Load(cpu=0.6, delay=0.2, involuntary=40, voluntary=3), Load(cpu=0.3))
    iv = analyse([Proc(ROOT, loads, ppid=1)], vcpus=2, dt=2.0)
    (p,) = iv.processes
    assert p.cpu_s == pytest.approx(0.9 * 2.0)
    assert p.delay_s == pytest.approx(0.2 * 2.0)
    assert p.involuntary_ctx == 80 and p.voluntary_ctx == 6
    assert p.thread_runnable_s == pytest.approx((1.6, 0.6))
    # The rates are those deltas over the interval, and the totals their sums.
    assert p.cpu_percent == pytest.approx(p.cpu_s / iv.seconds * 100)
    assert p.demand == pytest.approx((p.cpu_s + p.delay_s) / iv.seconds)
    assert (iv.totals.cpu_s, iv.totals.delay_s) == (p.cpu_s, p.delay_s)
    assert iv.totals.involuntary_ctx == 80


@pytest.mark.parametrize("active_cpu", [0.05, 0.2, 0.35, 0.5, 0.9, 1.0])
def test_an_interval_assessed_again_under_other_thresholds_is_the_one_computed_so(
    active_cpu: float,
) -> None:
    from oversub.analysis.rates import counted

    procs = [
        *busy_workers(3, 2, delay=0.3),
        Proc(150, (Load(cpu=0.3), Load(cpu=0.1, delay=0.25), IDLE), ppid=ROOT),
    ]
    prev, curr = tree_pair(procs, dt=1.5)
    other = Thresholds(active_cpu=active_cpu)
    recorded = counted(interval(prev, curr, 2), TH)
    again = counted(recorded, other)
    assert again == counted(interval(prev, curr, 2), other)
    mixed = next(p for p in again.processes if p.pid == 150)
    assert mixed.active_threads == sum(r >= active_cpu * 1.5 for r in (0.45, 0.525, 0.0))


def _kept_run() -> list[TreeSample]:
    """Four samples of a parent and its idle child: the probe keeps the child's reading
    (the same object) from the second sample on; the parent is read again each time and
    starts a thread before the child's start time in the last one."""
    parent = Proc(ROOT, (BUSY, IDLE), ppid=1, start_ticks=100, thread_starts=(100, 9000))
    child = Proc(301, (IDLE, IDLE), start_ticks=5000, thread_starts=(5000, 5000))
    s0, s1 = tree_pair([parent, child])
    late = Proc(ROOT, (BUSY, IDLE), ppid=1, start_ticks=100, thread_starts=(100, 200))
    samples = [s0, s1]
    for k, proc in ((2, parent), (3, late)):
        fresh = tree_pair([proc], t0=s0.t + k - 1)[1]
        samples.append(_with(fresh, s1.processes[301]))
    return samples


def test_kept_readings_get_the_rates_computed_without_the_memo() -> None:
    """`KeptRates` only saves work: every interval equals the one computed without it,
    also when the kept child's parent changed (its threads before the child's start)."""
    samples = _kept_run()
    memo = KeptRates()
    with_memo = [interval(a, b, 2, memo) for a, b in pairwise(samples)]
    plain = [interval(a, b, 2) for a, b in pairwise(samples)]
    assert with_memo == plain
    assert [_by_pid(iv.processes)[301].parent_threads_at_start for iv in plain] == [1, 1, 2]


def test_kept_rates_are_reused_while_the_reading_and_its_parent_stay() -> None:
    samples = _kept_run()
    memo = KeptRates()
    for a, b in pairwise(samples):
        last = _by_pid(interval(a, b, 2, memo).processes)[301]
    s3 = samples[3]
    later = s3._replace(t=s3.t + 1.0)  # the same readings, parent's included
    again = _by_pid(interval(s3, later, 2, memo).processes)[301]
    assert again is last
    assert again == _by_pid(interval(s3, later, 2).processes)[301]
    moved = later._replace(t=later.t + 1.0, processes=dict(later.processes))
    moved.processes[ROOT] = moved.processes[ROOT]._replace()  # read again, same values
    recomputed = _by_pid(interval(later, moved, 2, memo).processes)[301]
    assert recomputed is not again and recomputed == again


def test_a_run_of_kept_rates_sums_as_a_run_of_equal_copies() -> None:
    """The run summary adds the very same rates again (a kept reading) by its fast path:
    its means, peaks and sustained active threads are those of equal copies added whole."""
    from oversub.analysis.accumulators import ProcessAccumulator
    from oversub.analysis.summary import RunSummary
    from tests.support.builders import budget

    samples = _kept_run()
    s3 = samples[3]
    samples += [s3._replace(t=s3.t + k) for k in (1.0, 2.0, 3.0)]  # nothing read again
    memo, fast, slow = KeptRates(), RunSummary(), RunSummary()
    for a, b in pairwise(samples):
        iv = counted(interval(a, b, 2, memo), TH)
        fast.add(iv)
        slow.add(iv._replace(processes=tuple(p._replace() for p in iv.processes)))
    assert fast.result(budget(2), TH, target_exited=False) == slow.result(
        budget(2), TH, target_exited=False
    )
    kept = _by_pid(iv.processes)[301]
    again, copies = ProcessAccumulator(latest=kept), ProcessAccumulator(latest=kept)
    for seconds in (1.0, 0.5, 2.0):
        again.add(kept, seconds)
        copies.add(kept._replace(), seconds)
    assert again.work == copies.work and again.work.seconds == 3.5
    assert again.rates() == copies.rates()


def _kept_run_with_owners() -> list[TreeSample]:
    """`_kept_run`, the idle child's threads attributed (`probe.owners`) in every sample."""
    samples = _kept_run()
    child = samples[1].processes[301]
    owned = child._replace(owners={t.tid: "openmp" for t in child.threads})
    return [samples[0], *(_with(s, owned) for s in samples[1:])]


def test_counting_a_kept_reading_under_the_memo_changes_nothing() -> None:
    """`counted(..., kept)` floors a kept reading's rates once and hands the same object on:
    every interval equals the one counted without it, and a run summary of them equals
    one of equal copies (its fast path takes the owners as added already)."""
    from oversub.analysis.summary import RunSummary
    from tests.support.builders import budget

    samples = _kept_run_with_owners()
    s3 = samples[3]
    samples += [s3._replace(t=s3.t + k) for k in (1.0, 2.0, 3.0)]  # nothing read again
    memo, fast, slow = KeptRates(), RunSummary(), RunSummary()
    kept = []
    for a, b in pairwise(samples):
        iv = counted(interval(a, b, 2, memo), TH, memo)
        assert iv == counted(interval(a, b, 2), TH)
        kept.append(_by_pid(iv.processes)[301])
        fast.add(iv)
        slow.add(iv._replace(processes=tuple(p._replace() for p in iv.processes)))
    assert kept[-1] is kept[-2] is kept[-3] and kept[-1].owner_counts
    assert fast.result(budget(2), TH, target_exited=False) == slow.result(
        budget(2), TH, target_exited=False
    )
    zero = Thresholds(active_cpu=0.0)  # no floor: every thread is active, nothing memoised
    iv = counted(interval(s3, samples[-1], 2, memo), zero, memo)
    assert iv == counted(interval(s3, samples[-1], 2), zero)
