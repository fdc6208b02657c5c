"""The live view's sparkline: demand against N over the last minute, from a bounded history."""

from __future__ import annotations

from rich.console import Console

from oversub.core.thresholds import Thresholds
from oversub.render.live import watch_renderable
from oversub.render.sparkline import BLOCKS, History, columns, sparkline
from tests.support.builders import budget, oversubscribed_run


def test_history_keeps_the_last_minute_only_and_is_bounded() -> None:
    h = History()
    for i in range(200):
        h.add(float(i), 1.0, 2)
    assert h.points[0][0] == 199 - 60 and len(h.points) == 61
    tiny = History(most=10)
    for i in range(50):
        tiny.add(i * 0.1, 1.0, 2)
    assert len(tiny.points) == 10


def test_columns_keep_each_slice_s_peak() -> None:
    points = [(i * 0.1, 1.0 if i != 333 else 9.0, 2) for i in range(600)]
    cols = columns(points, 60)
    assert len(cols) == 60 and max(d for d, _ in cols) == 9.0
    assert columns(points[:5], 60) == [(1.0, 2)] * 5


def test_sparkline_is_red_above_n_and_green_below() -> None:
    points = [(float(i), d, 2) for i, d in enumerate([1.0, 1.0, 4.0, 4.0])]
    line = sparkline(points, margin=0.15)
    bars = line.plain.split("  ")[1]
    # A scale topped at 2 N = 4: 1.0 is a quarter, 4.0 the top; N = 2 the middle block.
    assert bars == BLOCKS[2] * 2 + BLOCKS[-1] * 2
    styles = [str(span.style) for span in line.spans if span.end - span.start == 1]
    assert styles == ["green", "green", "red", "red"]
    assert f"now 4.0 on N = 2 ({BLOCKS[4]} = N" in line.plain


def test_the_live_frame_shows_the_trend_under_the_banner() -> None:
    iv = oversubscribed_run(1)[0]
    from oversub.analysis.verdict import assess

    history = [(float(i), 1.0 + i, 2) for i in range(10)]
    frame = watch_renderable(
        iv, assess(iv, Thresholds()), budget(2), elapsed=10, samples=10, history=history
    )
    console = Console(width=120, record=True, color_system=None)
    console.print(frame)
    shown = console.export_text()
    assert "demand, last 60 s" in shown and BLOCKS[-1] in shown
    lines = shown.splitlines()
    banner = next(i for i, line in enumerate(lines) if "OVERSUBSCRIBED" in line.upper())
    spark = next(i for i, line in enumerate(lines) if "demand, last 60 s" in line)
    assert spark > banner
