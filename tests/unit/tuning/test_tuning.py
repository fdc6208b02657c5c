"""`oversub tune`'s pure parts: candidates, plan, schedule, statistics, ranking, rendering."""

from __future__ import annotations

import json
import math

import pytest

from oversub.analysis.plans import thread_env, threads_for
from oversub.cli.tune.driver import parse_env_dimension, parse_procs_values
from oversub.cli.tune.trialrun import substitute
from oversub.core.errors import UsageError
from oversub.core.names import Verdict
from oversub.tuning import TuneFormat, render_tune
from oversub.tuning.candidates import make_candidates, thread_values
from oversub.tuning.exports import tune_dict
from oversub.tuning.ranking import fails_gate, rank
from oversub.tuning.schedule import fit, schedule
from oversub.tuning.stats import describe, overlap, runs_to_separate, t975
from oversub.tuning.trials import Candidate, Trial, TunePlan, TuneResult
from oversub.tuning.view import bar_chart


def _rec(n: int) -> object:
    return lambda m: threads_for(n, m)


def test_thread_values_cover_one_powers_of_two_and_the_recommendation() -> None:
    assert thread_values(8, 4)[:2] == [4, 1]
    assert set(thread_values(8, 4)) == {1, 2, 3, 4, 5, 8}
    assert set(thread_values(6, 3)) == {1, 2, 3, 4}
    assert thread_values(1, 1) == [1]


def test_candidates_default_first_then_recommendation_and_one_thread() -> None:
    cands = make_candidates(8, 2, thread_env, lambda m: threads_for(8, m), max_candidates=20)
    assert cands[0].is_default and cands[0].env == {}
    assert cands[1].threads == 4 and "recommended" in cands[1].roles
    assert cands[2].threads == 1 and "one thread" in cands[2].roles
    # Every candidate sets every variable of the table recommend --format env uses.
    for c in cands[1:]:
        assert c.threads is not None
        assert {k: v for k, v in c.env.items() if k in thread_env(1)} == dict(thread_env(c.threads))
        assert c.env["OVERSUB_TUNE_THREADS"] == str(c.threads)
    assert len({c.label for c in cands}) == len(cands)


def test_candidates_never_more_than_max() -> None:
    cands = make_candidates(64, 1, thread_env, lambda m: threads_for(64, m), max_candidates=3)
    assert [c.label for c in cands] == ["default", "T=64", "T=1"]


def test_procs_values_and_env_dimensions() -> None:
    cands = make_candidates(
        4,
        1,
        thread_env,
        lambda m: threads_for(4, m),
        procs_values=(1, 2),
        env_dims=[("POLARS_MAX_THREADS", ("1", "2"))],
        max_candidates=40,
    )
    labels = [c.label for c in cands]
    assert labels[0] == "default M=1" and "default M=2" in labels
    assert "M=2 T=2" in labels and "M=1 T=4" in labels
    assert "M=2 T=2 POLARS_MAX_THREADS=1" in labels
    m2 = next(c for c in cands if c.label == "M=2 T=2")
    assert m2.env["OVERSUB_TUNE_PROCS"] == "2" and "recommended" in m2.roles
    polars = next(c for c in cands if c.label == "M=1 T=1 POLARS_MAX_THREADS=2")
    assert polars.env["POLARS_MAX_THREADS"] == "2" and polars.env["OMP_NUM_THREADS"] == "1"


def test_option_parsers_refuse_bad_input() -> None:
    assert parse_env_dimension("POLARS_MAX_THREADS=1,2") == ("POLARS_MAX_THREADS", ("1", "2"))
    assert parse_procs_values("1,2,4,2") == (1, 2, 4)
    for bad in ("=1", "A B=1", "X=", "X=1,$(rm)", "X"):
        with pytest.raises(UsageError):
            parse_env_dimension(bad)
    for bad in ("0", "1,x", "", "٤"):
        with pytest.raises(UsageError):
            parse_procs_values(bad)


def test_substitute_replaces_only_the_two_placeholders() -> None:
    argv = ["run", "--workers={procs}", "-t", "{threads}", "{other}"]
    assert substitute(argv, 4, 2) == ["run", "--workers=4", "-t", "2", "{other}"]


def test_student_t() -> None:
    assert t975(1) == pytest.approx(12.706)
    assert t975(30) == pytest.approx(2.042)
    assert t975(60) == pytest.approx(2.000, abs=0.001)
    assert t975(120) == pytest.approx(1.980, abs=0.001)
    assert t975(10**6) == pytest.approx(1.960, abs=0.001)
    with pytest.raises(ValueError):
        t975(0)


def test_describe() -> None:
    s = describe([10.0, 12.0, 14.0])
    assert s is not None
    assert (s.n, s.mean, s.minimum, s.maximum) == (3, 12.0, 10.0, 14.0)
    assert s.sd == pytest.approx(2.0)
    assert s.half == pytest.approx(4.303 * 2.0 / math.sqrt(3))
    one = describe([5.0])
    assert one is not None and one.half is None and one.sd is None
    assert describe([]) is None


def test_overlap_and_runs_to_separate() -> None:
    a = describe([41.0, 41.8, 40.8, 41.2])
    b = describe([40.5, 41.5, 40.2, 41.4])
    assert a is not None and b is not None
    assert overlap(a, b)
    n = runs_to_separate(a, b)
    assert n is not None and n > 4
    far = describe([10.0, 10.1, 9.9])
    assert far is not None and not overlap(a, far)
    same = describe([41.0, 41.8, 40.8, 41.2])
    assert same is not None and runs_to_separate(a, same) is None


def timed_trials(figures: dict[int, list[float]]) -> list[Trial]:
    out = []
    rounds = max(len(v) for v in figures.values())
    for r in range(rounds):
        for c, values in figures.items():
            if r < len(values):
                out.append(Trial(len(out) + 1, c, r + 1, False, values[r], 1.0, 0))
    return out


CANDS = (
    Candidate("default", None, None, (), {}, ("default",)),
    Candidate("T=2", 2, None, (), dict(thread_env(2)), ("recommended",)),
    Candidate("T=1", 1, None, (), dict(thread_env(1)), ("one thread",)),
)


def test_rank_picks_the_cheapest_of_the_indistinguishable() -> None:
    trials = timed_trials({0: [30.0, 31.0, 29.0], 1: [41.2, 42.0, 40.4], 2: [40.9, 42.0, 39.8]})
    k = rank(CANDS, trials, higher_is_better=True, vcpus=2)
    assert k.best == 1 and k.runner_up == 2
    assert set(k.tied) == {1, 2}
    assert k.pick == 2  # 1 thread claims fewer CPUs
    assert k.default_distinguishable and k.default_slower == pytest.approx(41.2 / 30.0 - 1)
    assert fails_gate(k, 20.0) and not fails_gate(k, 50.0)
    default = next(st for st in k.standings if st.candidate == 0)
    assert default.speedup == 1.0 and default.speedup_half is None


def test_rank_lower_is_better_for_wall_time_and_failures() -> None:
    trials = timed_trials({0: [2.0, 2.1, 1.9], 1: [1.0, 1.05, 0.95], 2: [3.0, 3.0, 3.1]})
    trials.append(Trial(99, 2, 4, False, None, 1.0, 1, failure="exit status 1"))
    trials.append(Trial(100, 2, 1, True, 0.1, 1.0, 0))  # warm-up: never counted
    k = rank(CANDS, trials, higher_is_better=False, vcpus=2)
    assert k.best == 1 and k.pick == 1 and k.tied == (1,)
    st = {s.candidate: s for s in k.standings}
    assert st[1].speedup == pytest.approx(2.0, rel=0.01)
    assert st[2].failed == 1 and st[2].stats is not None and st[2].stats.n == 3
    assert [s.candidate for s in k.standings] == [1, 0, 2]


def test_equal_default_never_fails_the_gate() -> None:
    trials = timed_trials({0: [10.0, 10.4, 9.6], 1: [10.1, 10.5, 9.7], 2: [10.0, 10.3, 9.8]})
    k = rank(CANDS, trials, higher_is_better=True, vcpus=2)
    assert not k.default_distinguishable and not fails_gate(k, 0.001)


def test_fit_and_schedule() -> None:
    plan = fit(5, 1, None, 10.0, 300.0)
    assert plan.candidates == 5 and plan.runs == 5 and plan.seconds <= 300
    tight = fit(5, 0, None, 10.0, 40.0)
    assert tight.candidates == 2 and tight.runs == 2
    asked = fit(5, 0, 4, 10.0, 100.0)
    assert asked.candidates == 2 and asked.runs == 4
    assert fit(3, 0, None, 1.0, 10_000).runs == 10
    order = schedule(3, 1, 2)
    assert [c for _, c, _ in order] == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    assert [w for _, _, w in order] == [True] * 3 + [False] * 6


def _result(ended: str = "complete") -> TuneResult:
    trials = timed_trials({0: [30.0, 31.0, 29.0], 1: [41.2, 42.0, 40.4], 2: [40.9, 42.0, 39.8]})
    trials[4] = Trial(5, 1, 2, False, 41.9, 1.0, 0, verdict=Verdict.OK, delay_ratio=0.02)
    k = rank(CANDS, trials, higher_is_better=True, vcpus=2)
    return TuneResult(
        command=("python", "job.py", "\x1b[31m"),
        vcpus=2,
        procs=1,
        procs_source=None,
        metric="steps_per_s",
        metric_stat="last",
        higher_is_better=True,
        candidates=CANDS,
        trials=tuple(trials),
        plan=TunePlan(3, 3, 0, 3, 1.0, 60.0),
        ranking=k,
        ended=ended,
        elapsed_s=9.0,
    )


def test_text_report() -> None:
    text = render_tune(_result(), TuneFormat.TEXT)
    assert "\x1b" not in text  # the command is escaped, and no colour off a terminal
    assert "T=2 and T=1 are indistinguishable" in text
    assert "pick: T=1" in text
    assert "export OMP_NUM_THREADS=1" in text and "threadpoolctl.threadpool_limits(1)" in text
    assert "OVERSUB_TUNE" not in text.split("Before starting the job:")[1]
    assert "T=2 runs 1.37x as fast as the default (+37.2 %)" in text
    assert "steps_per_s (last) per candidate" in text  # the chart's title
    coloured = render_tune(_result(), TuneFormat.TEXT, color=True)
    assert "\x1b[" in coloured.split("per candidate")[1]  # the bars, in colour on a terminal


@pytest.mark.parametrize("width", [60, 100, 120])
def test_the_chart_takes_the_width_given_without_a_terminal(width: int) -> None:
    # plotext capped the chart to the terminal it found (none here: 80 x 24) whatever the
    # width asked: a 120-column terminal got an 80-column chart.
    chart = bar_chart(_result(), width=width)
    assert max(len(line) for line in chart.splitlines()) == width


def test_json_document() -> None:
    doc = json.loads(render_tune(_result("budget"), TuneFormat.JSON))
    assert doc["mode"] == "fixed-time" and doc["ended"] == "budget"
    assert [t["candidate"] for t in doc["trials"]][:3] == ["default", "T=2", "T=1"]
    assert doc["ranking"]["pick"] == "T=1" and doc["ranking"]["best"] == "T=2"
    assert doc["setting"]["env"]["OMP_NUM_THREADS"] == "1"
    assert "OVERSUB_TUNE_THREADS" not in doc["setting"]["env"]
    first = doc["candidates"][0]
    assert set(first["stats"]) == {"n", "mean", "sd", "min", "max", "ci95_low", "ci95_high"}
    assert doc == tune_dict(_result("budget")) | {"elapsed_s": doc["elapsed_s"]}


def test_markdown_table() -> None:
    md = render_tune(_result(), TuneFormat.MARKDOWN)
    lines = md.splitlines()
    assert lines[0] == "## oversub tune"
    table = [line for line in lines if line.startswith("|")]
    assert table[0].startswith("| candidate | variables |")
    assert len(table) == 2 + len(CANDS)
    assert "```sh" in md and "export OMP_NUM_THREADS=1" in md


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "tune needs a command"),
        (["--env", "X", "--", "true"], "--env 'X'"),
        (["--procs-values", "0", "--", "true"], "--procs-values '0'"),
        (["--trial-seconds", "3", "--", "true"], "--trial-seconds only applies with --metric"),
        (["--metric", "a b", "--", "true"], "--metric 'a b'"),
        (["--budget", "0", "--", "true"], "budget"),
        (["--budget", "ten", "--", "true"], "is not a duration"),
        (["--metric", "r", "--trial-seconds", "60", "--budget", "30s", "--", "true"], "longer"),
    ],
)
def test_bad_input_is_a_usage_error(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.harness import run_cli

    code, _, err = run_cli(["tune", *args], capsys)
    assert code == 2, err
    assert says in err and "Traceback" not in err
