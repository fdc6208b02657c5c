"""Every member of every format enum has a renderer, and each renderer gives the right kind
of output (rich renderable for text/live, parseable JSON, eval-able env lines)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console, RenderableType

from oversub.render import (
    CpusFormat,
    RecommendFormat,
    WatchFormat,
    render_cpus,
    render_recommend,
    render_watch_interval,
    render_watch_summary,
)
from oversub.render.plan_formats import budget_dict, plan_dict
from oversub.render.serialize import interval_dict, summary_dict
from tests.support.builders import (
    make_assessment,
    make_budget,
    make_interval,
    make_plan,
    make_summary,
)


def render(renderable: RenderableType) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=120, color_system=None).print(renderable)
    return buffer.getvalue()


def test_cli_values_are_stable() -> None:
    assert [f.value for f in CpusFormat] == ["text", "json"]
    assert [f.value for f in RecommendFormat] == ["text", "json", "env", "prefix"]
    assert [f.value for f in WatchFormat] == ["live", "ndjson", "json"]


@pytest.mark.parametrize("fmt", list(CpusFormat))
def test_render_cpus_every_format(fmt: CpusFormat) -> None:
    budget = make_budget()
    out = render_cpus(budget, fmt)
    if fmt is CpusFormat.JSON:
        assert isinstance(out, str) and out.endswith("}\n")
        assert json.loads(out) == budget_dict(budget)
    else:
        assert "N = 4 usable vCPUs" in render(out)


@pytest.mark.parametrize("fmt", list(RecommendFormat))
def test_render_recommend_every_format(fmt: RecommendFormat) -> None:
    plan = make_plan()
    out = render_recommend(plan, fmt)
    if fmt is RecommendFormat.JSON:
        assert isinstance(out, str) and json.loads(out) == plan_dict(plan)
    elif fmt is RecommendFormat.ENV:
        assert isinstance(out, str)
        assert out.splitlines()[0] == "export OMP_NUM_THREADS=2"
    elif fmt is RecommendFormat.PREFIX:
        assert isinstance(out, str) and out.count("\n") == 1
        assert out.startswith("OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 ")
    else:
        assert "torch.set_num_threads(2)" in render(out)


@pytest.mark.parametrize("fmt", list(WatchFormat))
def test_render_watch_every_format(fmt: WatchFormat) -> None:
    iv, assessment, summary = make_interval(), make_assessment(), make_summary()
    stamp = "2025-01-31T12:00:00.123Z"
    frame = render_watch_interval(
        iv, assessment, make_budget(), fmt, elapsed=2.0, samples=3, timestamp=stamp
    )
    final = render_watch_summary(summary, fmt, timestamp=stamp)
    if fmt is WatchFormat.LIVE:
        assert frame is not None and "OVERSUBSCRIBED" in render(frame)
        assert "oversub summary" in render(final)
    elif fmt is WatchFormat.NDJSON:
        assert isinstance(frame, str) and isinstance(final, str)
        assert frame.count("\n") == 1 and final.count("\n") == 1
        assert json.loads(frame) == {
            "type": "interval",
            "timestamp": stamp,
            **interval_dict(iv, assessment),
        }
        assert json.loads(final) == {"type": "summary", "timestamp": stamp, **summary_dict(summary)}
    else:
        assert frame is None  # JSON prints only the summary
        assert isinstance(final, str) and json.loads(final) == summary_dict(summary)
        assert final.count("\n") > 1  # indented for people


def test_utc_timestamp_is_iso_8601_utc() -> None:
    import re
    from datetime import datetime, timedelta, timezone

    from oversub.cli.output import utc_timestamp

    stamp = utc_timestamp()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp), stamp
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs(datetime.now(timezone.utc) - parsed) < timedelta(minutes=1)
