"""`tuning.stats` on any finite figure CMD may print: the statistics, the ranking and every
output format survive figures near the largest double, the smallest, and both at once; a
speed-up beyond the ratio limit is stated as such."""

from __future__ import annotations

import json
import math
import re
import sys

import pytest

from oversub.tuning import TuneFormat, render_tune
from oversub.tuning.exports import tune_dict
from oversub.tuning.ranking import fails_gate, rank
from oversub.tuning.stats import (
    MAX_SEPARATING_RUNS,
    describe,
    overlap,
    runs_to_separate,
    t975,
    throughput_ratio,
)
from oversub.tuning.trials import RATIO_LIMIT, Stats, TunePlan, TuneResult, beyond
from tests.unit.tuning.test_tuning import CANDS, timed_trials

BIG = sys.float_info.max

HOSTILE = {
    "near the largest double": {0: [1e308] * 3, 1: [1e308] * 3, 2: [1e308] * 3},
    "spread near the largest": {0: [1e308, 1.5e308, 1.7e308], 1: [BIG, 1e308, 1.1e308], 2: [1e308]},
    "both signs": {0: [-BIG, BIG, -BIG], 1: [BIG, BIG, -1e308], 2: [0.0, 0.0, 0.0]},
    "tiny against huge": {0: [1e-300] * 3, 1: [1e300] * 3, 2: [1e300, 1.1e300, 1e300]},
    "subnormal": {0: [5e-324, 1e-320, 5e-324], 1: [1e300, 3e300, 1e300], 2: [5e-324, 1e300]},
    "huge against tiny": {0: [1e300, 1.2e300], 1: [1e-300, 1.1e-300], 2: [1.0, 1.0]},
}


def result(figures: dict[int, list[float]], higher_is_better: bool) -> TuneResult:
    trials = timed_trials(figures)
    return TuneResult(
        command=("python", "job.py"),
        vcpus=2,
        procs=1,
        procs_source=None,
        metric="m" if higher_is_better else None,
        metric_stat="last",
        higher_is_better=higher_is_better,
        candidates=CANDS,
        trials=tuple(trials),
        plan=TunePlan(3, 3, 0, 3, 1.0, 60.0),
        ranking=rank(CANDS, trials, higher_is_better=higher_is_better, vcpus=2),
        ended="complete",
        elapsed_s=9.0,
    )


@pytest.mark.parametrize("higher_is_better", [True, False], ids=["metric", "wall time"])
@pytest.mark.parametrize("figures", HOSTILE.values(), ids=HOSTILE.keys())
def test_any_finite_figure_gives_every_format(
    figures: dict[int, list[float]], higher_is_better: bool
) -> None:
    r = result(figures, higher_is_better)
    assert r.ranking.best is not None and r.ranking.pick is not None
    for st in r.ranking.standings:
        assert st.stats is not None and math.isfinite(st.stats.mean)
    doc = json.loads(render_tune(r, TuneFormat.JSON))  # strict JSON: no inf, no NaN
    assert doc == json.loads(json.dumps(tune_dict(r), allow_nan=False))
    for fmt in (TuneFormat.TEXT, TuneFormat.MARKDOWN):
        text = render_tune(r, fmt)
        assert not re.search(r"\binf\b|\bnan\b", text, re.IGNORECASE), text
        assert not re.search(r"[0-9]{20}", text), text  # never a 301-digit figure
        assert "±" in text


def test_the_issue_figures() -> None:
    # CMD printing 1e-300 under the default and 1e300 under T=1: "runs infx as fast (+inf %)".
    r = result({0: [1e-300, 1e-300, 1e-300], 2: [1e300, 1e300, 1e300]}, True)
    text = render_tune(r, TuneFormat.TEXT)
    assert "T=1 runs more than 1000x as fast as the default" in text
    row = next(line for line in text.splitlines() if line.startswith("T=1"))
    assert "1e+300 ± 0" in row and "more than 1000x" in row
    doc = tune_dict(r)
    t1 = next(c for c in doc["candidates"] if c["label"] == "T=1")
    assert t1["speedup"] is None and t1["speedup_ci95"] is None
    assert t1["speedup_beyond_limit"] == "above" and doc["ratio_limit"] == RATIO_LIMIT
    assert doc["ranking"]["default_slower"] is None
    assert doc["ranking"]["default_slower_beyond_limit"] == "above"
    assert fails_gate(r.ranking, 20.0)  # a thousandfold gap beyond noise fails the gate
    # And the other way round: less than 0.001x.
    slow = result({0: [1e300, 1e300], 2: [1e-300, 1e-300]}, True)
    assert "less than 0.001x" in render_tune(slow, TuneFormat.TEXT)


def test_describe_scales_instead_of_overflowing() -> None:
    s = describe([BIG, BIG, BIG])
    assert s is not None and s.mean == BIG and s.sd == 0 and s.half == 0
    wide = describe([-BIG, BIG])
    assert wide is not None and wide.mean == 0 and wide.sd == math.inf and wide.half == math.inf
    assert wide.low == -math.inf and wide.high == math.inf
    tiny = describe([5e-324, 1e-323])
    assert tiny is not None and tiny.mean == pytest.approx(7.5e-324, abs=5e-324)
    everyday = describe([41.0, 41.8, 40.8, 41.2])
    assert everyday is not None and everyday.mean == pytest.approx(41.2)
    assert everyday.sd == pytest.approx(0.43204937989385733)


def test_overlap_and_separation_with_infinite_spreads() -> None:
    wide = describe([-BIG, BIG])
    near = describe([1.0, 1.1, 0.9])
    assert wide is not None and near is not None
    assert overlap(wide, near) and runs_to_separate(wide, near) is None
    far = describe([BIG, BIG * 0.999, BIG * 0.998])
    neg = describe([-BIG, -BIG * 0.999, -BIG * 0.998])
    assert far is not None and neg is not None and not overlap(far, neg)
    assert runs_to_separate(far, neg) == 2  # a gap of twice the largest double, in halves


def test_runs_to_separate_is_the_first_count_that_parts_them() -> None:
    a = Stats(3, 10.0, 1.0, 9.0, 11.0, 2.5)
    b = Stats(3, 10.2, 1.0, 9.0, 11.0, 2.5)
    n = runs_to_separate(a, b)
    assert n is not None
    assert t975(n - 1) * 1.0 / math.sqrt(n) < 0.1 <= t975(n - 2) * 1.0 / math.sqrt(n - 1)
    hopeless = Stats(3, 10.0, 1e9, 9.0, 11.0, 1e9)
    assert runs_to_separate(hopeless, b) is None
    assert MAX_SEPARATING_RUNS == 100_000


def test_ratio_limit() -> None:
    assert beyond(RATIO_LIMIT) is None and beyond(1 / RATIO_LIMIT) is None
    assert beyond(RATIO_LIMIT * 1.001) == "above" and beyond(math.inf) == "above"
    assert beyond(0.0) == "below"
    one = Stats(1, 1e-300, None, 1e-300, 1e-300, None)
    other = Stats(1, 1e300, None, 1e300, 1e300, None)
    assert throughput_ratio(other, one, True) == (math.inf, None)
    assert throughput_ratio(one, other, True) == (0.0, None)
