"""The whole-run summary: means, peaks, processes that come and go, and the run verdict."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from oversub.analysis.rates import counted, interval
from oversub.analysis.summary import NO_INTERVAL_NOTE, RunSummary
from oversub.core.names import Verdict
from oversub.core.results import Interval, ProcessSummary, Summary
from oversub.core.thresholds import Thresholds
from tests.support.builders import (
    BUSY,
    IDLE,
    ROOT,
    T0,
    Host,
    Load,
    Proc,
    analyse,
    budget,
    busy_workers,
    tree_pair,
    without,
)

TH = Thresholds()


class Timeline:
    """Consecutive intervals: each starts where the previous one ended."""

    def __init__(self) -> None:
        self.t = T0
        self.run = RunSummary()

    def add(self, procs: Sequence[Proc], dt: float = 1.0, host: Host | None = None) -> Interval:
        iv = analyse(procs, vcpus=2, dt=dt, host=host or Host(), t0=self.t)
        self.run.add(iv)
        self.t += dt
        return iv

    def add_exit(self, procs: Sequence[Proc], gone: int, dt: float = 1.0) -> None:
        """An interval at the end of which process `gone` no longer exists."""
        prev, curr = tree_pair(procs, dt=dt, t0=self.t)
        self.run.add(counted(interval(prev, without(curr, gone), 2), TH))
        self.t += dt

    def result(self, *, vcpus: int = 2, target_exited: bool = False) -> Summary:
        return self.run.result(budget(vcpus), TH, target_exited=target_exited)


def process(s: Summary, pid: int) -> ProcessSummary:
    matches = [p for p in s.processes if p.pid == pid]
    assert len(matches) == 1
    return matches[0]


def root() -> Proc:
    return Proc(ROOT, (IDLE,), ppid=1, cmdline="python launch.py")


def test_no_interval_is_not_judged() -> None:
    # Issue 11 item 2: a run with nothing measured has no verdict (it used to say "ok").
    s = RunSummary().result(budget(2), TH, target_exited=True)
    assert s.verdict is None and not s.judged
    assert s.not_judged == NO_INTERVAL_NOTE
    assert s.samples == 0
    assert s.findings == ()
    assert s.processes == ()
    assert s.notes == ()
    assert s.root_pid == ROOT
    assert s.target_exited
    assert s.host.outside_cpus is None


def test_notes_pass_through_a_run_not_judged() -> None:
    notes = ("a note",)
    s = RunSummary().result(budget(2), TH, target_exited=False, notes=notes)
    assert s.notes == notes and s.not_judged == NO_INTERVAL_NOTE


def test_process_means_are_time_weighted_and_peaks_are_kept() -> None:
    line = Timeline()
    line.add([root(), Proc(201, (Load(cpu=0.4, delay=0.1, involuntary=10),))], dt=1.0)
    line.add([root(), Proc(201, (Load(cpu=0.7, delay=0.3, involuntary=30),))], dt=3.0)
    s = line.result()
    w = process(s, 201)
    assert w.seconds == pytest.approx(4.0)
    assert w.cpu_percent == pytest.approx((0.4 * 1 + 0.7 * 3) / 4 * 100)
    assert w.cpu_percent_peak == pytest.approx(70.0)
    assert w.demand == pytest.approx((0.5 * 1 + 1.0 * 3) / 4)
    assert w.demand_peak == pytest.approx(1.0)
    assert w.run_delay_ratio == pytest.approx((0.1 + 0.9) / (0.5 + 3.0))
    assert w.run_delay_ratio_peak == pytest.approx(0.3)
    assert w.involuntary_ctx_per_s == pytest.approx((10 + 90) / 4)
    assert w.involuntary_ctx_per_s_peak == pytest.approx(30.0)
    assert w.active_threads_peak == 1
    assert not w.exited
    assert s.samples == 2
    assert s.duration_s == pytest.approx(4.0)
    assert s.processes[0].pid == 201  # highest CPU first


def test_tree_totals_mean_and_peak() -> None:
    line = Timeline()
    line.add(busy_workers(2, 2, delay=0.5), dt=1.0)  # demand 4, 4 busy threads
    line.add(busy_workers(2, 1, delay=0.0), dt=3.0)  # demand 2, 2 busy threads
    s = line.result()
    assert s.totals.demand == pytest.approx((4 * 1 + 2 * 3) / 4)
    assert s.totals.cpu_percent == pytest.approx((200 * 1 + 200 * 3) / 4)
    assert s.totals.run_delay_ratio == pytest.approx(2 / 10)
    assert s.totals.active_threads == 4  # the peak: what can happen
    assert s.totals.threads == round((5 * 1 + 3 * 3) / 4)  # time-weighted mean
    assert s.totals_peak.demand == pytest.approx(4.0)
    assert s.totals_peak.run_delay_ratio == pytest.approx(0.5)
    assert s.totals_peak.threads == 5
    assert s.totals_peak.active_threads == 4
    assert s.totals_peak.involuntary_ctx_per_s == pytest.approx(800.0)


def test_process_seen_only_mid_run_still_appears() -> None:
    line = Timeline()
    line.add([root()])
    middle = [root(), Proc(201, (Load(cpu=0.8),), pools=("openblas",))]
    line.add(middle, dt=2.0)
    line.add_exit(middle, gone=201)
    line.add([root()])
    s = line.result()
    w = process(s, 201)
    assert w.exited
    assert w.seconds == pytest.approx(2.0)
    assert w.cpu_percent == pytest.approx(80.0)
    assert w.pools == ("openblas",)
    assert s.samples == 4


def test_reused_pid_is_a_second_process() -> None:
    line = Timeline()
    first = [root(), Proc(201, (Load(cpu=0.5),), cmdline="python a.py")]
    line.add(first)
    line.add_exit(first, gone=201)
    line.add([root(), Proc(201, (Load(cpu=0.9),), cmdline="python b.py", start_ticks=9000)])
    s = line.result()
    reused = sorted((p for p in s.processes if p.pid == 201), key=lambda p: p.cmdline)
    assert [p.cmdline for p in reused] == ["python a.py", "python b.py"]
    assert [p.exited for p in reused] == [True, False]
    assert reused[1].cpu_percent == pytest.approx(90.0)


def test_pid_reused_within_one_interval_is_a_second_process() -> None:
    # The pid wraps around between two samples: one sample holds a.py, the next b.py.
    line = Timeline()
    a = [root(), Proc(201, (Load(cpu=0.5),), cmdline="python a.py")]
    b = [root(), Proc(201, (Load(cpu=0.9),), cmdline="python b.py", start_ticks=9000)]
    line.add(a)
    prev, _ = tree_pair(a, t0=line.t)
    _, curr = tree_pair(b, t0=line.t)
    line.run.add(counted(interval(prev, curr, 2), TH))
    line.t += 1.0
    line.add(b)
    s = line.result()
    reused = sorted((p for p in s.processes if p.pid == 201), key=lambda p: p.cmdline)
    assert [p.cmdline for p in reused] == ["python a.py", "python b.py"]
    assert [p.exited for p in reused] == [True, False]
    assert reused[0].cpu_percent == pytest.approx(50.0, rel=0.35)  # a.py's seconds only
    assert reused[1].cpu_percent > 80.0


def test_run_verdict_over_oversubscribed_intervals() -> None:
    line = Timeline()
    for _ in range(3):
        line.add(busy_workers(2, 2, delay=0.5, pools=("libgomp",)))
    s = line.result()
    assert s.verdict is Verdict.OVERSUBSCRIBED
    assert s.findings[0].rule == "oversubscribed-pools"
    assert s.findings[0].pids == (201, 202)


@pytest.mark.parametrize(("busy_intervals", "verdict"), [(1, Verdict.OK), (2, Verdict.AT_RISK)])
def test_run_verdict_uses_sustained_peak_active_threads(
    busy_intervals: int, verdict: Verdict
) -> None:
    # 3 busy threads on 2 CPUs in some of 5 intervals: the burst counts once it holds for a
    # quarter of the run (2 of 5), not when it is a single spike (1 of 5).
    line = Timeline()
    for _ in range(busy_intervals):
        line.add([root(), Proc(201, (Load(cpu=0.3),) * 3)])
    for _ in range(5 - busy_intervals):
        line.add([root(), Proc(201, (IDLE,) * 3)])
    s = line.result()
    assert s.totals.demand < 1.0
    assert s.verdict is verdict
    assert [f.rule for f in s.findings] == (["busy-threads-exceed"] if busy_intervals > 1 else [])
    assert s.totals_peak.active_threads == 3  # the true peak is still reported
    assert {p.pid: p.active_threads_peak for p in s.processes}[201] == 3


def test_target_exit_at_the_end_keeps_the_run_verdict() -> None:
    line = Timeline()
    procs = busy_workers(2, 2, delay=0.5, pools=("libgomp",))
    line.add(procs)
    prev, curr = tree_pair(procs, t0=line.t)
    line.run.add(counted(interval(prev, without(curr, *(p.pid for p in procs)), 2), TH))
    s = line.result(target_exited=True)
    assert s.target_exited
    assert all(p.exited for p in s.processes)
    # The last interval saw no live process: it does not dilute the tree's means.
    assert s.totals.demand == pytest.approx(4.0)
    assert s.verdict is Verdict.OVERSUBSCRIBED
    assert s.samples == 1  # the interval that ended with nothing alive measured nothing


def test_tree_gone_in_the_only_interval_measures_nothing() -> None:
    # A command that exits before the second sample was never seen running: `check` must
    # not pass it (samples == 0 is its "nothing measured" signal).
    line = Timeline()
    line.add_exit([root()], gone=ROOT)
    s = line.result(target_exited=True)
    assert s.samples == 0
    assert s.verdict is None and s.not_judged == NO_INTERVAL_NOTE
    assert s.totals.demand == 0.0


def test_busy_orphan_counts_in_the_run_after_everything_exited() -> None:
    line = Timeline()
    procs = [root(), Proc(401, (Load(cpu=0.5),), ppid=999)]
    line.add(procs)
    line.add_exit(procs, gone=401)
    prev, curr = tree_pair([root()], t0=line.t)
    line.run.add(counted(interval(prev, without(curr, ROOT), 2), TH))
    s = line.result(target_exited=True)
    assert [f.rule for f in s.findings] == ["orphan"]
    assert s.verdict is Verdict.AT_RISK


def test_host_means_skip_unknown_intervals() -> None:
    line = Timeline()
    line.add(busy_workers(1, 1), dt=1.0, host=Host(outside=1.0, periods=10, throttled=2))
    line.add(busy_workers(1, 1), dt=3.0, host=Host(outside=0.0, periods=30, throttled=0))
    line.add(busy_workers(1, 1), dt=2.0, host=Host(outside=None, steal=None))
    s = line.result()
    assert s.host.outside_cpus == pytest.approx(0.25)
    assert s.host.throttled_ratio == pytest.approx(0.2 / 4)
    assert s.host.throttled_s == pytest.approx(0.0)
    assert s.host.psi_some is None


def test_without_schedstat_the_run_says_so() -> None:
    line = Timeline()
    line.add([Proc(ROOT, (Load(cpu=1.0),) * 2, ppid=1, schedstat=False)])
    s = line.result()
    assert s.totals.run_delay_ratio is None
    assert "schedstat" in s.unavailable
    assert "no-schedstat" in [f.rule for f in s.findings]
    assert process(s, ROOT).run_delay_ratio is None
    assert process(s, ROOT).run_delay_ratio_peak is None


def test_memory_is_bounded_by_processes_not_intervals() -> None:
    line = Timeline()
    for _ in range(500):
        line.add(busy_workers(2, 1), dt=0.1)
    s = line.result()
    assert len(s.processes) == 3
    assert s.samples == 500
    assert s.duration_s == pytest.approx(50.0)


def test_workers_that_come_and_go_are_not_counted_at_once() -> None:
    # Ten rounds of two short-lived oversubscribing workers (a DataLoader per epoch) on 2
    # CPUs: the fix must share N among the 2 workers busy at a time, not all 20 ever seen.
    line = Timeline()
    for round_ in range(10):
        pids = (1000 + 2 * round_, 1001 + 2 * round_)
        pool = ("libgomp",)  # multi-thread OpenMP workers, not application threads
        line.add([root(), *(Proc(p, (Load(cpu=0.5, delay=0.5),) * 4, pools=pool) for p in pids)])
    s = line.result()
    assert len(s.processes) == 21
    assert s.totals.busy_processes == 2
    f = s.findings[0]
    assert f.rule == "oversubscribed-pools"
    assert f.evidence["processes"] == 2  # not 20
    assert "each of the 2 busy processes" in f.fix
    assert "run at most" not in f.fix  # 2 processes fit 2 CPUs; 20 would not


def _parent_and_forked_child(child: bool) -> list[Proc]:
    parent = Proc(ROOT, (Load(cpu=0.5), IDLE), ppid=1, cmdline="python train.py")
    if not child:
        return [parent]
    forked = Proc(301, (IDLE,), cmdline="python train.py", pools=("libgomp",), wait="futex-private")
    return [parent, forked]


@pytest.mark.parametrize(("child_seconds", "hung"), [(1, False), (8, True)])
def test_fork_hang_counts_the_time_the_child_was_watched_not_the_run(
    child_seconds: int, hung: bool
) -> None:
    # An 8 s run; the idle forked child is seen for its last `child_seconds` only. Seen for
    # 1 s it has not sat idle for idle_seconds (3 s) yet, however long the run.
    line = Timeline()
    for i in range(8):
        line.add(_parent_and_forked_child(child=i >= 8 - child_seconds))
    s = line.result()
    hang = [f for f in s.findings if f.rule == "fork-hang"]
    assert bool(hang) is hung, s.findings
    if hung:
        assert hang[0].evidence["seconds"] == 8.0


def test_idle_default_pools_over_a_run_are_at_risk_with_their_totals() -> None:
    # Two idle processes that imported NumPy (OpenBLAS at 2, read live), and the launcher.
    line = Timeline()
    for _ in range(5):
        line.add(
            [
                root(),
                *(
                    Proc(201 + i, (IDLE, IDLE), pools=("openblas",), live={"openblas": 2})
                    for i in range(2)
                ),
            ]
        )
    s = line.result(target_exited=True)
    assert (s.totals.pool_threads, s.totals.pool_processes) == (4, 2)
    assert s.verdict is Verdict.AT_RISK
    assert [f.rule for f in s.findings] == ["pool-default"]
    assert process(s, 201).live_pools == {"openblas": 2}


def test_the_latest_live_size_wins_over_a_run() -> None:
    # threadpool_limits(1) called in code mid-run: the summary judges the pools as they are.
    line = Timeline()
    for live in (2, 2, 1, 1, 1):
        line.add(
            [
                root(),
                *(
                    Proc(201 + i, (IDLE, IDLE), pools=("openblas",), live={"openblas": live})
                    for i in range(2)
                ),
            ]
        )
    s = line.result()
    assert s.totals.pool_threads == 0
    assert s.findings == ()


def test_a_run_with_no_interval_names_the_watched_pid() -> None:
    # `check -- CMD` reads the budget of oversub itself; a command that failed at once was
    # reported as "pid <oversub's own pid>" (issue 11: every line true).
    s = RunSummary(root_pid=4321).result(budget(2, pid=99), TH, target_exited=True)
    assert s.root_pid == 4321


def test_the_root_is_exited_when_the_target_exited() -> None:
    # The run ends when a sample finds the root gone, after the last interval saw it alive:
    # its line must not say exited: false beside target_exited: true.
    line = Timeline()
    line.add([root(), Proc(201, (BUSY,), cmdline="python worker.py")])
    s = line.result(target_exited=True)
    assert s.target_exited
    assert process(s, ROOT).exited is True
    assert process(s, 201).exited is False  # only the target is known to have exited
    assert process(line.result(), ROOT).exited is False
