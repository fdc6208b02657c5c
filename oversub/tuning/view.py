"""`oversub tune` in text (table, bar chart, the setting to paste), JSON and Markdown.

Pure: strings from a `TuneResult`. The chart is drawn by plotext, imported only when the
text is rendered. Everything CMD or the user wrote (the command, `--env` values) is escaped
for its sink.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
from collections.abc import Sequence

from oversub.render.escape import terminal
from oversub.render.plan_formats import export_lines
from oversub.render.plan_text import code_lines_for
from oversub.tuning.trials import RATIO_LIMIT, Candidate, Standing, Stats, TuneResult, beyond

TUNE_VARS = ("OVERSUB_TUNE_PROCS", "OVERSUB_TUNE_THREADS")
"""Set for the trials only (for programs that read them): never part of the setting to use."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

ENDED = {
    "complete": "all planned trials ran",
    "budget": "the budget ended the run: the table has what was measured until then",
    "interrupted": "interrupted: the table has what was measured until then",
    "default-failed": "the default run failed: nothing to compare with",
}


def figure_name(r: TuneResult) -> str:
    """What the figure is: "wall time (s)" or "steps_per_s (last)"."""
    if r.metric is None:
        return "wall time (s)"
    return f"{r.metric} ({r.metric_stat})"


LARGEST = f"{sys.float_info.max:.2g}"
"""The largest double, as a half width beyond it is written (">1.8e+308")."""


def _num(x: float) -> str:
    """A figure with 4 significant digits: plain for everyday sizes (0.001 to 10^7), in
    exponent form beyond (never a 309-digit number); inf is "beyond the largest double"."""
    if not math.isfinite(x):
        return f">{LARGEST}" if x > 0 else f"<-{LARGEST}"
    if x == 0:
        return "0"
    if not 1e-3 <= abs(x) < 1e7:
        return f"{x:.4g}"
    digits = max(0, 3 - math.floor(math.log10(abs(x))))
    return f"{x:.{min(digits, 6)}f}"


def ratio_text(ratio: float) -> str:
    """A speed-up: "1.37x", or beyond the limit "more than 1000x" / "less than 0.001x"."""
    side = beyond(ratio)
    if side == "above":
        return f"more than {RATIO_LIMIT:g}x"
    if side == "below":
        return f"less than {1 / RATIO_LIMIT:g}x"
    return f"{ratio:.2f}x"


def figure_text(s: Stats | None) -> str:
    if s is None:
        return "-"
    if s.half is None:
        return f"{_num(s.mean)} (1 run)"
    return f"{_num(s.mean)} ± {_num(s.half)}"


def speedup_text(st: Standing) -> str:
    if st.speedup is None:
        return "-"
    if st.speedup_half is None or beyond(st.speedup) is not None:
        return ratio_text(st.speedup)
    if st.speedup_half >= 100:  # an interval far wider than the ratio: its size in short
        return f"{st.speedup:.2f} ± {_num(st.speedup_half)}x"
    return f"{st.speedup:.2f} ± {st.speedup_half:.2f}x"


def variables_text(c: Candidate) -> str:
    """The candidate's variables in short: "inherited", "pools=2", "pools=2 NAME=1"."""
    parts = [] if c.threads is None else [f"pools={c.threads}"]
    parts += [f"{n}={v}" for n, v in c.extra]
    if c.procs is not None:
        parts.insert(0, f"procs={c.procs}")
    if c.threads is None and not c.extra:
        parts.append("inherited")
    return " ".join(parts)


def setting_env(c: Candidate) -> dict[str, str]:
    """The variables to set to use candidate `c` (the trial-only OVERSUB_TUNE_* left out)."""
    return {n: v for n, v in c.env.items() if n not in TUNE_VARS}


def _runs_text(st: Standing) -> str:
    n = st.stats.n if st.stats is not None else 0
    return f"{n}" + (f" ({st.failed} failed)" if st.failed else "")


def role_text(r: TuneResult, c: Candidate, role: str) -> str:
    """A role as the table shows it: "recommended" says its M when M was assumed."""
    if role == "recommended" and r.procs_source is None and c.procs is None:
        return f"recommended for M={r.procs}, assumed"
    return role


def row(r: TuneResult, st: Standing) -> list[str]:
    c = r.candidates[st.candidate]
    marks = []
    if st.candidate == r.ranking.pick:
        marks.append("pick")
    marks += [role_text(r, c, role) for role in c.roles if role != "default"]
    label = c.label + (f" ({', '.join(marks)})" if marks else "")
    return [
        label,
        variables_text(c),
        figure_text(st.stats),
        "-" if st.stats is None else f"{_num(st.stats.minimum)}…{_num(st.stats.maximum)}",
        _runs_text(st),
        speedup_text(st),
        st.verdict.value if st.verdict is not None else "not judged",
        "-" if st.delay_ratio is None else f"{st.delay_ratio:.2f}",
    ]


def headers(r: TuneResult) -> list[str]:
    return [
        "candidate",
        "variables",
        figure_name(r) + " ± 95%",
        "min…max",
        "runs",
        "speed-up",
        "verdict",
        "delay",
    ]


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    return lines


def conclusion(r: TuneResult) -> list[str]:
    """The sentences under the table: the best, the tie and what would part it, the
    default's distance from the best."""
    k = r.ranking
    if k.best is None or k.pick is None:
        return ["nothing was measured"]
    unit = "s" if r.metric is None else r.metric
    best = r.candidates[k.best]
    stats = {st.candidate: st.stats for st in k.standings}
    lines = []
    better = "fastest" if r.metric is None else "highest"
    lines.append(f"{best.label} is {better}: {figure_text(stats[k.best])} {unit}")
    if k.runner_up is not None and k.runner_up in k.tied:
        ru = r.candidates[k.runner_up]
        lines.append(
            f"{best.label} and {ru.label} are indistinguishable: "
            f"{figure_text(stats[k.best])} vs {figure_text(stats[k.runner_up])} {unit} "
            "(their 95 % intervals overlap)"
        )
        if k.runs_to_separate is not None:
            lines.append(
                f"about {k.runs_to_separate} timed runs each would separate them at this spread"
                f" (--runs {k.runs_to_separate})"
            )
        else:
            lines.append("no number of runs would separate them at the figures measured")
    if k.pick != k.best:
        lines.append(
            f"pick: {r.candidates[k.pick].label}, the cheapest of the "
            f"{len(k.tied)} within noise of the best"
        )
    if k.default_slower is not None:
        ratio = 1 + k.default_slower
        pct = f"{k.default_slower * 100:+.1f} %" if beyond(ratio) is None else ratio_text(ratio)
        if best.is_default:
            lines.append("the default is the fastest setting measured")
        elif not k.default_distinguishable:
            lines.append(f"the default is within noise of the best ({pct} by the means)")
        elif beyond(ratio) is not None:
            lines.append(
                f"{best.label} runs {ratio_text(ratio)} as fast as the default: a ratio beyond "
                f"{RATIO_LIMIT:g}x says the figures are not the same measure (check what CMD "
                "prints)"
            )
        else:
            lines.append(f"{best.label} runs {ratio:.2f}x as fast as the default ({pct})")
    return lines


def setting_lines(r: TuneResult) -> list[str]:
    """The setting to use, ready to paste: exports and code lines (as `recommend` shows
    them), or that the default needs nothing."""
    k = r.ranking
    if k.pick is None:
        return []
    c = r.candidates[k.pick]
    if c.threads is None and not c.extra:
        lines = ["Setting: keep the default (no variable to set)."]
        if c.procs is not None:
            lines.append(f"with {c.procs} processes ({{procs}} = {c.procs})")
        return lines
    lines = ["Before starting the job:"]
    lines += [f"unset {name}" for name in c.unset]
    lines += export_lines(setting_env(c)).rstrip("\n").split("\n")
    if c.procs is not None:
        lines.append(f"# and run {c.procs} processes ({{procs}} = {c.procs})")
    if c.threads is not None:
        lines += ["", "Or in code:", *code_lines_for(c.threads)]
    return lines


def bar_chart(r: TuneResult, *, width: int = 80, color: bool = False) -> str:
    """A horizontal bar per measured candidate: its mean figure."""
    measured = [st for st in r.ranking.standings if st.stats is not None]
    if not measured:
        return ""
    import plotext as plt

    labels = [terminal(r.candidates[st.candidate].label) for st in measured]
    values, unit = chart_values([st.stats.mean for st in measured if st.stats is not None])
    plt.clf()
    # The size given: by default plotext caps a chart to the terminal it finds itself
    # (COLUMNS and LINES, else sys.__stdout__, else 80 x 24), wherever the text goes.
    plt.limit_size(False, False)
    plt.theme("pro" if color else "clear")
    plt.plotsize(max(40, min(width, 120)), min(4 + 2 * len(measured), 30))
    plt.bar(labels, values, orientation="horizontal", width=0.4, color="cyan" if color else None)
    plt.title(
        figure_name(r) + " per candidate (mean" + (f", in units of {unit}" if unit else "") + ")"
    )
    text = plt.build()
    plt.clf()
    if not color:
        text = _ANSI.sub("", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def chart_values(means: Sequence[float]) -> tuple[list[float], str | None]:
    """The means as the chart draws them: as they are for everyday sizes, else in units of
    a power of ten ("1e+300") that brings the largest near 1 (plotext fails on figures near
    the largest double); the unit, or None."""
    top = max((abs(m) for m in means), default=0.0)
    if top == 0 or 1e-6 <= top < 1e12:
        return list(means), None
    power = math.floor(math.log10(top))
    # Two steps, each a power of ten that is a finite double (10**324 is not).
    first, second = 10.0 ** (-(power // 2)), 10.0 ** (-(power - power // 2))
    return [m * first * second for m in means], f"1e{power:+d}"


def about_lines(r: TuneResult) -> list[str]:
    mode = (
        "fixed work: wall time of each run"
        if r.metric is None
        else f"fixed time: the {r.metric_stat} {r.metric}= line of each trial"
    )
    source = {
        None: " assumed (give --procs M)",
        "trials": " (the processes the default's first trial ran busy at once)",
    }.get(r.procs_source, f" (from {r.procs_source})")
    lines = [
        f"command: {terminal(shlex.join(r.command))}",
        f"N = {r.vcpus} vCPUs, M = {r.procs}{source}; {mode}",
    ]
    if r.plan is not None:
        p = r.plan
        lines.append(
            f"{p.candidates} candidates x ({p.warmup} warm-up + {p.runs} timed) = "
            f"{p.trials} trials, interleaved; {len(r.trials)} ran in {r.elapsed_s:.0f} s"
        )
    return lines


def tune_text(r: TuneResult, *, width: int = 80, color: bool = False) -> str:
    """The terminal report: what ran, the table, the chart, the conclusion, the setting."""
    rows = [row(r, st) for st in r.ranking.standings]
    parts = ["\n".join(about_lines(r)), "\n".join(_plain_table(headers(r), rows))]
    if any(c.threads is not None for c in r.candidates):
        parts.append(
            "pools=T sets every thread variable oversub knows to T: "
            + ", ".join(n for n in _thread_names(r))
        )
    chart = bar_chart(r, width=width, color=color)
    if chart:
        parts.append(chart)
    ending = [ENDED.get(r.ended, r.ended), *conclusion(r), *(terminal(n) for n in r.notes)]
    parts.append("\n".join(ending))
    setting = setting_lines(r)
    if setting:
        parts.append("\n".join(setting))
    return "\n\n".join(parts) + "\n"


def _thread_names(r: TuneResult) -> list[str]:
    for c in r.candidates:
        if c.threads is not None:
            extra = {n for n, _ in c.extra}
            return [n for n in c.env if n not in TUNE_VARS and n not in extra]
    return []
