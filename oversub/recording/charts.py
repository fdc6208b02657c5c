"""`oversub report`: a replayed recording as text (with terminal charts) and as JSON.

The series every format draws come from `series`: per interval, its end in seconds since
the first sample, the tree's demand, N, the delay ratio, and the CPU of the busiest
processes. The text charts are drawn by plotext (imported only here, when `report` renders
text). Every string that came from the recording is untrusted: it is escaped for the
terminal here, for HTML and Markdown in their modules.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oversub.recording.types import Replay
from oversub.render.escape import terminal
from oversub.render.phrases import NOT_JUDGED

TOP_PROCESSES = 6
"""Processes drawn in the per-process CPU chart (the busiest over the run)."""


@dataclass(frozen=True)
class Series:
    """What the charts draw, one entry per interval."""

    seconds: tuple[float, ...]
    """End of each interval, seconds after the first sample."""
    demand: tuple[float, ...]
    vcpus: tuple[int, ...]
    delay_ratio: tuple[float | None, ...]
    verdicts: tuple[str, ...]
    processes: tuple[tuple[int, str, tuple[float, ...]], ...]
    """(pid, label, CPU % per interval) of the busiest processes, busiest first (the label
    tells multiprocessing's helpers apart: `phrases.process_label`)."""


def series(replay: Replay) -> Series:
    ivs = replay.intervals
    start = ivs[0].t0 if ivs else 0.0
    from oversub.render.phrases import process_label

    cpu_s: dict[int, float] = {}
    names: dict[int, str] = {}
    cmdlines = {p.pid: p.cmdline for iv in ivs for p in iv.processes}
    for iv in ivs:
        for p in iv.processes:
            cpu_s[p.pid] = cpu_s.get(p.pid, 0.0) + p.cpu_s
            names[p.pid] = process_label(p.name, p.cmdline, cmdlines.get(p.ppid), p.ppid, 24)
    busiest = sorted(cpu_s, key=lambda pid: (-cpu_s[pid], pid))[:TOP_PROCESSES]
    per_process = []
    for pid in busiest:
        values = []
        for iv in ivs:
            values.append(sum(p.cpu_percent for p in iv.processes if p.pid == pid))
        per_process.append((pid, names[pid], tuple(values)))
    return Series(
        seconds=tuple(iv.t1 - start for iv in ivs),
        demand=tuple(iv.totals.demand for iv in ivs),
        vcpus=tuple(iv.vcpus for iv in ivs),
        delay_ratio=tuple(iv.totals.run_delay_ratio for iv in ivs),
        verdicts=tuple(a.verdict.value for a in replay.assessments),
        processes=tuple(per_process),
    )


_RANK = {"ok": 0, "at-risk": 1, "starved": 2, "oversubscribed": 3}


def thinned(s: Series, most: int) -> Series:
    """At most `most` points: consecutive intervals grouped, each group drawn as its mean
    (demand, delay ratio, CPU), its end, and its worst verdict. A chart is some 900 pixels
    wide: more points than that only make the page heavier."""
    n = len(s.seconds)
    if n <= most:
        return s
    size = -(-n // most)
    groups = [range(i, min(i + size, n)) for i in range(0, n, size)]

    def mean(values: tuple[float, ...], g: range) -> float:
        return sum(values[i] for i in g) / len(g)

    def mean_known(values: tuple[float | None, ...], g: range) -> float | None:
        known = [v for v in (values[i] for i in g) if v is not None]
        return sum(known) / len(known) if known else None

    return Series(
        seconds=tuple(s.seconds[g[-1]] for g in groups),
        demand=tuple(mean(s.demand, g) for g in groups),
        vcpus=tuple(max(s.vcpus[i] for i in g) for g in groups),
        delay_ratio=tuple(mean_known(s.delay_ratio, g) for g in groups),
        verdicts=tuple(
            max((s.verdicts[i] for i in g), key=lambda v: _RANK.get(v, -1)) for g in groups
        ),
        processes=tuple(
            (pid, label, tuple(mean(values, g) for g in groups))
            for pid, label, values in s.processes
        ),
    )


def verdict_word(verdict: str | None) -> str:
    return NOT_JUDGED if verdict is None else verdict


def changed_thresholds(replay: Replay) -> list[tuple[str, float, float]]:
    """(name, recorded, given) of each threshold the replay changes."""
    own = replay.recording.header.thresholds
    return [
        (name, getattr(own, name), getattr(replay.thresholds, name))
        for name in own._fields
        if getattr(own, name) != getattr(replay.thresholds, name)
    ]


def about_lines(replay: Replay) -> list[str]:
    """What was recorded, under which thresholds it is judged, and how that compares."""
    rec = replay.recording
    h = rec.header
    cgroup = f"--cgroup {h.budget.cgroup}" if h.budget.cgroup is not None else ""
    what = {
        "watch": f"oversub watch {cgroup or h.pid}",
        "check-pid": f"oversub check --pid {h.pid}",
        "check-cgroup": f"oversub check {cgroup}",
        "check-command": "oversub check -- " + shlex.join(h.command or ()),
    }.get(h.mode, h.mode)
    span = replay.summary.duration_s
    lines = [
        f"recording of {what} on {h.host}, started {h.started} (oversub {h.version})",
        f"{len(rec.intervals)} intervals over {span:.1f} s (every {h.interval:g} s asked); "
        f"N = {h.budget.vcpus}",
    ]
    changed = changed_thresholds(replay)
    if changed:
        lines.append(
            "re-assessed with "
            + ", ".join(
                f"{name.replace('_', '-')} {new:g} (recorded {old:g})" for name, old, new in changed
            )
        )
    else:
        lines.append("re-assessed with the recording's own thresholds")
    new = verdict_word(replay.summary.verdict.value if replay.summary.verdict else None)
    if rec.ending is None:
        lines.append(f"verdict: {new} (the run ended without a summary: no recorded verdict)")
    else:
        old = verdict_word(rec.ending.verdict)
        same = "the same as recorded" if old == new else f"recorded: {old}"
        if old != new and not h.episodes:
            same += ", by an oversub that did not judge episodes"
        lines.append(f"verdict: {new} ({same})")
    if rec.cut:
        lines.append("the last line of the file was cut (a write interrupted): left out")
    return lines


_ANSI = re.compile(r"\x1b\[[0-9;]*m")

SERIES_STYLE = {"demand": ("braille", "red"), "N": ("─", "blue"), "delay ratio": ("braille", "red")}
"""Each series' marker and colour: distinct markers, so the legend tells them apart in
black and white too (N, a flat line, is drawn with box-drawing dashes)."""


def nice_ticks(top: float, *, most: int = 6, exact: Sequence[float] = ()) -> list[float]:
    """Round tick values from 0 to at least `top`: a step of 1, 2, 2.5 or 5 times a power of
    ten, at most `most` + 1 ticks; every value of `exact` (N) is a tick too, so its line is
    drawn on the row its label names."""
    top = top if math.isfinite(top) and top > 0 else 1.0
    raw = top / most
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    count = math.ceil(top / step - 1e-9)
    ticks = {round(i * step, 10) for i in range(count + 1)}
    ticks.update(float(v) for v in exact if 0 <= v <= count * step)
    return sorted(ticks)


def _tick_label(value: float) -> str:
    return f"{value:g}"


def line_chart(
    title: str,
    x: Sequence[float],
    lines: Sequence[tuple[str, Sequence[float]]],
    *,
    width: int,
    height: int,
    ymax: float,
    exact: Sequence[float] = (),
    color: bool = False,
) -> str:
    import plotext as plt

    plt.clf()
    # The size given, exactly: by default plotext caps a chart to the terminal it finds
    # itself (COLUMNS and LINES, else sys.__stdout__, else 80 x 24), whatever the caller
    # asked and wherever the text goes.
    plt.limit_size(False, False)
    plt.theme("clear")
    plt.plotsize(width, height)
    for label, ys in lines:
        marker, colour = SERIES_STYLE.get(label, ("braille", "red"))
        plt.plot(list(x), list(ys), marker=marker, color=colour, label=terminal(label))
    yticks = nice_ticks(ymax, exact=exact)
    plt.yticks(yticks, [_tick_label(v) for v in yticks])
    plt.ylim(0, yticks[-1])
    xticks = nice_ticks(max(x) if x else 1.0, most=5)
    xticks = [t for t in xticks if min(x) <= t <= max(x)] or [min(x), max(x)]
    plt.xticks(xticks, [_tick_label(v) for v in xticks])
    plt.title(title)
    plt.xlabel("seconds")
    text = plt.build()
    plt.clf()
    if not color:
        text = _ANSI.sub("", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def charts_text(replay: Replay, width: int = 80, *, color: bool = False) -> list[str]:
    """The terminal charts: demand against N, and the delay ratio (when known); in colour
    (ANSI) when `color`, for a terminal."""
    s = series(replay)
    if len(s.seconds) < 2:
        return ["(one interval or none: no chart over time)"]
    width = max(40, min(width, 160))
    finite = [v for v in (*s.demand, *s.vcpus) if math.isfinite(v)]
    top = max(finite, default=1.0) * 1.05
    out = [
        line_chart(
            "demand (runnable threads) against N",
            s.seconds,
            [("demand", s.demand), ("N", [float(n) for n in s.vcpus])],
            width=width,
            height=16,
            ymax=top,
            exact=sorted({float(n) for n in s.vcpus}),
            color=color,
        )
    ]
    known = [(t, r) for t, r in zip(s.seconds, s.delay_ratio, strict=True) if r is not None]
    if len(known) >= 2:
        out.append(
            line_chart(
                "delay ratio (share of runnable time spent waiting)",
                [t for t, _ in known],
                [("delay ratio", [r for _, r in known])],
                width=width,
                height=12,
                ymax=1.0,
                color=color,
            )
        )
    else:
        out.append("delay ratio: unknown (no run delay was recorded)")
    return out


def report_text(replay: Replay, width: int = 80, *, color: bool = False) -> str:
    """About lines, the charts (coloured when `color`), then the run's summary
    (`render.finalreport.summary_text`)."""
    from oversub.render.finalreport import summary_text

    parts = [
        "\n".join(terminal(line) for line in about_lines(replay)),
        *charts_text(replay, width, color=color),
        summary_text(replay.summary),
    ]
    return "\n\n".join(parts) + "\n"


def report_dict(replay: Replay) -> dict[str, Any]:
    """`report --format json`.

    Keys:
      - `recording` (object): `oversub` (the version that wrote it), `host`, `started`,
        `mode`, `pid`, `command`, `interval`, `intervals` (records read), `complete` (it has
        its summary), `cut` (its last line was cut and left out).
      - `recorded` (object | null): the recorded `verdict` and `findings` (rule ids); null for
        a run killed before its summary.
      - `thresholds` (object): the thresholds of this assessment; `changed` (list[str]): the
        ones that differ from the recording's.
      - `summary` (object): the run re-assessed, as `watch --format json` prints it.
      - `series` (list): per interval `seconds` (end, after the first sample), `timestamp`,
        `demand`, `vcpus`, `run_delay_ratio`, `verdict`.
    """
    from oversub.render.serialize import json_number, summary_dict

    rec = replay.recording
    h = rec.header
    s = series(replay)
    return {
        "recording": {
            "oversub": h.version,
            "host": h.host,
            "started": h.started,
            "mode": h.mode,
            "pid": h.pid,
            "command": None if h.command is None else list(h.command),
            "interval": h.interval,
            "intervals": len(rec.intervals),
            "complete": rec.ending is not None,
            "cut": rec.cut,
        },
        "recorded": None
        if rec.ending is None
        else {"verdict": rec.ending.verdict, "findings": list(rec.ending.findings)},
        "thresholds": replay.thresholds._asdict(),
        "changed": [name for name, _, _ in changed_thresholds(replay)],
        "summary": summary_dict(replay.summary),
        "series": [
            {
                "seconds": json_number(t),
                "timestamp": stamp,
                "demand": json_number(d),
                "vcpus": n,
                "run_delay_ratio": json_number(r),
                "verdict": v,
            }
            for t, stamp, d, n, r, v in zip(
                s.seconds, rec.timestamps, s.demand, s.vcpus, s.delay_ratio, s.verdicts, strict=True
            )
        ],
    }
