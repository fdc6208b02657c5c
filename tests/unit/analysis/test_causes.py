"""The cause of an oversubscription read from the threads' owners, and its wording.

Each case is a table row of issue 21 (2 processes on 2 CPUs): the finding must name the
runtime that owns the busy threads and only its knob, with the severity its measured cost
gives; the GIL and gloo get no thread cap; a pool that matches its fix is never asked for
again; an idle pool that never ran does not make a working job at-risk.
"""

from __future__ import annotations

import itertools
import re

import pytest

from oversub.analysis.causes import cause
from oversub.analysis.fixes import app_thread_fix
from oversub.analysis.ownercounts import owner_counts
from oversub.analysis.verdict import assess
from oversub.core.names import Severity, Verdict
from oversub.core.results import Interval, OwnerCount, ProcessRates
from oversub.core.runtimes import describe
from oversub.core.thresholds import Thresholds
from tests.support.builders import (
    CAUSE_KINDS,
    IDLE,
    ROOT,
    Load,
    Proc,
    analyse,
    budget,
    cause_proc,
    make_interval,
    make_process_rates,
    make_totals,
)

VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def oc(
    owner: str,
    threads: int,
    busy: int = 0,
    ran: int | None = None,
    yielding_s: float | None = 0.0,
) -> OwnerCount:
    """`busy` threads runnable 1 s each, `yielding_s` of it in threads that yield."""
    ran = busy if ran is None else ran
    return OwnerCount(owner, threads, busy, ran, float(busy), yielding_s)


def worker(pid: int, counts: tuple[OwnerCount, ...], **kw: object) -> ProcessRates:
    threads = sum(c.threads for c in counts)
    busy = sum(c.busy for c in counts)
    base = make_process_rates(
        pid=pid,
        threads=threads,
        active_threads=busy,
        demand=float(busy),
        cpu_percent=100.0,
        pools=("openblas",),
        thread_env={},
        live_pools={"openblas": 2},
        live_threads={"openblas": 1},
        owner_counts=counts,
        owners={},
    )
    return base._replace(**kw)  # type: ignore[arg-type]


def tree(
    *procs: ProcessRates, demand: float | None = None, n: int = 2, delay: float = 0.5
) -> Interval:
    d = sum(p.demand for p in procs) if demand is None else demand
    root = make_process_rates(
        pid=1234,
        ppid=1,
        threads=1,
        active_threads=0,
        cpu_percent=1.0,
        demand=0.01,
        pools=None,
        thread_env=None,
    )
    return make_interval(
        vcpus=n,
        processes=(*procs, root),
        totals=make_totals(
            processes=len(procs),
            demand=d,
            active_threads=sum(p.active_threads for p in procs),
            busy_processes=len(procs),
            cpu_percent=100.0 * len(procs),
            run_delay_ratio=delay,
        ),
    )


def finding_of(iv: Interval):  # type: ignore[no-untyped-def]
    a = assess(iv, Thresholds())
    over = [f for f in a.findings if f.verdict is Verdict.OVERSUBSCRIBED]
    assert len(over) == 1, a.findings
    return over[0], a


ORT = (oc("onnxruntime", 1, 1), oc("python", 1, 1), oc("openblas", 1, 0))


def test_ort_names_intra_op_num_threads_alone_and_is_critical() -> None:
    f, _ = finding_of(tree(worker(11, ORT), worker(12, ORT)))
    assert f.rule == "oversubscribed-pools" and f.severity is Severity.CRITICAL
    assert "ONNX Runtime intra-op pool" in f.message and "spin" in f.message
    assert "SessionOptions.intra_op_num_threads = 1" in f.fix
    assert "environment variables do not reach it" in f.fix
    for var in VARIABLES:
        assert var not in f.fix, f.fix
    assert "OpenBLAS" not in f.fix and "threadpoolctl" not in f.fix
    assert f.evidence["pools"] == "onnxruntime"
    assert "OpenBLAS: 1 idle" in str(f.evidence["owners"])


def test_ort_after_its_fix_is_not_asked_again_and_its_idle_openblas_is_no_risk() -> None:
    fixed = (oc("python", 1, 1), oc("openblas", 1, 0))
    procs = [worker(p, fixed, run_delay_ratio=0.01) for p in (11, 12)]
    a = assess(tree(*procs, demand=2.0, delay=0.01), Thresholds())
    assert a.verdict is Verdict.OK, a.findings


def test_an_idle_tree_keeps_its_latent_pool_warning() -> None:
    idle = (oc("python", 1, 0, ran=1), oc("openblas", 1, 0))
    procs = [worker(p, idle, demand=0.01, cpu_percent=1.0, active_threads=0) for p in (11, 12)]
    a = assess(tree(*procs, demand=0.02), Thresholds())
    assert [f.rule for f in a.findings] == ["pool-default"], a.findings


@pytest.mark.parametrize(
    ("owner", "knob", "label"),
    [
        ("polars", "POLARS_MAX_THREADS=1", "polars (rayon)"),
        ("pyarrow", "OMP_NUM_THREADS=1", "Arrow CPU pool (pyarrow)"),
        ("numexpr", "NUMEXPR_NUM_THREADS=1", "numexpr"),
        ("numba", "NUMBA_NUM_THREADS=1", "numba parallel team"),
    ],
)
def test_sleeping_pools_are_a_cheap_warning_with_their_own_knob(
    owner: str, knob: str, label: str
) -> None:
    counts = (oc(owner, 2, 2), oc("python", 1, 0, ran=1), oc("jemalloc", 2, 0))
    f, _ = finding_of(tree(worker(11, counts), worker(12, counts)))
    assert f.rule == "oversubscribed-threads" and f.severity is Severity.WARNING
    assert label in f.message and "costs little" in f.message
    assert re.search(r"\d+ %", f.message), f.message  # the measured cost
    assert f"set {knob}" in f.fix and f.fix.startswith("The gain is small")
    others = {"OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "threadpoolctl"}
    if owner != "pyarrow":
        others.add("OMP_NUM_THREADS")  # Arrow's pool reads it: the one case it is the knob
    for other in others:
        assert other not in f.fix, f.fix
    assert "2-23x" not in f.message and "multiples" not in f.message


def test_a_pool_already_at_its_fix_is_never_asked_for_again() -> None:
    # POLARS_MAX_THREADS=1: one polars thread busy, its caller beside it: D 2.4 on 2 CPUs.
    counts = (oc("polars", 1, 1), oc("python", 1, 1))
    env = {"POLARS_MAX_THREADS": "1"}
    f, _ = finding_of(tree(worker(11, counts, thread_env=env), worker(12, counts, thread_env=env)))
    assert f.severity is Severity.WARNING
    assert "POLARS_MAX_THREADS=1" not in f.fix and "set " not in f.fix, f.fix
    assert "Nothing left to cap" in f.fix
    for var in VARIABLES:
        assert var not in f.fix, f.fix


def test_a_variable_at_the_target_that_did_not_take_is_said_so() -> None:
    counts = (oc("numexpr", 2, 2), oc("python", 1, 0, ran=1))
    env = {"NUMEXPR_NUM_THREADS": "1"}
    f, _ = finding_of(tree(worker(11, counts, thread_env=env), worker(12, counts, thread_env=env)))
    assert "is set but did not reach it" in f.fix
    assert "numexpr.set_num_threads(1)" in f.fix


def test_torchs_openmp_team_is_critical_with_torchs_call() -> None:
    counts = (oc("libgomp", 1, 1), oc("python", 1, 1))
    procs = [worker(p, counts, pools=("libgomp", "torch")) for p in (11, 12)]
    f, _ = finding_of(tree(*procs))
    assert f.rule == "oversubscribed-pools" and f.severity is Severity.CRITICAL
    assert "set OMP_NUM_THREADS=1" in f.fix and "torch.set_num_threads(1)" in f.fix
    assert "threadpoolctl" not in f.fix


def test_gil_bound_threads_get_no_thread_cap() -> None:
    counts = (oc("python", 8, 8, yielding_s=8.0),)  # each yields more than it is preempted
    gil = [worker(p, counts, demand=1.45) for p in (11, 12)]  # 1.4-1.5 each, measured
    f, _ = finding_of(tree(*gil, demand=2.9))
    assert f.severity is Severity.WARNING and "GIL" in f.message
    assert "not CPU oversubscription" in f.message
    assert "processes instead of threads" in f.fix and "free-threaded" in f.fix
    assert "threads_per_worker" not in f.fix and "max_workers" not in f.fix
    for var in VARIABLES:
        assert var not in f.fix


@pytest.mark.parametrize(
    "python",
    [
        # dask's task threads doing BLAS with the GIL released, beside the worker's event
        # loop (measured: 0.7 CPU and 1.5 runnable per worker, as the GIL would show; but
        # only the event loop yields, the task threads are preempted).
        oc("python", 6, 3, yielding_s=1.0),
        oc("python", 6, 2, yielding_s=1.0),  # half is not most
        oc("python", 6, 3, yielding_s=None),  # switches not counted: never the GIL
    ],
)
def test_python_threads_that_are_preempted_are_the_applications(python: OwnerCount) -> None:
    procs = [worker(p, (python,), demand=1.5, cpu_percent=70.0) for p in (11, 12)]
    f, _ = finding_of(tree(*procs, demand=3.0))
    assert "application's own Python threads" in f.message and "GIL" not in f.message
    assert "max_workers" in f.fix


def test_python_threads_using_more_than_a_cpu_are_the_applications() -> None:
    counts = (oc("python", 3, 3, yielding_s=3.0),)
    procs = [worker(p, counts, cpu_percent=180.0) for p in (11, 12)]
    f, _ = finding_of(tree(*procs))
    assert "application's own Python threads" in f.message
    assert "max_workers" in f.fix and "GIL" not in f.message


def test_gloo_communication_threads_get_no_thread_cap() -> None:
    counts = (oc("python", 1, 1), oc("gloo", 2, 1), oc("libgomp", 0, 0))
    f, _ = finding_of(tree(worker(11, counts), worker(12, counts), demand=2.5))
    assert "gloo" in f.message and f.fix.startswith("Nothing to cap")
    assert "set OMP_NUM_THREADS" not in f.fix and "threads_per_worker" not in f.fix


def test_busy_unattributed_threads_fall_back_to_the_mapped_pools() -> None:
    counts = (oc("unattributed", 2, 2), oc("python", 1, 0, ran=1))
    assert cause([worker(11, counts)], 1) is None
    assert cause([worker(11, counts, owner_counts=None)], 1) is None


def test_owner_counts_and_their_words() -> None:
    counts = owner_counts(
        {1: "python", 2: "onnxruntime", 3: "onnxruntime", 4: "openblas"},
        {1: 0.9, 2: 0.8, 3: 0.01},
        0.2,
    )
    assert counts is not None
    assert describe(counts) == (
        "Python interpreter: 1 busy, ONNX Runtime intra-op pool: 2 (1 busy), OpenBLAS: 1 idle"
    )
    assert owner_counts(None, {}, 0.2) is None
    # With the switches: the runnable seconds of the threads that yielded more than they
    # were preempted.
    switches = {1: (190, 80), 2: (60, 170), 3: (500, 0), 4: (9, 1)}
    counts = owner_counts(
        {1: "python", 2: "python", 3: "python", 4: "openblas"},
        {1: 0.5, 2: 0.5, 3: 0.01, 4: 0.5},
        0.2,
        switches,
    )
    assert counts is not None
    by = {c.owner: c for c in counts}
    assert by["python"].busy == 2 and by["python"].yielding_s == pytest.approx(0.51)
    assert by["openblas"].yielding_s == pytest.approx(0.5)
    unknown = owner_counts({1: "python"}, {1: 0.5}, 0.2, {})
    assert unknown is not None and unknown[0].yielding_s is None


EXAMPLE = re.compile(r"e\.g\. (\d+) workers? x (\d+) threads?")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 64])
def test_app_thread_fix_examples_keep_their_own_rule(n: int) -> None:
    for workers in range(1, 12):
        for busy in range(workers, 14):
            fix = app_thread_fix(n, workers, busy)
            for a, b in EXAMPLE.findall(fix):
                assert int(a) * int(b) <= n, (n, workers, busy, fix)
            if busy > n or workers > n:
                # The decisive advice first: fewer busy processes.
                assert fix.startswith(f"run at most {n} busy process"), fix
            assert not re.search(r"\b1 (threads|workers)", fix), fix


def test_spinning_threads_that_never_block_fall_back_without_the_idle_pool() -> None:
    # ORT's intra-op worker spins, so it is never seen blocked: unattributed. NumPy's
    # OpenBLAS thread is attributed, idle, and is all of its pool (read live): not blamed.
    counts = (oc("unattributed", 2, 2), oc("onnxruntime", 1, 0), oc("openblas", 1, 0))
    procs = [worker(p, counts, pools=("openblas", "onnxruntime")) for p in (11, 12)]
    f, _ = finding_of(tree(*procs))
    assert f.rule == "oversubscribed-pools", f
    assert "SessionOptions.intra_op_num_threads = 1" in f.fix
    assert "no environment variable reaches" in f.fix
    for var in VARIABLES:
        assert var not in f.fix, f.fix
    assert "threadpoolctl" not in f.fix


def test_owners_survive_a_recording_and_are_recounted_under_other_thresholds() -> None:
    from oversub.analysis.fields import loads
    from oversub.analysis.rates import counted
    from oversub.recording.format import Decoder, Encoder, dumps

    p = worker(
        11,
        (),
        owners={11: "python", 12: "onnxruntime", 13: "openblas"},
        thread_ids=(11, 12, 13),
        thread_runnable_s=(0.9, 0.3, 0.0),
        cpu_s=1.2,
        delay_s=0.6,
    )
    iv = tree(p)
    back, _ = Decoder().interval(loads(dumps(Encoder().interval(iv, "T"))))
    [q] = [x for x in back.processes if x.pid == 11]
    assert q.owners == {11: "python", 12: "onnxruntime", 13: "openblas"}
    strict = counted(back, Thresholds(active_cpu=0.5))
    [r] = [x for x in strict.processes if x.pid == 11]
    assert describe(r.owner_counts or ()) == (
        "Python interpreter: 1 busy, ONNX Runtime intra-op pool: 1, OpenBLAS: 1 idle"
    )


@pytest.mark.parametrize("owners", [[[1, "evil\x1b[31m"]], [[1]], [["x", "python"]], "no"])
def test_a_recorded_owner_outside_the_catalogue_is_refused(owners: object) -> None:
    from oversub.analysis.fields import BadRecord, loads
    from oversub.recording.format import Decoder, Encoder, dumps

    record = Encoder().interval(tree(worker(11, (), owners={11: "python"})), "T")
    record["p"][0]["d"]["owners"] = owners
    with pytest.raises(BadRecord):
        Decoder().interval(loads(dumps(record)))


def test_numbas_busy_team_unattributed_falls_back_to_numbas_knob_as_a_warning() -> None:
    # numba's omp team thread spins on libgomp, never seen blocked: the mapped layer says
    # numba drives libgomp, so its knob (not OMP_NUM_THREADS) and its low cost.
    counts = (oc("unattributed", 1, 1), oc("python", 1, 1), oc("openblas", 2, 0))
    procs = [
        worker(p, counts, pools=("libgomp", "openblas", "numba"), live_threads={"openblas": 2})
        for p in (11, 12)
    ]
    f, _ = finding_of(tree(*procs))
    assert f.rule == "oversubscribed-threads" and f.severity is Severity.WARNING, f
    assert "costs little" in f.message and "numba parallel team" in f.message
    assert "NUMBA_NUM_THREADS=1" in f.fix and "numba.set_num_threads(1)" in f.fix
    for var in VARIABLES:
        assert var not in f.fix, f.fix


def test_over_a_run_a_thread_counts_for_its_last_known_owner() -> None:
    from oversub.analysis.ownercounts import RunOwners

    run = RunOwners()
    early = {11: "python", 12: "unattributed", 13: "unattributed", 14: "openblas"}
    late = {11: "python", 12: "python", 13: "python", 14: "openblas"}
    for owners in (early, late):
        run.add(
            worker(
                11,
                (),
                owners=owners,
                thread_ids=(11, 12, 13),
                thread_runnable_s=(0.3, 0.9, 0.8),
                active_threads=2,
            )
        )
    assert describe(run.counts()) == "Python interpreter: 3 (2 busy), OpenBLAS: 1 idle"


def test_over_a_run_the_threads_that_yield_are_weighed_from_summed_switches() -> None:
    from oversub.analysis.ownercounts import RunOwners

    owners = {11: "python", 12: "python", 13: "python"}
    run = RunOwners()
    for switches in (((90, 10), (10, 90), (1, 0)), ((90, 10), (100, 20), (1, 0))):
        run.add(
            worker(
                11,
                (),
                owners=owners,
                thread_ids=(11, 12, 13),
                thread_runnable_s=(0.9, 0.9, 0.0),
                thread_switches=switches,
                active_threads=2,
            )
        )
    # 11 yields; 12 does not over the run (110 against 110 is not more); 13 never ran.
    [python] = run.counts()
    assert python.busy == 2 and python.yielding_s == pytest.approx(1.8)
    run.add(worker(11, (), owners=owners, thread_ids=(11,), thread_runnable_s=(0.9,)))
    assert run.counts()[0].yielding_s is None  # an interval without switches: unknown


def test_gil_threads_each_runnable_too_briefly_to_be_busy_are_still_the_gil() -> None:
    """8 pure-Python threads per process, each runnable a fifth of the time (measured: 1.4
    runnable per process, no thread above the active floor): not single-thread processes."""
    gil = (OwnerCount("python", 9, 1, 8, 1.43, 1.43),)
    procs = [worker(p, gil, demand=1.43, active_threads=1, cpu_percent=99.0) for p in (11, 12)]
    f, _ = finding_of(tree(*procs, demand=2.9))
    assert "GIL" in f.message and "single-thread" not in f.message, f.message
    # Some of those threads not attributed (their owners not read yet), none of them busy:
    # unknown is no other owner's work, still the GIL.
    part = (OwnerCount("python", 5, 1, 5, 0.9, 0.9), OwnerCount("unattributed", 4, 0, 4, 0.53))
    procs = [worker(p, part, demand=1.43, active_threads=1, cpu_percent=99.0) for p in (11, 12)]
    f, _ = finding_of(tree(*procs, demand=2.9))
    assert "GIL" in f.message and "application's own" not in f.fix, (f.message, f.fix)
    # A native pool's threads working beside them: not the GIL.
    pool = (OwnerCount("python", 5, 1, 5, 0.9, 0.9), OwnerCount("polars", 4, 0, 4, 0.53))
    procs = [worker(p, pool, demand=1.43, active_threads=1, cpu_percent=99.0) for p in (11, 12)]
    f, _ = finding_of(tree(*procs, demand=2.9))
    assert "GIL" not in f.message, f.message
    # One thread doing the work, beside a helper that wakes now and then: not the GIL.
    single = (OwnerCount("python", 2, 1, 2, 1.4, 0.01),)
    procs = [worker(p, single, demand=1.4, active_threads=1, cpu_percent=99.0) for p in (11, 12)]
    f, _ = finding_of(tree(*procs, demand=2.8))
    assert "single-thread" in f.message and "GIL" not in f.message, f.message


def test_a_fallback_to_the_mapped_pools_says_the_busy_threads_were_not_attributed() -> None:
    counts = (oc("unattributed", 2, 2), oc("python", 1, 1))
    f, _ = finding_of(tree(worker(11, counts), worker(12, counts), demand=4.0))
    assert f.rule == "oversubscribed-pools" and "OpenBLAS" in f.message, f.message
    assert "could not be attributed to a runtime (pid 11: unattributed: 2 busy" in f.message
    assert "not observed running" in f.message
    # Owners not read at all (no /proc owners, an old recording): nothing to say about them.
    bare = [worker(p, counts, owner_counts=None, owners=None) for p in (11, 12)]
    f, _ = finding_of(tree(*bare, demand=4.0))
    assert "could not be attributed" not in f.message, f.message


# --------------------------------------------------------------------------- steering (#38)


def target(*procs: Proc) -> list[Proc]:
    return [Proc(ROOT, (IDLE,), ppid=1, cmdline="python launch.py", owners=("python",)), *procs]


def _shared_target(namer: tuple[str, ...]) -> list[Proc]:
    """Issue 38 row 4, on 2 CPUs: pid 202 runs busy threads no evidence names beside a
    default-sized OpenBLAS (its threads spin, never seen blocked); pid 201, in the same
    target, runs two busy threads whose owners are `namer` (named `polars-0`, `polars-1`:
    polars)."""
    busy = cause_proc("polars", 201).loads
    namer_proc = Proc(201, busy, owners=("python", *namer))
    return target(namer_proc, cause_proc("openblas", 202))


def test_a_process_naming_its_threads_cannot_steer_anothers_cause() -> None:
    from oversub.analysis.policy import fails, finding_fails
    from oversub.analysis.summary import RunSummary
    from oversub.core.names import FailOn

    alone, _ = finding_of(analyse(_shared_target(("unattributed", "unattributed")), 2))
    assert alone.severity is Severity.CRITICAL and "OPENBLAS_NUM_THREADS=1" in alone.fix
    procs = _shared_target(("polars", "polars"))
    f, _ = finding_of(analyse(procs, 2))
    # The victim's spinning pool keeps the finding critical: the default gate still fails.
    assert f.rule == "oversubscribed-pools" and f.severity is Severity.CRITICAL, f
    assert finding_fails(f, FailOn.COSTLY)
    assert "OPENBLAS_NUM_THREADS=1 in it" in f.fix and "(pid 202) maps OpenBLAS" in f.fix, f.fix
    # The namer is accounted for with its own cause, and its names prove nothing of 202's.
    assert "polars (rayon) in 1 process (pid 201): set POLARS_MAX_THREADS=1" in f.fix, f.fix
    assert "In 1 process (pid 201), the busy threads belong to polars" in f.message, f.message
    assert "polars" not in f.message[f.message.index("(pid 202)") : f.message.index("(pid 201)")]
    assert f.pids == (201, 202) and f.evidence["causes"] == "201:sleep,202:mapped"
    # Over a whole run, as `check` judges it: exit 1 under the default gate, not 0.
    run = RunSummary(root_pid=ROOT)
    for i in range(3):
        run.add(analyse(procs, 2, t0=1000.0 + i))
    summary = run.result(budget(2), Thresholds(), target_exited=True)
    assert fails(summary.verdict, summary.findings, FailOn.COSTLY), summary.findings


def test_a_named_pool_that_sleeps_does_not_hide_its_own_processs_spinning_one() -> None:
    # Within one process too: polars' named threads beside a busy thread no evidence names
    # and a default-sized OpenBLAS. The named pool is polars'; the other may be OpenBLAS's.
    half = Load(cpu=0.5, delay=0.5, involuntary=200.0)
    owners = ("python", "polars", "polars", "unattributed")
    procs = [
        Proc(201 + i, (IDLE, half, half, half), owners=owners, pools=("openblas",))
        for i in range(2)
    ]
    f, _ = finding_of(analyse(target(*procs), 2))
    assert f.severity is Severity.CRITICAL and f.rule == "oversubscribed-pools", f
    assert "set OPENBLAS_NUM_THREADS=1" in f.fix and "set POLARS_MAX_THREADS=1" in f.fix, f.fix
    assert "the busy threads named belong to polars (rayon)" in f.message, f.message
    assert "2 of their 6 busy threads could not be attributed" in f.message, f.message
    assert f.evidence["causes"] == "201:mapped,201:sleep,202:mapped,202:sleep"


def _alone_severity(kind: str) -> Severity:
    """The severity of three processes of `kind` on 2 CPUs, with nothing else beside them."""
    f, _ = finding_of(analyse(target(*(cause_proc(kind, 301 + i) for i in range(3))), 2))
    return f.severity


MIXES = [
    mix for k in range(2, len(CAUSE_KINDS) + 1) for mix in itertools.combinations(CAUSE_KINDS, k)
]


@pytest.mark.parametrize("mix", [pytest.param(m, id="+".join(m)) for m in MIXES])
def test_every_busy_process_is_in_the_finding_and_the_worst_cause_decides(
    mix: tuple[str, ...],
) -> None:
    from tests.unit.analysis.test_wording import contradictions, problems

    procs = [cause_proc(kind, 201 + i) for i, kind in enumerate(mix)]
    iv = analyse(target(*procs), 2)
    f, _ = finding_of(iv)
    pids = tuple(p.pid for p in procs)
    assert f.pids == pids, (f.pids, mix)
    assert {int(c.split(":")[0]) for c in str(f.evidence["causes"]).split(",")} == set(pids)
    for pid in pids:
        assert re.search(rf"\b{pid}\b", f.message), (pid, f.message)
    worst = max((_alone_severity(kind) for kind in mix), key=lambda s: s.rank)
    assert f.severity is worst, (mix, f)
    assert (f.rule == "oversubscribed-pools") == (worst is Severity.CRITICAL), f
    text = f"{f.message} || {f.fix}"
    assert problems(text) == [] and contradictions(f, 2, iv) == [], text
    # A fix is offered only to the processes whose own threads call for it.
    for kind, pid in zip(mix, pids, strict=True):
        if kind in ("single", "gil", "app"):
            assert not re.search(rf"\(pids? [\d, ]*\b{pid}\b[\d, ]*\) (maps|runs)", f.fix), f.fix
        if kind == "gil":
            assert f"In 1 process (pid {pid}): for CPU-bound Python code" in f.fix, f.fix
