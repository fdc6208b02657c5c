"""Line charts as inline SVG for the HTML report: axes with round ticks, lines, a legend,
optional dashed reference lines and a band of coloured cells under the plot (the verdict of
each interval). No script and no external resource: the page draws offline, and a Content
Security Policy can forbid everything else.

Labels are escaped here (`escape.html`); numbers are formatted here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from oversub.render.escape import html

WIDTH, HEIGHT = 960, 280
LEFT, RIGHT, BOTTOM = 56, 16, 44
LEGEND_ROW = 18
"""Height of one row of the legend, under the title."""
BAND = 10
"""Height of the band of verdict cells under the plot."""


@dataclass(frozen=True)
class Line:
    label: str
    color: str
    values: Sequence[float | None]
    """One per x; None leaves a gap."""
    dashed: bool = False
    width: float = 2.0


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top`: steps of 1, 2 or 5 times a power of 10."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < top - 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:g}"


def line_chart(
    title: str,
    xs: Sequence[float],
    lines: Sequence[Line],
    *,
    y_label: str,
    x_label: str = "seconds since the first sample",
    y_top: float | None = None,
    band: Sequence[str] | None = None,
    links: Sequence[tuple[str, str] | None] | None = None,
    chart_id: str = "chart",
) -> str:
    """One chart as an `<svg>` element (a string). `band`: a colour per x for the cells
    under the plot; `links`: per cell, None or (a fragment of the page, "#episode-1", and
    its title), which makes the cell a link to it."""
    known = [v for line in lines for v in line.values if v is not None]
    top = y_top if y_top is not None else max([*known, 1.0]) * 1.1
    y_ticks = nice_ticks(top)
    y_max = y_ticks[-1]
    x_min = 0.0
    x_max = max(xs[-1], 1e-9) if xs else 1.0
    x_ticks = [t for t in nice_ticks(x_max, 8) if t <= x_max + 1e-9]
    legend, rows = _legend(lines)
    top = 32 + LEGEND_ROW * rows + 10
    height = HEIGHT + LEGEND_ROW * (rows - 1)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = height - top - BOTTOM - (BAND + 6 if band else 0)

    def px(x: float) -> float:
        return LEFT + (x - x_min) / (x_max - x_min or 1) * plot_w

    def py(y: float) -> float:
        return top + plot_h - min(max(y, 0.0), y_max) / (y_max or 1) * plot_h

    out = [
        f'<svg id="{html(chart_id)}" class="chart" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="{html(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<text class="title" x="{LEFT}" y="20">{html(title)}</text>',
    ]
    for t in y_ticks:
        y = py(t)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    base = top + plot_h
    for t in x_ticks:
        x = px(t)
        out.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 4}"/>')
        label_y = height - BOTTOM + 18
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{label_y}" text-anchor="middle">{_fmt(t)}</text>'
        )
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{base}" y2="{base}"/>')
    out.append(
        f'<text class="label" x="{LEFT + plot_w / 2:.1f}" y="{height - 6}" '
        f'text-anchor="middle">{html(x_label)}</text>'
    )
    out.append(
        f'<text class="label" transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{html(y_label)}</text>'
    )
    if band and xs:
        y = base + 6
        starts = [0.0, *xs[:-1]]
        targets = list(links) if links is not None else [None] * len(xs)
        for x0, x1, color, link in zip(starts, xs, band, targets, strict=True):
            width = max(px(x1) - px(x0), 1)
            cell = (
                f'<rect class="band" x="{px(x0):.1f}" y="{y}" width="{width:.1f}" '
                f'height="{BAND}" fill="{html(color)}"/>'
            )
            if link is not None:  # a fragment of this page: no request
                href, title = link
                cell = f'<a href="{html(href)}"><title>{html(title)}</title>{cell}</a>'
            out.append(cell)
    for line in lines:
        out.extend(_polylines(line, xs, px, py))
    out.extend(legend)
    out.append("</svg>")
    return "\n".join(out)


def _polylines(line: Line, xs: Sequence[float], px: object, py: object) -> list[str]:
    """The line's runs of known values (a None starts a new run)."""
    assert callable(px) and callable(py)
    runs: list[list[str]] = [[]]
    for x, v in zip(xs, line.values, strict=True):
        if v is None:
            runs.append([])
            continue
        runs[-1].append(f"{px(x):.1f},{py(v):.1f}")
    dash = ' stroke-dasharray="6 4"' if line.dashed else ""
    out = []
    for points in runs:
        if len(points) == 1:  # a lone point: a dot, so it is seen
            cx, cy = points[0].split(",")
            out.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{html(line.color)}"/>')
        elif points:
            out.append(
                f'<polyline class="series" fill="none" stroke="{html(line.color)}" '
                f'stroke-width="{line.width:g}"{dash} points="{" ".join(points)}"/>'
            )
    return out


def _legend(lines: Sequence[Line]) -> tuple[list[str], int]:
    """Rows under the title, left to right, wrapped to the width: a swatch and a label per
    line (labels cut to 32 characters). (The elements, the number of rows.)"""
    out = []
    x, row = LEFT, 0
    for line in lines:
        label = line.label if len(line.label) <= 32 else line.label[:31] + "…"
        width = 7 * len(label) + 48
        if x > LEFT and x + width > WIDTH - RIGHT:
            x, row = LEFT, row + 1
        y = 36 + LEGEND_ROW * row
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        out.append(
            f'<line x1="{x}" x2="{x + 20}" y1="{y}" y2="{y}" stroke="{html(line.color)}" '
            f'stroke-width="3"{dash}/>'
        )
        out.append(f'<text class="legend" x="{x + 25}" y="{y + 4}">{html(label)}</text>')
        x += width
    return out, row + 1
