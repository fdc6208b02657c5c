"""Verdict rules on synthetic intervals: every verdict, every rule, both sides of each threshold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest

from oversub.analysis.verdict import assess
from oversub.core.names import Severity, Verdict
from oversub.core.results import Assessment, Finding
from oversub.core.rules import RUNTIME_RULES as RULES
from oversub.core.thresholds import Thresholds
from tests.support.builders import IDLE, ROOT, Host, Load, Proc, analyse, busy_workers

TH = Thresholds()


def judge(
    procs: Sequence[Proc],
    vcpus: int,
    *,
    dt: float = 1.0,
    host: Host | None = None,
    th: Thresholds = TH,
) -> Assessment:
    iv = analyse(procs, vcpus, dt=dt, host=host or Host(), thresholds=th)
    return assess(iv, th)


def rules(a: Assessment) -> list[str]:
    return [f.rule for f in a.findings]


def finding(a: Assessment, rule: str) -> Finding:
    matches = [f for f in a.findings if f.rule == rule]
    assert len(matches) == 1, rules(a)
    return matches[0]


def root() -> Proc:
    return Proc(ROOT, (IDLE,), ppid=1, cmdline="python launch.py")


def workers(
    loads: Sequence[Load],
    count: int = 2,
    *,
    pools: tuple[str, ...] | None = (),
    env: Mapping[str, str] | None = None,
) -> list[Proc]:
    """Root plus `count` workers, each with threads doing `loads`."""
    return [root()] + [
        Proc(201 + i, tuple(loads), cmdline=f"python worker.py {i}", pools=pools, env=env)
        for i in range(count)
    ]


# ------------------------------------------------------------------ oversubscribed


def test_two_default_openmp_pools_on_two_cpus_are_oversubscribed_pools() -> None:
    a = judge(busy_workers(2, 2, delay=0.5, pools=("libgomp",)), vcpus=2)
    assert a.verdict is Verdict.OVERSUBSCRIBED
    f = a.findings[0]
    assert f.rule == "oversubscribed-pools"
    assert f.severity is Severity.CRITICAL
    assert "4.0 threads runnable on 2 CPUs (2.0x)" in f.message
    assert "2 processes run multi-thread GNU OpenMP (libgomp) pools" in f.message
    assert "2 processes (pids 201, 202) map GNU OpenMP (libgomp) with OMP_NUM_THREADS unset" in (
        f.fix
    )
    assert "set OMP_NUM_THREADS=1" in f.fix
    assert "torch.set_num_threads" not in f.fix
    assert f.pids == (201, 202)
    assert f.evidence["demand"] == pytest.approx(4.0)
    assert f.evidence["demand_per_vcpu"] == pytest.approx(2.0)
    assert f.evidence["run_delay_ratio"] == pytest.approx(0.5)
    assert f.evidence["threads_per_process"] == 1
    assert f.evidence["pools"] == "libgomp"
    # The pool naming is folded into this finding: no separate pool-default.
    assert "pool-default" not in rules(a)


def test_oversubscribed_pools_fix_divides_the_cpus_among_busy_processes() -> None:
    a = judge(busy_workers(2, 4, delay=0.5, pools=("libgomp", "torch")), vcpus=4)
    f = finding(a, "oversubscribed-pools")
    assert "OMP_NUM_THREADS=2" in f.fix
    assert "torch.set_num_threads(2)" in f.fix
    assert f.evidence["pools"] == "libgomp,torch"


def test_processes_with_the_same_pools_share_one_clause() -> None:
    a = judge(busy_workers(2, 2, delay=0.5, pools=("openblas", "libgomp")), vcpus=2)
    assert finding(a, "oversubscribed-pools").fix.endswith(
        ": 2 processes (pids 201, 202) map GNU OpenMP (libgomp) and OpenBLAS with "
        "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS unset -> set OMP_NUM_THREADS=1 and "
        "OPENBLAS_NUM_THREADS=1 in them, or in code in each, before the work starts: "
        "threadpoolctl.threadpool_limits(1) for GNU OpenMP (libgomp) and OpenBLAS."
    )


def test_variable_set_but_too_high_is_named() -> None:
    a = judge(
        busy_workers(2, 2, delay=0.5, pools=("openblas",), env={"OPENBLAS_NUM_THREADS": "4"}),
        vcpus=2,
    )
    f = finding(a, "oversubscribed-pools")
    assert "OPENBLAS_NUM_THREADS=4, more than 1 -> lower OPENBLAS_NUM_THREADS to 1" in f.fix
    assert "unset" not in f.fix


def test_more_processes_than_cpus_also_says_run_fewer() -> None:
    a = judge(busy_workers(3, 2, delay=0.7, pools=("libgomp",)), vcpus=2)
    f = finding(a, "oversubscribed-pools")
    assert "at most 2 busy processes" in f.fix


def test_single_thread_processes_beyond_the_cpus_are_oversubscribed_processes() -> None:
    a = judge(busy_workers(4, 1, delay=0.5), vcpus=2)
    assert a.verdict is Verdict.OVERSUBSCRIBED
    f = a.findings[0]
    assert f.rule == "oversubscribed-processes"
    assert f.severity is Severity.WARNING
    assert "1.0-1.2x" in f.message
    assert "at most 2 busy processes" in f.fix
    assert f.pids == (201, 202, 203, 204)


@pytest.mark.parametrize(("second_thread_delay", "rule"), [(0.07, "processes"), (0.09, "threads")])
def test_active_cpu_boundary_separates_pools_from_processes(
    second_thread_delay: float, rule: str
) -> None:
    # Active = runnable (running + waiting) >= 20% of the interval: 0.12 + 0.07 is not, 0.12 +
    # 0.09 is. Waiting counts because a busy thread that never gets a CPU is still busy.
    loads = [Load(cpu=0.7, delay=0.5), Load(cpu=0.12, delay=second_thread_delay)]
    a = judge(workers(loads), vcpus=2)
    assert rules(a)[0] == f"oversubscribed-{rule}"


@pytest.mark.parametrize(("demand", "over"), [(2.29, False), (2.31, True)])
def test_margin_boundary(demand: float, over: bool) -> None:
    # Two workers, two threads each, a quarter of the demand per thread; 40% of it waiting.
    per_thread = demand / 4
    a = judge(workers([Load(cpu=per_thread * 0.6, delay=per_thread * 0.4)] * 2), vcpus=2)
    assert (a.verdict is Verdict.OVERSUBSCRIBED) is over
    if not over:
        assert a.verdict is Verdict.STARVED  # waiting but within the budget


def test_demand_exactly_n_is_within_budget() -> None:
    th = Thresholds(margin=0.0)
    a = judge(workers([Load(cpu=0.25, delay=0.25)] * 2), vcpus=2, th=th, host=Host(outside=0.0))
    assert a.verdict is not Verdict.OVERSUBSCRIBED
    assert "starved-unattributed" in rules(a)


@pytest.mark.parametrize(("ratio", "fires"), [(0.09, False), (0.11, True)])
def test_delay_ratio_boundary(ratio: float, fires: bool) -> None:
    demand_per_thread = 0.8  # 3.2 runnable on 2 CPUs: over
    load = Load(cpu=demand_per_thread * (1 - ratio), delay=demand_per_thread * ratio)
    a = judge(workers([load, load]), vcpus=2)
    assert (a.verdict is Verdict.OVERSUBSCRIBED) is fires


# ------------------------------------------------------------------ starved


def test_one_busy_thread_in_half_a_cpu_quota_is_starved_quota() -> None:
    # N floors to 1; the thread runs half the time and is throttled, not runnable-waiting.
    procs = [Proc(ROOT, (Load(cpu=0.5),), ppid=1)]
    host = Host(periods=10, throttled=5, throttled_s=0.5)
    a = judge(procs, vcpus=1, host=host)
    assert a.verdict is Verdict.STARVED
    assert rules(a) == ["starved-quota"]
    f = a.findings[0]
    assert "50% of its periods" in f.message
    assert f.evidence["throttled_ratio"] == pytest.approx(0.5)
    assert "quota" in f.fix


@pytest.mark.parametrize(("throttled", "fires"), [(9, False), (10, True)])
def test_throttle_ratio_boundary(throttled: int, fires: bool) -> None:
    a = judge(
        [Proc(ROOT, (Load(cpu=0.5),), ppid=1)], vcpus=1, host=Host(periods=100, throttled=throttled)
    )
    assert ("starved-quota" in rules(a)) is fires


def test_other_processes_taking_the_cpus_is_starved_outside() -> None:
    a = judge(busy_workers(2, 1, delay=0.34), vcpus=2, host=Host(outside=1.0))
    assert a.verdict is Verdict.STARVED
    f = finding(a, "starved-outside")
    assert f.message.startswith("Other processes used 1.00 CPUs")
    assert "waited 34% of their runnable time" in f.message
    assert "taskset" in f.fix
    assert "starved-unattributed" not in rules(a)


@pytest.mark.parametrize(("outside", "rule"), [(0.49, "unattributed"), (0.50, "outside")])
def test_outside_cpu_boundary(outside: float, rule: str) -> None:
    # The tree waits 1.5 CPU-s/s (3 threads x 0.5): only outside_cpu (0.5) names the load.
    a = judge(busy_workers(3, 1, delay=0.5), vcpus=4, host=Host(outside=outside))
    assert rules(a) == [f"starved-{rule}"]


@pytest.mark.parametrize(("outside", "rule"), [(0.14, "unattributed"), (0.16, "outside")])
def test_small_outside_load_that_explains_the_waiting_is_named(outside: float, rule: str) -> None:
    # A job using exactly N (2 threads on 2 CPUs) waits 0.30 CPU-s/s: other load of half of
    # that or more explains it, far below the fixed outside_cpu.
    a = judge(busy_workers(2, 1, delay=0.15), vcpus=2, host=Host(outside=outside))
    assert rules(a) == [f"starved-{rule}"]
    f = a.findings[0]
    assert f.evidence["waited_cpus"] == pytest.approx(0.3)
    assert f"{outside:.2f} CPUs" in f.message
    if rule == "unattributed":
        assert "no other load" not in f.message
        assert f"other processes used {outside:.2f} CPUs" in f.message
        assert "less than the 0.30 CPU-seconds per second it waited" in f.message


@pytest.mark.parametrize(("outside", "rule"), [(0.16, "unattributed"), (0.19, "outside")])
def test_own_excess_within_the_margin_is_not_blamed_on_others(outside: float, rule: str) -> None:
    # Demand 2.2 on 2 CPUs (within the margin) waits 0.55 CPU-s/s; 0.2 of it is the tree's own
    # excess, so other load must cover half of the other 0.35.
    procs = [
        Proc(ROOT, (Load(cpu=0.15, delay=0.05),), ppid=1),
        *(Proc(201 + i, (Load(cpu=0.75, delay=0.25),)) for i in range(2)),
    ]
    a = judge(procs, vcpus=2, host=Host(outside=outside))
    assert rules(a) == [f"starved-{rule}"]


def test_unmeasured_outside_load_is_not_called_absent() -> None:
    a = judge(busy_workers(2, 1, delay=0.3), vcpus=2, host=Host(outside=None, steal=0.0))
    f = finding(a, "starved-unattributed")
    assert "CPU use outside the tree could not be read" in f.message
    assert "no other" not in f.message


def test_hypervisor_steal_is_named() -> None:
    a = judge(busy_workers(2, 1, delay=0.3), vcpus=2, host=Host(outside=0.0, steal=0.6))
    f = finding(a, "starved-outside")
    assert "hypervisor steal" in f.message
    assert "dedicated vCPUs" in f.fix


def test_waiting_without_visible_cause_is_unattributed_info() -> None:
    a = judge(busy_workers(2, 1, delay=0.3), vcpus=2, host=Host(outside=None, steal=None))
    assert a.verdict is Verdict.STARVED
    f = finding(a, "starved-unattributed")
    assert f.severity is Severity.INFO


def test_healthy_tree_is_ok() -> None:
    a = judge(busy_workers(2, 1, delay=0.006), vcpus=2, host=Host(outside=0.1))
    assert a.verdict is Verdict.OK
    assert a.findings == ()


# ------------------------------------------------------------------ at risk


@pytest.mark.parametrize(("busy", "fires"), [(2, False), (3, True)])
def test_busy_threads_exceed_boundary(busy: int, fires: bool) -> None:
    procs = [root(), Proc(201, (Load(cpu=0.3),) * busy)]
    a = judge(procs, vcpus=2)
    assert ("busy-threads-exceed" in rules(a)) is fires
    assert a.verdict is (Verdict.AT_RISK if fires else Verdict.OK)


def _pool_workers(env: Mapping[str, str] | None, cpu: float = 0.4) -> list[Proc]:
    # 2 processes x 2 threads at 0.4 CPU: demand 1.6 on 4 CPUs, nothing waits.
    return workers([Load(cpu=cpu)] * 2, pools=("openblas",), env=env)


def test_default_sized_pools_in_several_processes_are_at_risk() -> None:
    a = judge(_pool_workers({}), vcpus=4)
    assert a.verdict is Verdict.AT_RISK
    f = finding(a, "pool-default")
    assert f.message == (
        "2 processes (pids 201, 202) hold multi-thread OpenBLAS pools: OpenBLAS 4 threads in "
        "pids 201, 202 (OPENBLAS_NUM_THREADS unset); when they run at once, 8 threads compete "
        "for 4 CPUs."
    )
    assert f.evidence["pool_threads"] == 8
    assert "OPENBLAS_NUM_THREADS=2" in f.fix


@pytest.mark.parametrize(
    "env", [{"OPENBLAS_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2"}, None], ids=str
)
def test_pool_default_needs_a_known_unset_variable(env: Mapping[str, str] | None) -> None:
    assert "pool-default" not in rules(judge(_pool_workers(env), vcpus=4))


def test_pool_that_never_ran_two_threads_does_not_count() -> None:
    assert "pool-default" not in rules(judge(_pool_workers({}, cpu=0.1), vcpus=4))


def test_pool_without_a_variable_does_not_count() -> None:
    procs = workers([Load(cpu=0.4)] * 2, pools=("tbb",), env={})
    assert "pool-default" not in rules(judge(procs, vcpus=4))


def _forked(
    child_loads: Sequence[Load],
    *,
    cmdline: str = "python train.py",
    wait: str | None = "futex-private",
) -> list[Proc]:
    parent = Proc(ROOT, (Load(cpu=0.5), IDLE), ppid=1, cmdline="python train.py")
    child = Proc(301, tuple(child_loads), cmdline=cmdline, pools=("libgomp",), wait=wait)
    return [parent, child]


def test_idle_forked_openmp_child_is_the_fork_hang() -> None:
    a = judge(_forked([IDLE]), vcpus=2, dt=TH.idle_seconds)
    assert a.verdict is Verdict.AT_RISK
    f = a.findings[0]
    assert f.rule == "fork-hang"
    assert f.severity is Severity.CRITICAL
    assert f.pids == (301,)
    assert "41197" in f.message
    assert "spawn" in f.fix


@pytest.mark.parametrize(
    ("wait", "severity"),
    [
        ("futex-private", Severity.CRITICAL),
        (None, Severity.WARNING),
        ("read", None),
        ("futex", None),
    ],
)
def test_fork_hang_needs_a_private_futex_wait(wait: str | None, severity: Severity | None) -> None:
    # An idle fork-Pool worker waits for work in a pipe read or a shared semaphore: it looks
    # like the hang (one thread, 0% CPU, libgomp mapped) except for what it waits in.
    a = judge(_forked([IDLE], wait=wait), vcpus=2, dt=TH.idle_seconds)
    hang = [f for f in a.findings if f.rule == "fork-hang"]
    if severity is None:
        assert not hang and rules(a) == ["fork-after-threads"]
        assert a.verdict is Verdict.OK
    else:
        assert [f.severity for f in hang] == [severity]
        assert a.verdict is Verdict.AT_RISK


def test_idle_tree_with_a_high_delay_ratio_is_not_starved() -> None:
    # 1 ms of CPU and 4 ms of waiting in a second: 80% of almost nothing is not starvation.
    procs = [Proc(ROOT, (Load(cpu=0.001, delay=0.004),), ppid=1)]
    a = judge(procs, vcpus=2, host=Host(outside=1.5))
    assert a.verdict is Verdict.OK, rules(a)


def test_demand_over_budget_without_waiting_is_reported() -> None:
    # 4 busy single-thread processes "on 2 CPUs" that never wait run on other CPUs.
    a = judge(busy_workers(4, 1, delay=0.0), vcpus=2)
    assert rules(a) == ["demand-exceeds-budget"]
    assert a.verdict is Verdict.AT_RISK


@pytest.mark.parametrize(
    ("loads", "dt"),
    [
        ([IDLE], TH.idle_seconds - 0.1),  # not idle long enough yet
        ([Load(cpu=0.01)], TH.idle_seconds),  # working
        ([IDLE, IDLE], TH.idle_seconds),  # more than one thread: not the hang
    ],
)
def test_forked_child_that_is_not_hung_is_fork_after_threads(loads: list[Load], dt: float) -> None:
    a = judge(_forked(loads), vcpus=2, dt=dt)
    assert rules(a) == ["fork-after-threads"]
    assert a.verdict is Verdict.OK
    assert a.findings[0].severity is Severity.INFO


def test_spawned_child_is_no_fork() -> None:
    spawn = "python -c from multiprocessing.spawn import spawn_main; spawn_main()"
    a = judge(_forked([IDLE], cmdline=spawn), vcpus=2, dt=5.0)
    assert a.findings == ()


def test_fork_from_single_thread_parent_is_no_hazard() -> None:
    parent = Proc(ROOT, (Load(cpu=0.5),), ppid=1)
    child = Proc(301, (IDLE,), pools=("libgomp",))
    assert judge([parent, child], vcpus=2, dt=5.0).findings == ()


@pytest.mark.parametrize(("cpu", "fires"), [(0.19, False), (0.20, True)])
def test_orphan_boundary(cpu: float, fires: bool) -> None:
    procs = [root(), Proc(401, (Load(cpu=cpu),), ppid=999)]
    a = judge(procs, vcpus=2)
    assert ("orphan" in rules(a)) is fires
    if fires:
        assert finding(a, "orphan").pids == (401,)
        assert a.verdict is Verdict.AT_RISK


def test_root_is_never_an_orphan() -> None:
    assert judge([Proc(ROOT, (Load(cpu=1.0),), ppid=77)], vcpus=2).findings == ()


# ------------------------------------------------------------------ degraded signals


def test_without_schedstat_contention_is_not_judged_but_structure_is() -> None:
    procs = [
        Proc(ROOT, (IDLE,), ppid=1),
        *(Proc(201 + i, (Load(cpu=1.0),) * 2, schedstat=False) for i in range(2)),
        Proc(401, (Load(cpu=0.5),), ppid=999, schedstat=False),
    ]
    a = judge(procs, vcpus=2)
    assert "no-schedstat" in rules(a)
    assert "orphan" in rules(a)
    assert not any(r.startswith(("oversubscribed", "starved")) for r in rules(a))
    assert finding(a, "no-schedstat").verdict is Verdict.OK


def test_all_none_host_and_switches_do_not_crash() -> None:
    procs = [Proc(ROOT, (Load(cpu=0.5, delay=0.5),) * 5, ppid=1, ctx=False, pools=None)]
    a = judge(procs, vcpus=2, host=Host(outside=None, steal=None, psi=None))
    assert a.verdict is Verdict.OVERSUBSCRIBED
    assert finding(a, "oversubscribed-threads").evidence["involuntary_ctx_per_cpu_s"] is None


# ------------------------------------------------------------------ ordering and catalogue


def test_findings_come_worst_first() -> None:
    procs = [
        *busy_workers(2, 2, delay=0.5, pools=("libgomp",)),
        Proc(401, (Load(cpu=0.5),), ppid=999),  # orphan: at-risk
        Proc(301, (IDLE,), ppid=201, cmdline="python worker.py 0"),  # fork-after-threads: ok
    ]
    a = judge(procs, vcpus=2)
    assert rules(a) == ["oversubscribed-pools", "orphan", "fork-after-threads"]
    ranks = [f.verdict.rank for f in a.findings]
    assert ranks == sorted(ranks, reverse=True)


def test_every_rule_is_reachable_and_documented() -> None:
    scenarios = [
        judge(busy_workers(2, 2, delay=0.5, pools=("libgomp",)), vcpus=2),
        judge(busy_workers(4, 1, delay=0.5), vcpus=2),
        judge(busy_workers(2, 2, delay=0.5), vcpus=2),
        judge([Proc(ROOT, (Load(cpu=0.5),), ppid=1)], vcpus=1, host=Host(periods=4, throttled=2)),
        judge(busy_workers(2, 1, delay=0.34), vcpus=2, host=Host(outside=1.0)),
        judge(busy_workers(2, 1, delay=0.34), vcpus=2),
        judge([root(), Proc(201, (Load(cpu=0.3),) * 3)], vcpus=2),
        judge(_pool_workers({}), vcpus=4),
        judge(_forked([IDLE]), vcpus=2, dt=5.0),
        judge(_forked([IDLE], cmdline="python train.py"), vcpus=2, dt=1.0),
        judge([root(), Proc(401, (Load(cpu=0.5),), ppid=999)], vcpus=2),
        judge([Proc(ROOT, (IDLE,), ppid=1, schedstat=False)], vcpus=2),
        judge(busy_workers(4, 1, delay=0.0), vcpus=2),
    ]
    fired = {f.rule for a in scenarios for f in a.findings}
    assert fired == set(RULES)
    assert all(RULES[r].summary and "\n" not in RULES[r].summary for r in RULES)


# ------------------------------------------------------------------ whose threads (issue 12)

LIMITED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def test_busy_threads_with_pools_limited_to_one_are_application_threads() -> None:
    # dask LocalCluster(n_workers=2, threads_per_worker=2): its nannies set the variables to
    # 1, and the extra runnable threads are the task threads.
    procs = busy_workers(2, 2, delay=0.5, pools=("libgomp", "openblas"), env=LIMITED)
    a = judge(procs, vcpus=2)
    assert rules(a) == ["oversubscribed-threads"]
    f = a.findings[0]
    assert a.verdict is Verdict.OVERSUBSCRIBED
    assert f.severity is Severity.WARNING
    assert "application's own threads" in f.message
    assert "OMP_NUM_THREADS=1" in f.message  # the evidence that the pools are limited
    assert "threads_per_worker" in f.fix
    assert "workers x threads per worker <= 2" in f.fix
    assert "set OMP_NUM_THREADS" not in f.fix and "OPENBLAS_NUM_THREADS=1" not in f.fix


def test_a_live_value_of_one_limits_a_pool_like_a_variable() -> None:
    procs = busy_workers(2, 2, delay=0.5, pools=("openblas",), env={})
    procs = [replace(p, live={"openblas": 1}) if p.pid != ROOT else p for p in procs]
    a = judge(procs, vcpus=2)
    f = finding(a, "oversubscribed-threads")
    assert "OpenBLAS at 1 thread, read live" in f.message
    assert "OPENBLAS_NUM_THREADS" not in f.fix


def test_threads_of_a_process_without_pools_are_application_threads() -> None:
    # `OMP_NUM_THREADS=1 oversub check -- oversub stress --procs 2 --threads 2`: the variable
    # is already 1, and stress's hashlib threads are no pool: never ask for it again.
    a = judge(busy_workers(2, 2, delay=0.5, env={"OMP_NUM_THREADS": "1"}), vcpus=2)
    f = finding(a, "oversubscribed-threads")
    assert "map no native pool" in f.message
    assert "OMP_NUM_THREADS" not in f.fix


def test_busy_threads_exceed_never_asks_for_a_variable_already_set() -> None:
    # After a DataLoader fix: every worker's pools at 1, threads still busy beyond N.
    procs = [
        root(),
        *(
            Proc(
                201 + i,
                (Load(cpu=0.3),) * 2,
                pools=("libgomp", "openblas", "torch"),
                env=LIMITED,
                live={"openblas": 1},
            )
            for i in range(2)
        ),
    ]
    a = judge(procs, vcpus=2)
    f = finding(a, "busy-threads-exceed")
    assert "-> set" not in f.fix
    assert "already run at most 1 thread" in f.fix
    assert "set OMP_NUM_THREADS" not in f.fix and "set OPENBLAS" not in f.fix


def test_each_code_alternative_is_offered_only_for_the_pools_it_controls() -> None:
    # A DataLoader worker: torch's pool, its libgomp and NumPy's OpenBLAS, all by default.
    procs = busy_workers(2, 2, delay=0.5, pools=("libgomp", "openblas", "torch"))
    f = finding(judge(procs, vcpus=2), "oversubscribed-pools")
    assert "torch.set_num_threads(1) for PyTorch intra-op pool (libtorch_cpu)" in f.fix
    assert "threadpoolctl.threadpool_limits(1) for GNU OpenMP (libgomp) and OpenBLAS" in f.fix


def test_only_openblas_needs_a_fix_when_torch_is_limited() -> None:
    # torch's pool limited by its variable; OpenBLAS read live at 2: only OpenBLAS is named.
    env = {"OMP_NUM_THREADS": "1"}
    procs = busy_workers(2, 2, delay=0.5, pools=("libgomp", "openblas", "torch"), env=env)
    procs = [replace(p, live={"openblas": 2}) if p.pid != ROOT else p for p in procs]
    f = finding(judge(procs, vcpus=2), "oversubscribed-pools")
    assert f.evidence["pools"] == "openblas"
    assert "torch.set_num_threads" not in f.fix
    assert "threadpoolctl.threadpool_limits(1) for OpenBLAS" in f.fix
    assert "OpenBLAS with OMP_NUM_THREADS=1" not in f.fix


def test_an_idle_pool_under_outside_load_is_not_starved() -> None:
    # An idle Pool(8): 0.9% CPU, demand 0.08, its wake-ups waiting 0.069 CPU-s/s under 2 CPUs
    # of other load. Past min-wait, but nobody waits for that tree.
    procs = [root(), *(Proc(201 + i, (Load(cpu=0.0011, delay=0.0086),)) for i in range(8))]
    a = judge(procs, vcpus=2, host=Host(outside=2.0))
    assert a.verdict is Verdict.OK, rules(a)


@pytest.mark.parametrize(("demand", "starved"), [(0.19, False), (0.21, True)])
def test_starvation_needs_a_fifth_of_a_cpu_of_demand(demand: float, starved: bool) -> None:
    procs = [Proc(ROOT, (Load(cpu=demand / 2, delay=demand / 2),), ppid=1)]
    a = judge(procs, vcpus=2, host=Host(outside=1.5))
    assert (a.verdict is Verdict.STARVED) is starved


def test_single_thread_oversubscription_says_fewer_processes_win_fairness() -> None:
    f = finding(judge(busy_workers(4, 1, delay=0.5), vcpus=2), "oversubscribed-processes")
    assert "fairness and latency, not throughput" in f.message


# ------------------------------------------------------------------ latent pools (issue 12)


def _idle_numpy(count: int, live: Mapping[str, int] | None, threads: int = 2) -> list[Proc]:
    """`count` idle processes that imported NumPy (OpenBLAS started its pool at import)."""
    return [
        root(),
        *(
            Proc(201 + i, (IDLE,) * threads, pools=("openblas",), env={}, live=live)
            for i in range(count)
        ),
    ]


def test_idle_processes_with_default_pools_are_at_risk() -> None:
    iv = analyse(_idle_numpy(2, {"openblas": 2}), 2)
    assert (iv.totals.pool_threads, iv.totals.pool_processes) == (4, 2)
    a = assess(iv, TH)
    assert a.verdict is Verdict.AT_RISK
    f = finding(a, "pool-default")
    assert f.pids == (201, 202)
    assert "OpenBLAS 2 threads in pids 201, 202 (read live)" in f.message
    assert "idle now, but when they run at once, 4 threads compete for 2 CPUs" in f.message
    assert f.evidence["pool_threads"] == 4
    assert f.evidence["live"] == "pid 201 2; pid 202 2"
    assert "OPENBLAS_NUM_THREADS=1" in f.fix


def test_idle_processes_limited_in_code_are_ok() -> None:
    # threadpoolctl.threadpool_limits(1) after import: the threads stay, the live value is 1.
    iv = analyse(_idle_numpy(2, {"openblas": 1}), 2)
    assert (iv.totals.pool_threads, iv.totals.pool_processes) == (0, 0)
    assert assess(iv, TH).findings == ()


@pytest.mark.parametrize(("threads", "fires"), [(1, False), (2, True)])
def test_without_live_values_existing_pool_threads_are_the_evidence(
    threads: int, fires: bool
) -> None:
    # Memory unreadable: OpenBLAS starts N - 1 threads at load, so N threads show its pool;
    # a process limited before the pool started has none.
    a = judge(_idle_numpy(2, None, threads=threads), vcpus=2)
    assert ("pool-default" in rules(a)) is fires


def test_pools_that_fit_n_are_no_risk() -> None:
    a = judge(_idle_numpy(2, {"openblas": 2}), vcpus=4)
    assert a.findings == ()


def test_an_idle_parent_does_not_count_beside_busy_workers() -> None:
    # multiprocessing backend of joblib: an idle parent (and its resource tracker) hold
    # default pools too, but only the 2 busy workers can run theirs at the same time.
    idle = [
        Proc(ROOT, (IDLE, IDLE), ppid=1, pools=("libgomp", "openblas"), live={"openblas": 2}),
        Proc(150, (IDLE,), pools=("openblas",), live={"openblas": 2}, cmdline="tracker"),
    ]
    busy = [
        Proc(
            201 + i,
            (Load(cpu=0.4),) * 2,
            pools=("libgomp", "openblas"),
            live={"openblas": 2},
            cmdline=f"python worker.py {i}",
        )
        for i in range(2)
    ]
    f = finding(judge([*idle, *busy], vcpus=2), "pool-default")
    assert f.pids == (201, 202)
    assert f.evidence["processes"] == 2
    # libgomp is mapped but the live OpenBLAS size explains every active thread.
    assert f.evidence["pools"] == "openblas"
    assert "GNU OpenMP" not in f.message


def test_a_pool_raised_in_code_above_its_variable_is_named() -> None:
    # OPENBLAS_NUM_THREADS=1 in the environment, but the process set 2 in code (read live).
    env = {"OPENBLAS_NUM_THREADS": "1"}
    procs = busy_workers(2, 2, delay=0.5, pools=("openblas",), env=env)
    procs = [replace(p, live={"openblas": 2}) if p.pid != ROOT else p for p in procs]
    f = finding(judge(procs, vcpus=2), "oversubscribed-pools")
    assert "set OpenBLAS to 2 threads in code, above its variable -> limit it to 1" in f.fix
    assert "-> set OPENBLAS_NUM_THREADS" not in f.fix


def test_unknown_pools_get_the_generic_advice() -> None:
    # Another user's processes: maps and environ refused, nothing to say which pool it is.
    procs = busy_workers(2, 2, delay=0.5, pools=None, env=None)
    procs = [replace(p, env=None) for p in procs]
    f = finding(judge(procs, vcpus=2), "oversubscribed-threads")
    assert "set OMP_NUM_THREADS=1" in f.fix and "threadpoolctl" in f.fix
    # No pool known to spin, no cost measured: nothing makes it critical (docs/rules.md).
    assert f.severity is Severity.WARNING and "Cost not measured here" in f.message
    assert f.evidence["cost"] == "unmeasured" and f.evidence["wait_share"] is None


@pytest.mark.parametrize(
    ("threads", "live_threads", "blamed_gomp"),
    [
        (2, {"openblas": 1}, False),  # OpenBLAS's thread and the caller: every thread
        (3, {"openblas": 1}, True),  # a thread OpenBLAS does not account for: OpenMP's team
        (2, {"openblas": 0}, True),  # forked: OpenBLAS's threads do not exist yet
    ],
)
def test_other_default_pools_are_blamed_unless_live_pools_account_for_every_thread(
    threads: int, live_threads: Mapping[str, int], blamed_gomp: bool
) -> None:
    # Hogwild workers map libgomp, torch and NumPy's OpenBLAS; scikit-learn's only use BLAS.
    loads = (Load(cpu=0.5, delay=0.5),) * 2 + (IDLE,) * (threads - 2)
    procs = [
        root(),
        *(
            Proc(
                201 + i,
                loads,
                pools=("libgomp", "openblas"),
                live={"openblas": 2},
                live_threads=live_threads,
            )
            for i in range(2)
        ),
    ]
    f = finding(judge(procs, vcpus=2), "oversubscribed-pools")
    assert ("libgomp" in str(f.evidence["pools"]).split(",")) is blamed_gomp
