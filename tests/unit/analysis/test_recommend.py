"""Thread plans and CPU bindings on synthetic budgets."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oversub.analysis.plans import binding_plan, make_plan, synthetic_budget, threads_for
from oversub.core.model import Budget, CpuQuota, CpusetLimit
from oversub.core.pools import RECOMMENDED_VARS


def budget(
    cores: tuple[tuple[int, ...], ...],
    *,
    vcpus: int | None = None,
    affinity: tuple[int, ...] | None = None,
    numa: Mapping[int, tuple[int, ...]] | None = None,
    cpuset: tuple[int, ...] | None = None,
    quota: float | None = None,
) -> Budget:
    """A budget over the CPUs of `cores`; N defaults to the allowed CPU count."""
    cpus = tuple(sorted(cpu for core in cores for cpu in core))
    allowed = affinity if affinity is not None else cpus
    if cpuset is not None:
        allowed = tuple(sorted(set(allowed) & set(cpuset)))
    return Budget(
        pid=1,
        vcpus=vcpus if vcpus is not None else len(allowed),
        logical=len(cpus),
        physical=len(cores),
        affinity=affinity if affinity is not None else cpus,
        quota=(
            None
            if quota is None
            else CpuQuota(
                cpus=quota,
                quota_us=int(quota * 100_000),
                period_us=100_000,
                cgroup="/job",
                version=2,
                stat_path=None,
            )
        ),
        cpuset=None if cpuset is None else CpusetLimit(cpus=cpuset, cgroup="/job", version=2),
        numa=numa if numa is not None else {0: cpus},
        cores=cores,
        limited_by="quota" if quota is not None else "none",
    )


SMT4 = ((0, 4), (1, 5), (2, 6), (3, 7))
"""4 cores x 2 SMT threads, Linux numbering: siblings are n and n+4."""


def core_of(cpu: int) -> int:
    return cpu % 4


# --------------------------------------------------------------------------- threads_for


@pytest.mark.parametrize(
    ("vcpus", "procs", "workers", "expected"),
    [
        (8, 2, 0, 4),
        (7, 2, 0, 3),  # floor, never round up
        (2, 4, 0, 1),  # M > N still gets one thread
        (16, 4, 2, 2),  # (16 - 8) / 4
        (8, 4, 2, 1),  # workers take everything: still 1
        (8, 2, 3, 1),
        (1, 1, 0, 1),
    ],
)
def test_threads_for(vcpus: int, procs: int, workers: int, expected: int) -> None:
    assert threads_for(vcpus, procs, workers) == expected


@pytest.mark.parametrize(("procs", "workers"), [(0, 0), (-1, 0), (2, -1)])
def test_threads_for_rejects_bad_counts(procs: int, workers: int) -> None:
    with pytest.raises(ValueError):
        threads_for(8, procs, workers)


# --------------------------------------------------------------------------- make_plan


def measured(vcpus: int) -> Budget:
    """`vcpus` CPUs, one per core, as if measured (pid != 0): a binding is planned."""
    return synthetic_budget(vcpus)._replace(pid=4242, notes=())


def test_plan_divides_budget_and_exports_every_variable() -> None:
    plan = make_plan(measured(8), 3)
    assert plan.threads_per_process == 2
    assert plan.leftover == 2
    assert not plan.oversubscribed
    assert list(plan.env) == list(RECOMMENDED_VARS)
    assert set(plan.env.values()) == {"2"}
    assert plan.worker_env == {}
    assert plan.warnings == ()
    assert plan.binding == ((0, 1), (2, 3), (4, 5))


def test_a_budget_given_with_cpus_gets_no_binding() -> None:
    # Issue 11 item 5: `--procs 2 --workers 1 --cpus 8` on a 2-CPU host printed
    # `taskset -c 4-7`: CPUs that do not exist here.
    plan = make_plan(synthetic_budget(8), 2, 1)
    assert plan.binding == ()
    assert not any("binding" in w for w in plan.warnings)


def test_plan_more_processes_than_cpus() -> None:
    plan = make_plan(measured(2), 4)
    assert plan.threads_per_process == 1
    assert plan.oversubscribed
    assert plan.leftover == -2
    assert plan.binding == ()
    assert any("M/N = 2.0x" in w and "at most 2 processes" in w for w in plan.warnings)
    assert any("no exclusive CPU binding" in w for w in plan.warnings)


def test_warnings_come_most_important_first() -> None:
    # Issue 11 item 12: "cannot fit" before the binding, the quota and the worker advice.
    plan = make_plan(measured(2), 3, 2)
    assert "even one thread each oversubscribes" in plan.warnings[0]
    assert "alone fill the 2 vCPUs" in plan.warnings[1]
    assert "no exclusive CPU binding" in plan.warnings[2]
    assert "worker_init_fn" in plan.warnings[-1]


def test_plan_with_workers_shares_cpus_with_them() -> None:
    plan = make_plan(measured(16), 4, 2)
    assert plan.threads_per_process == 2
    assert plan.leftover == 0
    assert not plan.oversubscribed
    assert set(plan.worker_env.values()) == {"1"}
    assert list(plan.worker_env) == list(RECOMMENDED_VARS)
    # Each process is bound to T + W CPUs: its workers run on them too.
    assert [len(cpus) for cpus in plan.binding] == [4, 4, 4, 4]
    assert any("worker_init_fn" in w and "OpenBLAS" in w for w in plan.warnings)


def test_plan_workers_eat_the_budget() -> None:
    plan = make_plan(synthetic_budget(8), 4, 2)
    assert plan.threads_per_process == 1
    assert plan.oversubscribed
    assert plan.leftover == 8 - 4 * 3
    assert any("alone fill the 8 vCPUs" in w and "1 thread" in w for w in plan.warnings)
    assert any("at most 1 worker per process" in w for w in plan.warnings)


def test_plan_with_no_room_for_workers_says_so() -> None:
    # 2 processes on 2 CPUs leave no CPU for any worker: "at most 0 workers" helps nobody.
    plan = make_plan(synthetic_budget(2), 2, 1)
    assert any("no workers" in w for w in plan.warnings)
    assert not any("at most 0" in w for w in plan.warnings)


def test_plan_workers_leave_less_than_a_cpu_per_process() -> None:
    # 5 - 2*2 = 1 CPU for 2 main processes: T = 1 and 2*(1+2) = 6 > 5.
    plan = make_plan(synthetic_budget(5), 2, 2)
    assert plan.oversubscribed
    assert any("less than one CPU per main process" in w for w in plan.warnings)


def test_plan_fractional_quota_warns_about_rounding() -> None:
    plan = make_plan(budget(SMT4, vcpus=2, quota=2.5), 1)
    assert plan.threads_per_process == 2
    assert any("2.5 CPUs" in w and "rounded-down" in w for w in plan.warnings)
    whole = make_plan(budget(SMT4, vcpus=2, quota=2.0), 1)
    assert not any("rounded-down" in w for w in whole.warnings)


def test_plan_under_quota_binds_only_the_quota() -> None:
    # Affinity 8 CPUs, quota 4: 2 processes x 2 threads, 4 CPUs bound in total.
    plan = make_plan(budget(SMT4, vcpus=4, quota=4.0), 2)
    assert plan.threads_per_process == 2
    assert sum(len(cpus) for cpus in plan.binding) == 4


def test_plan_keeps_launcher_source() -> None:
    plan = make_plan(synthetic_budget(4), 2, procs_source="LOCAL_WORLD_SIZE")
    assert plan.procs_source == "LOCAL_WORLD_SIZE"


@pytest.mark.parametrize(("procs", "workers"), [(0, 0), (2, -1)])
def test_plan_rejects_bad_counts(procs: int, workers: int) -> None:
    with pytest.raises(ValueError):
        make_plan(synthetic_budget(4), procs, workers)


def test_synthetic_budget() -> None:
    b = synthetic_budget(3)
    assert (b.vcpus, b.logical, b.affinity) == (3, 3, (0, 1, 2))
    assert b.cores == ((0,), (1,), (2,))
    assert b.numa == {0: (0, 1, 2)}
    assert b.limited_by == "none"
    assert b.quota is None and b.cpuset is None
    assert "not measured" in b.notes[0]
    with pytest.raises(ValueError):
        synthetic_budget(0)


# --------------------------------------------------------------------------- binding


def assert_disjoint_and_allowed(bindings: tuple[tuple[int, ...], ...], b: Budget) -> None:
    seen = [cpu for cpus in bindings for cpu in cpus]
    assert len(seen) == len(set(seen)), bindings
    allowed = set(b.affinity) & (set(b.cpuset.cpus) if b.cpuset else set(b.affinity))
    assert set(seen) <= allowed, bindings


def test_binding_prefers_distinct_physical_cores() -> None:
    b = budget(SMT4)
    bindings = binding_plan(b, 2, 2)
    assert bindings == ((0, 1), (2, 3))
    for cpus in bindings:
        assert len({core_of(cpu) for cpu in cpus}) == len(cpus)


def test_binding_keeps_siblings_with_one_process() -> None:
    b = budget(SMT4)
    bindings = binding_plan(b, 2, 4)
    assert bindings == ((0, 1, 4, 5), (2, 3, 6, 7))
    # No core is split between the two processes.
    cores = [{core_of(cpu) for cpu in cpus} for cpus in bindings]
    assert not cores[0] & cores[1]


def test_binding_uses_siblings_only_past_the_cores() -> None:
    b = budget(SMT4)
    (cpus,) = binding_plan(b, 1, 5)
    assert {0, 1, 2, 3} <= set(cpus)
    assert len(cpus) == 5
    (three,) = binding_plan(b, 1, 3)
    assert three == (0, 1, 2)


def test_binding_uneven_core_share() -> None:
    b = budget(SMT4)
    bindings = binding_plan(b, 3, 2)
    assert_disjoint_and_allowed(bindings, b)
    assert [len(cpus) for cpus in bindings] == [2, 2, 2]
    cores = [{core_of(cpu) for cpu in cpus} for cpus in bindings]
    # 4 cores for 3 processes: no core is shared between two of them.
    for i in range(3):
        for j in range(i + 1, 3):
            assert not cores[i] & cores[j]


def test_binding_splits_a_core_only_when_it_must() -> None:
    # 3 cores x 2 threads, 2 processes x 3: one core has to be shared.
    b = budget(((0, 3), (1, 4), (2, 5)))
    bindings = binding_plan(b, 2, 3)
    assert_disjoint_and_allowed(bindings, b)
    assert sorted(cpu for cpus in bindings for cpu in cpus) == [0, 1, 2, 3, 4, 5]


def test_binding_keeps_processes_in_one_numa_node() -> None:
    cores = tuple((c,) for c in range(8))
    numa = {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    b = budget(cores, numa=numa)
    bindings = binding_plan(b, 2, 3)
    assert bindings == ((0, 1, 2), (4, 5, 6))
    # Three processes of 2: the second node starts where the first is full.
    assert binding_plan(b, 3, 2) == ((0, 1), (2, 3), (4, 5))


def test_binding_numa_with_interleaved_ids_and_smt() -> None:
    # Node 0 = even CPUs, node 1 = odd CPUs; cores pair n with n+8.
    cores = tuple((c, c + 8) for c in range(8))
    numa = {0: tuple(range(0, 16, 2)), 1: tuple(range(1, 16, 2))}
    b = budget(cores, numa=numa)
    bindings = binding_plan(b, 2, 4)
    assert bindings == ((0, 2, 4, 6), (1, 3, 5, 7))


def test_binding_spans_nodes_only_when_too_big_for_one() -> None:
    cores = tuple((c,) for c in range(4))
    b = budget(cores, numa={0: (0, 1), 1: (2, 3)})
    (cpus,) = binding_plan(b, 1, 3)
    assert len(cpus) == 3
    assert_disjoint_and_allowed((cpus,), b)


def test_binding_within_affinity_subset() -> None:
    b = budget(SMT4, affinity=(2, 3, 6, 7))
    bindings = binding_plan(b, 2, 1)
    assert bindings == ((2,), (3,))
    assert binding_plan(b, 1, 4) == ((2, 3, 6, 7),)
    assert binding_plan(b, 1, 5) == ()


def test_binding_within_cpuset() -> None:
    b = budget(SMT4, cpuset=(0, 1, 2))
    assert binding_plan(b, 3, 1) == ((0,), (1,), (2,))
    assert binding_plan(b, 2, 2) == ()


def test_binding_oversubscribed_is_empty() -> None:
    b = budget(SMT4)
    assert binding_plan(b, 9, 1) == ()
    assert binding_plan(b, 3, 3) == ()


def test_binding_cpus_unknown_to_topology() -> None:
    # No NUMA or core information: every CPU is its own core in one node.
    b = budget(SMT4)._replace(numa={}, cores=())
    assert binding_plan(b, 2, 2) == ((0, 1), (2, 3))


@pytest.mark.parametrize(("procs", "each"), [(0, 1), (1, 0)])
def test_binding_rejects_bad_counts(procs: int, each: int) -> None:
    with pytest.raises(ValueError):
        binding_plan(budget(SMT4), procs, each)


@pytest.mark.parametrize("procs", range(1, 9))
@pytest.mark.parametrize("each", range(1, 9))
def test_binding_invariants(procs: int, each: int) -> None:
    b = budget(SMT4, numa={0: (0, 1, 4, 5), 1: (2, 3, 6, 7)})
    bindings = binding_plan(b, procs, each)
    if procs * each > 8:
        assert bindings == ()
        return
    assert len(bindings) == procs
    assert all(len(cpus) == each for cpus in bindings)
    assert_disjoint_and_allowed(bindings, b)
    node_of = {cpu: node for node, cpus in b.numa.items() for cpu in cpus}
    if each <= 4:
        # Fits in one node: must not straddle two when first-fit leaves room.
        straddling = [cpus for cpus in bindings if len({node_of[c] for c in cpus}) > 1]
        whole_fits = 2 * (4 // each)
        assert len(straddling) <= max(0, procs - whole_fits)


@st.composite
def topologies(draw: st.DrawFn) -> tuple[Budget, int]:
    """(budget, number of NUMA nodes): cores of 1-4 SMT threads with shuffled CPU ids, spread
    over 1-3 NUMA nodes, and an affinity that may leave some CPUs out."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=24))
    ids = draw(st.permutations(range(sum(sizes))))
    cores, at = [], 0
    for size in sizes:
        cores.append(tuple(sorted(ids[at : at + size])))
        at += size
    nodes = draw(st.integers(1, 3))
    node_of_core = [draw(st.integers(0, nodes - 1)) for _ in cores]
    numa = {
        n: tuple(
            sorted(c for core, m in zip(cores, node_of_core, strict=True) if m == n for c in core)
        )
        for n in range(nodes)
    }
    numa = {n: cpus for n, cpus in numa.items() if cpus}
    every = sorted(ids)
    affinity = tuple(sorted(draw(st.sets(st.sampled_from(every), min_size=1))))
    return budget(tuple(cores), affinity=affinity, numa=numa), len(numa)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(topologies(), st.integers(1, 12), st.integers(1, 8))
def test_binding_invariants_on_any_topology(
    topology: tuple[Budget, int], procs: int, each: int
) -> None:
    b, nodes = topology
    bindings = binding_plan(b, procs, each)
    if procs * each > len(b.affinity):
        assert bindings == ()
        return
    assert len(bindings) == procs
    assert all(len(cpus) == each for cpus in bindings)
    assert_disjoint_and_allowed(bindings, b)
    core_of_cpu = {cpu: core for core in b.cores for cpu in core}
    allowed_cores = {core_of_cpu[cpu] for cpu in b.affinity}
    if nodes == 1 and len(allowed_cores) >= procs * each:
        # Enough physical cores for one thread each: no process doubles up on a core.
        for cpus in bindings:
            assert len({core_of_cpu[cpu] for cpu in cpus}) == each, bindings
