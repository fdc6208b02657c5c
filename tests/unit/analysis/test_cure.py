"""`oversub run`'s cure and verification as data (analysis.cureplan, analysis.cured)."""

from __future__ import annotations

import json
from typing import Any

from oversub.analysis.cured import Watch, parse_record, verdicts, why_unreached
from oversub.analysis.cureplan import (
    NOT_EXPORTED,
    environment,
    hook_plan,
    make_cure,
    thread_variables,
    variables,
)
from oversub.analysis.plans import make_plan, synthetic_budget
from oversub.core.names import Verdict
from oversub.core.pools import RECOMMENDED_VARS
from oversub.core.results import OwnerCount, ProcessRates
from oversub.core.runtimes import RUNTIMES
from oversub.hook._oversub_hook.planenv import parse_plan
from tests.support.builders import make_interval, make_process_rates


def test_every_variable_of_the_catalogue_is_set_but_a_users_and_the_maximums() -> None:
    names = thread_variables()
    assert set(RECOMMENDED_VARS) <= set(names)
    assert {v for r in RUNTIMES for v in r.variables} <= set(names)
    cure = variables(2, {"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": " "})
    assert cure.kept == {"OMP_NUM_THREADS": "8"}  # the user's wins; a blank one is unset
    assert cure.managed["MKL_NUM_THREADS"] == "2" and "OMP_NUM_THREADS" not in cure.managed
    assert set(cure.skipped) == set(NOT_EXPORTED) == {"NUMBA_NUM_THREADS", "NUMEXPR_MAX_THREADS"}
    # numexpr refuses a count above an inherited maximum: never above the user's.
    assert variables(4, {"NUMEXPR_MAX_THREADS": "3"}).managed["NUMEXPR_NUM_THREADS"] == "3"


def test_the_hook_reads_the_plan_run_writes() -> None:
    plan = make_plan(synthetic_budget(8), 2, 1)
    cure = make_cure(plan, {}, tree=False, threads=None)
    text = hook_plan(cure, top=42, directory="/tmp/x")
    parsed = parse_plan(text)
    assert (parsed["n"], parsed["t"], parsed["w"], parsed["top"]) == (8, 3, 1, 42)
    assert parsed["set"]["OMP_NUM_THREADS"] == "3"
    tree = make_cure(make_plan(synthetic_budget(8), 1), {}, tree=True, threads=None)
    assert parse_plan(hook_plan(tree, top=1, directory=None))["t"] is None
    env = environment(cure, {"PYTHONPATH": "/mine"}, hook_dir="/hook", top=1, directory=None)
    assert env["PYTHONPATH"] == "/hook:/mine" and json.loads(env["OVERSUB_RUN_PLAN"])["v"] == 1


def test_hostile_records_are_refused_or_bounded() -> None:
    assert parse_record(b"x" * 70000) is None
    assert parse_record(b"\xff\xfe") is None
    assert parse_record(b"[1]") is None
    assert parse_record(b'{"pid": true, "ppid": 1, "role": "root"}') is None
    assert parse_record(b'{"pid": 5, "ppid": 1, "role": "king"}') is None
    record = parse_record(
        json.dumps(
            {
                "pid": 5,
                "ppid": 1,
                "role": "rank",
                "threads": 2,
                "records": {"torch": {"knob": "k" * 500, "value": 2, "state": "sized"}},
                "user_vars": {"OMP_NUM_THREADS": "8", "X": 3},
                "faults": ["a\x1b[31m", 7],
            }
        ).encode()
    )
    assert record is not None and record.threads == 2
    assert len(record.knobs["torch"].knob) == 80 and record.user_vars == {"OMP_NUM_THREADS": "8"}
    assert record.faults == ("a\x1b[31m",)


def _busy(pid: int, owner: str, busy: int, **kw: Any) -> ProcessRates:
    counts = (OwnerCount(owner, busy + 1, busy, busy, 1.0),)
    return make_process_rates(pid=pid, owner_counts=counts, **kw)


def test_a_pool_above_the_plan_while_oversubscribed_escaped_unless_the_program_set_it() -> None:
    watch = Watch()
    hooked = parse_record(b'{"pid": 11, "ppid": 1, "role": "rank", "threads": 1}')
    kept = parse_record(
        b'{"pid": 12, "ppid": 1, "role": "rank", "threads": 1, "records": {"onnxruntime":'
        b' {"knob": "SessionOptions.intra_op_num_threads", "value": 2, "state": "kept"}}}'
    )
    assert hooked is not None and kept is not None
    iv = make_interval(
        processes=(
            _busy(11, "openblas", 2, cmdline="python a.py"),
            _busy(12, "onnxruntime", 2, cmdline="python b.py"),
            make_process_rates(pid=13, cmdline="python -I c.py"),
            make_process_rates(pid=14, name="sh", cmdline="sh -c x"),
        )
    )
    watch.add(iv, Verdict.OVERSUBSCRIBED)
    lines = verdicts([hooked, kept], watch, fallback=1, kept_vars={})
    states = {(x.state, x.runtime, x.pids) for x in lines}
    assert ("escaped", "OpenBLAS", (11,)) in states
    assert ("kept", "ONNX Runtime intra-op pool", (12,)) in states
    [escaped] = [x for x in lines if x.state == "escaped"]
    assert escaped.fix == "set OPENBLAS_NUM_THREADS=1 for it"
    [unreached] = [x for x in lines if x.state == "not-reached"]
    assert unreached.pids == (13,) and "-I" in unreached.detail
    assert [x.pids for x in lines if x.state == "variables-only"] == [(14,)]
    # Not oversubscribed: the same busy threads are no escape.
    calm = Watch()
    calm.add(iv, Verdict.OK)
    assert not [
        x for x in verdicts([hooked], calm, fallback=1, kept_vars={}) if x.state == "escaped"
    ]


def test_a_team_that_counts_its_caller_escapes_when_the_process_runs_above_its_plan() -> None:
    # Hogwild's workers set torch to 2 threads in code: 1 libgomp thread and the caller busy
    # in each, against a plan of 1. The same libgomp thread in a process that stays at 1
    # active thread (the caller idle) is within the plan.
    kept = parse_record(
        b'{"pid": 21, "ppid": 1, "role": "rank", "threads": 1, "records": {"torch":'
        b' {"knob": "torch.set_num_threads", "value": 2, "state": "kept"}}}'
    )
    assert kept is not None
    over = Watch()
    over.add(
        make_interval(processes=(_busy(21, "libgomp", 1, active_threads=2),)),
        Verdict.OVERSUBSCRIBED,
    )
    lines = verdicts([kept], over, fallback=1, kept_vars={})
    [line] = [x for x in lines if x.runtime == "GNU OpenMP (libgomp)"]
    assert line.state == "kept" and "torch.set_num_threads = 2" in line.detail, line
    within = Watch()
    within.add(
        make_interval(processes=(_busy(21, "libgomp", 1, active_threads=1),)),
        Verdict.OVERSUBSCRIBED,
    )
    lines = verdicts([kept], within, fallback=1, kept_vars={})
    assert [x.state for x in lines if x.runtime == "GNU OpenMP (libgomp)"] == ["sized"]


def test_why_a_python_was_not_reached() -> None:
    assert "-E" in why_unreached("python3 -E job.py")
    assert "-I" in why_unreached("/usr/bin/python3 -IS job.py")
    assert "did not report" in why_unreached("python3 job.py -I")


def test_a_process_without_a_share_of_its_own_is_never_said_to_have_a_plan() -> None:
    # `--procs auto`: a Python child that imports no library the hook sizes (and is no
    # multiprocessing child) never decides its share; its team took the OMP_NUM_THREADS it
    # inherited, the root's 2. A shell beside it got the variables only.
    undecided = parse_record(b'{"pid": 31, "ppid": 1, "role": "rank", "threads": null}')
    assert undecided is not None and undecided.threads is None
    env = {"OMP_NUM_THREADS": "2"}
    watch = Watch()
    iv = make_interval(
        processes=(
            _busy(31, "stress", 2, cmdline="python -c x", thread_env=env, active_threads=2),
            _busy(32, "libgomp", 3, name="sh", cmdline="sh -c y", thread_env=env),
            _busy(33, "openblas", 1, name="blas", cmdline="./blas", thread_env={}),
        )
    )
    watch.add(iv, Verdict.OVERSUBSCRIBED)
    lines = verdicts([undecided], watch, fallback=2, kept_vars={})
    for line in lines:
        assert "the plan" not in line.detail, line
    [team] = [x for x in lines if x.runtime == "oversub stress team"]
    assert team.state == "unplanned" and team.pids == (31,), team
    assert "judged against its OMP_NUM_THREADS=2" in team.detail, team
    assert "its hook saw no library it sizes imported" in team.detail, team
    assert team.fix.startswith("give --procs M"), team
    [omp] = [x for x in lines if x.runtime == "GNU OpenMP (libgomp)"]
    assert omp.state == "escaped" and "judged against its OMP_NUM_THREADS=2" in omp.detail
    assert "hook" not in omp.detail and omp.fix.startswith("give --procs M"), omp
    [blas] = [x for x in lines if x.runtime == "OpenBLAS"]
    assert blas.state == "unplanned" and "against 2 threads (no thread variable)" in blas.detail
    assert blas.fix == ""  # 1 busy thread: nothing to cure
    # With --procs M every hooked process decides at its start: no such fix to give.
    assert all(
        not x.fix
        for x in verdicts([undecided], watch, fallback=1, kept_vars={}, tree=False)
        if x.state in ("unplanned", "escaped")
    )
    # Decided, the same process is judged against its plan, as before.
    decided = parse_record(b'{"pid": 31, "ppid": 1, "role": "rank", "threads": 1}')
    assert decided is not None
    [team] = [x for x in verdicts([decided], watch, fallback=2, kept_vars={}) if x.pids == (31,)]
    assert team.state == "escaped" and team.detail.endswith("the plan 1"), team
    assert team.fix == "set OMP_NUM_THREADS=1 for it", team
