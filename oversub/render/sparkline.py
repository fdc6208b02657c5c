"""The live view's history: demand against N over the last minute, as one line of blocks.

A pure function of the few (time, demand, N) points the live view keeps (`History`): a
trend, not a snapshot, so a user sees whether the waiting started a minute ago or just now.
Each column is the highest demand of its slice of the minute. The scale tops at twice N (or
the highest demand, when higher), so N sits at the middle block and a column above it is
more runnable threads than vCPUs; red above N (plus the margin), green at or below.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"
WINDOW_S = 60.0
"""Seconds of history shown."""
COLUMNS = 60
"""Columns at most (a minute at 1 s per column)."""


class History:
    """The last `WINDOW_S` seconds of (end time, demand, N), oldest first; bounded."""

    def __init__(self, window: float = WINDOW_S, most: int = 1200) -> None:
        self.window = window
        self.points: deque[tuple[float, float, int]] = deque(maxlen=most)

    def add(self, t: float, demand: float, vcpus: int) -> None:
        self.points.append((t, demand, vcpus))
        while self.points and self.points[0][0] < t - self.window:
            self.points.popleft()


def columns(
    points: Sequence[tuple[float, float, int]], width: int = COLUMNS
) -> list[tuple[float, int]]:
    """(highest demand, N) per column: the points split into at most `width` equal slices
    of time, oldest first."""
    if not points:
        return []
    if len(points) <= width:
        return [(d, n) for _, d, n in points]
    start, end = points[0][0], points[-1][0]
    span = (end - start) or 1.0
    out: dict[int, tuple[float, int]] = {}
    for t, d, n in points:
        i = min(width - 1, int((t - start) / span * width))
        best = out.get(i)
        out[i] = (d, n) if best is None or d > best[0] else best
    return [out[i] for i in sorted(out)]


def sparkline(
    points: Sequence[tuple[float, float, int]], margin: float, width: int = COLUMNS
) -> Text:
    """One line: "demand, last 60 s  ▂▂▃▇█  now 3.9 on N = 2 (top 4.2)"."""
    from rich.text import Text

    cols = columns(points, width)
    line = Text("demand, last 60 s  ", style="dim")
    if not cols:
        return line
    top = max(max(d for d, _ in cols), 2 * max(n for _, n in cols), 1e-9)

    def block(value: float) -> str:
        return BLOCKS[min(len(BLOCKS) - 1, int(value / top * (len(BLOCKS) - 1) + 0.5))]

    for demand, n in cols:
        over = demand > n * (1 + margin)
        line.append(block(demand), style="red" if over else "green")
    now, n = cols[-1]
    line.append(f"  now {now:.1f} on N = {n} ({block(n)} = N; red: above N)", style="dim")
    return line
