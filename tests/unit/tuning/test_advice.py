"""`tuning.advice`: the M the trials ran, a command whose wall time does not move, the thread
variables tune inherits, and how the table and the conclusion say each."""

from __future__ import annotations

import json

import pytest

from oversub.analysis.plans import thread_env
from oversub.tuning import TuneFormat, render_tune
from oversub.tuning.advice import (
    environment_notes,
    inferred_procs,
    inherited,
    procs_notes,
    same_time,
    seen_procs,
    time_bound_note,
)
from oversub.tuning.candidates import make_candidates
from oversub.tuning.ranking import rank
from oversub.tuning.trials import Candidate, Trial, TunePlan, TuneResult
from tests.unit.tuning.test_tuning import CANDS, timed_trials

TABLE = thread_env(1)


def trial(busy: int | None) -> Trial:
    return Trial(1, 0, 1, True, 3.0, 3.0, 0, busy_processes=busy)


def test_inherited_variables_by_what_a_t_candidate_does_with_them() -> None:
    env = inherited(
        {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "RAYON_NUM_THREADS": "1",
            "OMP_THREAD_LIMIT": " 4 ",
            "MKL_DOMAIN_NUM_THREADS": "MKL_BLAS=1",
            "OMP_PROC_BIND": "close",
            "HOME": "/root",
            "SECRET_TOKEN": "x",
        },
        TABLE,
    )
    assert [n for n, _ in env.replaced] == ["OMP_NUM_THREADS", "MKL_NUM_THREADS"]
    assert [n for n, _ in env.raised] == ["OMP_THREAD_LIMIT", "RAYON_NUM_THREADS"]
    assert env.unset == (("MKL_DOMAIN_NUM_THREADS", "MKL_BLAS=1"),)
    assert env.kept == (("OMP_PROC_BIND", "close"),)
    notes = environment_notes(env)
    assert len(notes) == 2
    assert "the default candidate runs with them, so it is not the libraries' default" in notes[0]
    assert "removes MKL_DOMAIN_NUM_THREADS" in notes[0] and "SECRET" not in " ".join(notes)
    assert notes[1] == "every trial inherits OMP_PROC_BIND=close from tune's environment"
    assert environment_notes(inherited({"HOME": "/root"}, TABLE)) == []
    only_table = environment_notes(inherited({"OMP_NUM_THREADS": "1"}, TABLE))
    assert only_table == [
        "tune's environment sets OMP_NUM_THREADS=1 (an earlier `eval \"$(oversub recommend "
        "...)\"`?): the default candidate runs with them, so it is not the libraries' default; "
        "each T candidate sets them to its T"
    ]


def test_a_t_candidate_sets_or_removes_every_inherited_thread_count() -> None:
    env = inherited({"RAYON_NUM_THREADS": "1", "MKL_DOMAIN_NUM_THREADS": "x=1"}, TABLE)

    def pools(t: int) -> dict[str, str]:
        return {**thread_env(t), **{n: str(t) for n, _ in env.raised}}

    cands = make_candidates(
        2, 1, pools, lambda m: 2 // m, unset=[n for n, _ in env.unset], max_candidates=3
    )
    assert cands[0].env == {} and cands[0].unset == ()  # the default inherits everything
    for c in cands[1:]:
        assert c.env["RAYON_NUM_THREADS"] == str(c.threads)
        assert c.unset == ("MKL_DOMAIN_NUM_THREADS",)


def test_m_from_the_busy_processes_of_the_trials() -> None:
    assert inferred_procs(trial(2)) == 2
    assert inferred_procs(trial(1)) is None and inferred_procs(trial(None)) is None
    assert seen_procs([trial(1), trial(3), trial(None)]) == 3
    assert seen_procs([trial(None), trial(0)]) is None
    assumed = procs_notes(1, None, 1, 2, 2)
    assert assumed[0].startswith("M = 1 was assumed (no --procs, no launcher variable")
    inferred = procs_notes(2, "trials", 2, 2, 1)
    assert inferred == [
        "M = 2: the default's first trial ran 2 processes busy at once (no --procs, no "
        "launcher variable), so the recommendation is floor(2/2) = 1; give --procs M to plan "
        "for another M"
    ]
    # The default's first trial failed (no plan, no M from it); a later one saw 2.
    failed_first = procs_notes(1, None, 2, 2, 2)
    assert failed_first[0].startswith("M = 1 was assumed (no --procs, no launcher variable):")
    assert failed_first[1].startswith("the trials ran up to 2 processes busy at once, more ")
    more = procs_notes(1, "--procs", 2, 2, 2)
    assert more == [
        "the trials ran up to 2 processes busy at once, more than M = 1 (--procs): the "
        "recommended T = 2 asks for 2 x 2 = 4 threads on 2 vCPUs; give --procs 2 if they all "
        "run at once"
    ]


def test_same_wall_time() -> None:
    tied = rank(
        CANDS,
        timed_trials({0: [3.40, 3.38], 1: [3.50, 3.70], 2: [3.45, 3.60]}),
        higher_is_better=False,
        vcpus=2,
    )
    assert same_time(tied) == pytest.approx((3.39, 3.6))
    note = time_bound_note(tied, ["proc", "matmuls", "matmuls_per_s", "rate"])
    assert note[0].startswith(
        "every candidate took about the same wall time (3.39 to 3.6 s by the means, within "
        "10 %): if CMD runs for a fixed time"
    )
    assert note[0].endswith("(CMD prints matmuls_per_s=<number>: --metric matmuls_per_s)")
    plain = time_bound_note(tied, ["proc", "n"])
    assert plain[0].endswith("give --metric NAME (CMD prints proc=, n=)")
    # Intervals that part, all within 10 %: the same.
    tight = rank(
        CANDS,
        timed_trials({0: [3.0] * 3, 1: [3.3] * 3, 2: [3.02] * 3}),
        higher_is_better=False,
        vcpus=2,
    )
    assert same_time(tight) == pytest.approx((3.0, 3.3))
    # A real difference: no note.
    apart = rank(
        CANDS,
        timed_trials({0: [3.0, 3.1], 1: [1.0, 1.1], 2: [2.0, 2.1]}),
        higher_is_better=False,
        vcpus=2,
    )
    assert same_time(apart) is None and time_bound_note(apart, ["x_per_s"]) == []


def _result(source: str | None, procs: int) -> TuneResult:
    trials = timed_trials({0: [3.4, 3.5], 1: [3.5, 3.6], 2: [3.4, 3.45]})
    return TuneResult(
        command=("python", "job.py"),
        vcpus=2,
        procs=procs,
        procs_source=source,
        metric=None,
        metric_stat="last",
        higher_is_better=False,
        candidates=CANDS,
        trials=tuple(trials),
        plan=TunePlan(3, 3, 0, 2, 3.5, 60.0),
        ranking=rank(CANDS, trials, higher_is_better=False, vcpus=2),
        ended="complete",
        elapsed_s=21.0,
        procs_seen=2 if source == "trials" else None,
    )


def test_the_table_says_m_was_assumed_when_it_was() -> None:
    text = render_tune(_result(None, 1), TuneFormat.TEXT)
    assert "T=2 (recommended for M=1, assumed)" in text
    assert "M = 1 assumed (give --procs M)" in text
    seen = render_tune(_result("trials", 2), TuneFormat.TEXT)
    assert "T=2 (recommended)" in seen and "assumed" not in seen
    assert "M = 2 (the processes the default's first trial ran busy at once)" in seen
    doc = json.loads(render_tune(_result("trials", 2), TuneFormat.JSON))
    assert doc["procs_source"] == "trials" and doc["procs_seen"] == 2


def test_the_setting_removes_what_the_trials_removed() -> None:
    c = Candidate("T=1", 1, None, (), dict(thread_env(1)), ("one thread",), ("MKL_DOMAIN_X",))
    cands = (CANDS[0], c)
    trials = timed_trials({0: [3.0, 3.1], 1: [1.0, 1.1]})
    r = _result(None, 1)
    r = TuneResult(
        **{
            **r.__dict__,
            "candidates": cands,
            "trials": tuple(trials),
            "ranking": rank(cands, trials, higher_is_better=False, vcpus=2),
        }
    )
    text = render_tune(r, TuneFormat.TEXT)
    assert "Before starting the job:\nunset MKL_DOMAIN_X\nexport OMP_NUM_THREADS=1" in text
    assert "unset MKL_DOMAIN_X" in render_tune(r, TuneFormat.MARKDOWN)
    doc = json.loads(render_tune(r, TuneFormat.JSON))
    assert doc["setting"]["unset"] == ["MKL_DOMAIN_X"]
    assert doc["candidates"][1]["unset"] == ["MKL_DOMAIN_X"]


def test_a_candidate_of_its_own_process_count_is_never_called_assumed() -> None:
    cands = make_candidates(2, 1, thread_env, lambda m: 2 // m, procs_values=(1, 2))
    trials = timed_trials({i: [3.0, 3.1] for i in range(len(cands))})
    r = _result(None, 1)
    ranking = rank(cands, trials, higher_is_better=False, vcpus=2)
    r = TuneResult(
        **{**r.__dict__, "candidates": cands, "trials": tuple(trials), "ranking": ranking}
    )
    text = render_tune(r, TuneFormat.TEXT)
    assert "M=2 T=1 (" in text and "assumed" not in text.split("candidate ")[1].split("\n\n")[0]
