"""What doctor reads from its counts: what a runtime sized itself from, its width, its knob.

The budgets are those doctor compares on a 2-CPU machine (host, affinity to 1 CPU, a quota
of 1 CPU) and inside a container with a 1.5-CPU quota (no quota of its own to vary); the
counts are those measured here (docs/cli.md, `oversub doctor`)."""

from __future__ import annotations

import pytest

from oversub.analysis.selfsizing import (
    busy_threads,
    compute_threads,
    knob,
    plan_threads,
    row,
    sizing,
    sizing_variables,
)
from oversub.core.checkups import (
    CHECKUPS_BY_KEY,
    Measurement,
    RunKind,
    SeenBudget,
    SizedFrom,
    Status,
)
from oversub.core.samples import ThreadSample

HOST = SeenBudget(online=2, affinity=2, quota=None, vcpus=2)
ONE_CPU = SeenBudget(online=2, affinity=1, quota=None, vcpus=1)
QUOTA_1 = SeenBudget(online=2, affinity=2, quota=1.0, vcpus=1)
IN_CONTAINER = SeenBudget(online=2, affinity=2, quota=1.5, vcpus=1)
IN_CONTAINER_ONE_CPU = SeenBudget(online=2, affinity=1, quota=1.5, vcpus=1)


@pytest.mark.parametrize(
    ("counts", "source", "ignores_quota", "ignores_affinity"),
    [
        # OpenBLAS, torch's libgomp, Arrow, scikit-learn's OpenMP: affinity only
        ((1, 0, 1), SizedFrom.AFFINITY, True, False),
        # polars: its N
        ((5, 3, 3), SizedFrom.BUDGET, False, False),
        # ONNX Runtime, numexpr: the same whatever the budget
        ((2, 2, 2), SizedFrom.CORES, True, True),
        # a pool sized from the quota alone (never seen here; the hypothesis exists)
        ((3, 3, 2), SizedFrom.QUOTA, False, True),
        ((0, 0, 0), SizedFrom.NO_THREADS, None, None),
        # no single input explains it
        ((3, 1, 2), SizedFrom.UNCLEAR, None, None),
    ],
)
def test_sizing_on_the_three_budgets_of_a_2_cpu_host(
    counts: tuple[int, int, int],
    source: SizedFrom,
    ignores_quota: bool | None,
    ignores_affinity: bool | None,
) -> None:
    found = sizing(list(zip((HOST, ONE_CPU, QUOTA_1), counts, strict=True)))
    assert found.source is source
    assert found.ignores_quota is ignores_quota
    assert found.ignores_affinity is ignores_affinity


def test_without_a_quota_run_the_quota_is_not_told() -> None:
    found = sizing([(HOST, 1), (ONE_CPU, 0)])
    assert found.source is SizedFrom.AFFINITY
    assert found.ignores_quota is None  # budget and affinity were the same in both runs


def test_in_a_container_a_runtime_that_reads_affinity_ignores_its_quota() -> None:
    # The 1.5-CPU quota binds in both runs (N = 1): a count that still moves with
    # affinity cannot come from N.
    found = sizing([(IN_CONTAINER, 1), (IN_CONTAINER_ONE_CPU, 0)])
    assert (found.source, found.ignores_quota) == (SizedFrom.AFFINITY, True)


def test_in_a_container_an_unchanged_count_is_not_told_apart() -> None:
    # polars there: the same count under both, which its N and the machine's CPUs explain.
    found = sizing([(IN_CONTAINER, 3), (IN_CONTAINER_ONE_CPU, 3)])
    assert found.source is SizedFrom.UNCLEAR
    assert (found.ignores_quota, found.ignores_affinity) == (None, None)


def test_one_budget_tells_nothing() -> None:
    assert sizing([(HOST, 1)]).source is SizedFrom.UNCLEAR
    assert sizing([(HOST, 1), (HOST, 1)]).source is SizedFrom.UNCLEAR
    assert sizing([]).source is SizedFrom.UNCLEAR


def test_compute_threads_leave_out_what_is_no_pool() -> None:
    started = {"polars": 5, "jemalloc": 4, "python": 1, "unattributed": 2, "gloo": 1}
    assert compute_threads(started) == 7


def _thread(tid: int, cpu_ms: int, delay_ms: int | None) -> ThreadSample:
    delay = None if delay_ms is None else delay_ms * 1_000_000
    return ThreadSample(tid, "R", cpu_ms * 1_000_000, delay, None, None)


def test_busy_threads_count_runnable_time_against_the_share() -> None:
    before = [_thread(1, 0, 0), _thread(2, 0, 0), _thread(3, 0, 0), _thread(4, 0, None)]
    after = [
        _thread(1, 300, 0),  # ran 60 % of 0.5 s
        _thread(2, 50, 60),  # ran 10 %, waited 12 %: runnable 22 %
        _thread(3, 90, 0),  # 18 %: not busy
        _thread(4, 120, None),  # no schedstat: CPU time alone, 24 %
        _thread(5, 500, 0),  # not there at the first reading
    ]
    assert busy_threads(before, after, 0.5, 0.20) == 3
    assert busy_threads(before, after, 0.0, 0.20) == 0


def test_knob_follows_the_pool_it_started() -> None:
    numpy = CHECKUPS_BY_KEY["numpy"]
    assert knob(numpy, {"openblas": 1}, 1).variable == "OPENBLAS_NUM_THREADS"
    # NumPy built on MKL starts MKL's pool: its knob is MKL's
    assert knob(numpy, {"mkl": 1}, 2).variable == "MKL_NUM_THREADS"
    # numba's own pool is named when its threads are there, whatever else started
    assert knob(CHECKUPS_BY_KEY["numba"], {"openblas": 1, "numba": 1}, 1).variable == (
        "NUMBA_NUM_THREADS"
    )
    torch = knob(CHECKUPS_BY_KEY["torch"], {"libgomp": 1}, 3)
    assert (torch.variable, torch.code) == ("OMP_NUM_THREADS", "torch.set_num_threads(3)")
    ort = knob(CHECKUPS_BY_KEY["onnxruntime"], {"onnxruntime": 2}, 1)
    assert (ort.variable, ort.code) == (None, "SessionOptions.intra_op_num_threads = 1")
    duck = knob(CHECKUPS_BY_KEY["duckdb"], {"unattributed": 9}, 2)
    assert (duck.variable, duck.code) == (None, "duckdb.connect(config={'threads': 2})")


def test_sizing_variables_are_those_set_for_its_pool() -> None:
    env = {"OMP_NUM_THREADS": "1", "POLARS_MAX_THREADS": "2"}
    assert sizing_variables(CHECKUPS_BY_KEY["torch"], env) == {"OMP_NUM_THREADS": "1"}
    assert sizing_variables(CHECKUPS_BY_KEY["numpy"], env) == {}
    assert sizing_variables(CHECKUPS_BY_KEY["polars"], env) == {"POLARS_MAX_THREADS": "2"}


def _measured(
    kind: RunKind, budget: SeenBudget, started: dict[str, int], busy: int | None
) -> Measurement:
    return Measurement(kind, Status.MEASURED, budget, started, 0, busy)


def test_row_judges_m_processes_of_the_busy_width_against_n() -> None:
    numpy = CHECKUPS_BY_KEY["numpy"]
    runs = [
        _measured(RunKind.BUDGET, QUOTA_1, {"openblas": 1}, 2),
        _measured(RunKind.HOST, HOST, {"openblas": 1}, None),
        _measured(RunKind.AFFINITY, ONE_CPU, {}, None),
    ]
    r = row(numpy, "2.4", runs, RunKind.BUDGET, vcpus=1, procs=1, env={})
    assert (r.started, r.width, r.width_measured, r.oversubscribes) == (1, 2, True, True)
    assert r.sizing is not None and r.sizing.ignores_quota is True
    assert r.knob.threads == plan_threads(1, 1) == 1
    fine = row(numpy, "2.4", runs, RunKind.BUDGET, vcpus=4, procs=2, env={})
    assert fine.oversubscribes is False  # 2 x 2 on 4


def test_row_without_a_busy_reading_counts_every_thread_and_the_caller() -> None:
    runs = [_measured(RunKind.HOST, HOST, {"onnxruntime": 2}, None)]
    r = row(CHECKUPS_BY_KEY["onnxruntime"], None, runs, RunKind.HOST, vcpus=2, procs=1, env={})
    assert (r.width, r.width_measured, r.oversubscribes) == (3, False, True)


def test_row_whose_asked_run_failed_judges_nothing() -> None:
    runs = [
        Measurement(RunKind.BUDGET, Status.NOT_RUN, error="needs root"),
        _measured(RunKind.HOST, HOST, {"openblas": 1}, None),
    ]
    r = row(CHECKUPS_BY_KEY["numpy"], None, runs, RunKind.BUDGET, vcpus=1, procs=1, env={})
    assert (r.started, r.width, r.oversubscribes) == (None, None, None)
    assert r.knob.variable == "OPENBLAS_NUM_THREADS"
