"""`oversub diff`: two runs side by side, in text, JSON or Markdown.

Each row is a figure of BEFORE, of AFTER and the change; the closing line says whether
AFTER is worse (`recording.compare` decides) and why. Recorded strings (file names, the
commands) are escaped for each sink.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from typing import Any

from oversub.recording.types import Comparison, Figures
from oversub.render.escape import markdown as _md
from oversub.render.escape import terminal

Row = tuple[str, str, str, str]


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 2) -> str:
    return "?" if value is None else f"{value:.{digits}f}"


def _change(b: float | None, a: float | None, *, points: bool = False) -> str:
    if a is None or b is None:
        return ""
    if points:
        return f"{(a - b) * 100:+.0f} pts"
    if b == 0:
        return f"{a - b:+.2f}"
    return f"{a - b:+.2f} ({(a - b) / abs(b):+.0%})"


RATIO_LIMIT = 1000.0
"""A throughput's ratio beyond this either way is written "more than 1000x" / "less than
0.001x", as `tune` writes it (`tuning.trials.RATIO_LIMIT`, the same figure: a recording
module may not import a tuning one): no setting changes a job's throughput a thousandfold,
and a percentage of it would be a 300-digit figure or inf."""


def _difference(b: float, a: float) -> str:
    """AFTER - BEFORE, signed: two decimals while that is short, else four significant
    digits; exact (as a decimal) when it is beyond the largest double, where the float
    subtraction gives inf (-1.7e308 -> 1.7e308)."""
    d = a - b
    if not math.isfinite(d):
        with localcontext() as exact:
            exact.prec = 4
            return f"{(Decimal(a) - Decimal(b)).normalize():+g}"
    return f"{d:+.2f}" if abs(d) < 1e9 else f"{d:+.4g}"


def _metric_change(b: float | None, a: float | None) -> str:
    """A throughput's change: the difference, and the relative change when both have the
    same sign (a percentage, or the ratio stated as beyond `RATIO_LIMIT`); any finite
    figures, huge ones included, give a true line, never inf."""
    if a is None or b is None:
        return ""
    diff = _difference(b, a)
    if b == 0 or a == 0 or (a > 0) != (b > 0):
        return diff  # from or to zero, or across it: no share of BEFORE means anything
    ratio = a / b  # positive; inf or 0 when beyond the doubles, which the limit covers
    if ratio > RATIO_LIMIT:
        return f"{diff} (more than {RATIO_LIMIT:g}x)"
    if ratio < 1 / RATIO_LIMIT:
        return f"{diff} (less than {1 / RATIO_LIMIT:g}x)"
    return f"{diff} ({(a - b) / abs(b):+.0%})"


def _count(b: int, a: int) -> str:
    return "" if a == b else f"{a - b:+d}"


def _ratio(b: float | None, a: float | None) -> str:
    if a is None or b is None or b == 0:
        return ""
    return f"{(a - b) / b:+.0%}"


def rows(c: Comparison) -> list[Row]:
    b, a = c.before, c.after

    out: list[Row] = [
        (
            "verdict",
            b.verdict or "not judged",
            a.verdict or "not judged",
            "worse"
            if any(r.startswith("verdict") for r in c.worse)
            else "better"
            if any(r.startswith("verdict") for r in c.better)
            else "same",
        ),
        ("N (usable vCPUs)", str(b.vcpus), str(a.vcpus), _count(b.vcpus, a.vcpus)),
        ("demand (runnable threads)", _num(b.demand), _num(a.demand), _change(b.demand, a.demand)),
        (
            "delay ratio",
            _pct(b.run_delay_ratio),
            _pct(a.run_delay_ratio),
            _change(b.run_delay_ratio, a.run_delay_ratio, points=True),
        ),
        (
            "active threads",
            str(b.active_threads),
            str(a.active_threads),
            _count(b.active_threads, a.active_threads),
        ),
        (
            "involuntary switches per CPU-second",
            _num(b.involuntary_ctx_per_cpu_s, 0),
            _num(a.involuntary_ctx_per_cpu_s, 0),
            _ratio(b.involuntary_ctx_per_cpu_s, a.involuntary_ctx_per_cpu_s),
        ),
        ("CPU %", f"{b.cpu_percent:.0f}", f"{a.cpu_percent:.0f}", ""),
        ("seconds measured", f"{b.seconds:.1f}", f"{a.seconds:.1f}", ""),
    ]
    before: dict[str, float | None] = dict(b.metrics)
    after: dict[str, float | None] = dict(a.metrics)
    if c.metric is not None:  # the gated one: its value may be missing from either run
        before[c.metric], after[c.metric] = b.metric, a.metric
    for name in c.metrics:
        was, now = before.get(name), after.get(name)
        out.append(
            (
                name,
                "not recorded" if was is None else f"{was:g}",
                "not recorded" if now is None else f"{now:g}",
                _metric_change(was, now),
            )
        )
    return out


def closing(c: Comparison) -> str:
    if c.unjudged:
        return (
            f"oversub diff: cannot compare: {' and '.join(c.unjudged).upper()} has no verdict "
            "(nothing measured, or the command failed), exit 3"
        )
    noted = ""
    if c.noted:
        noted = f" (not gated: {'; '.join(c.noted)}; --metric NAME gates on a figure)"
    if c.worse:
        return "oversub diff: AFTER is worse: " + "; ".join(c.worse) + noted + ", exit 1"
    better = ("; better: " + "; ".join(c.better)) if c.better else ""
    return f"oversub diff: AFTER is not worse{better}{noted}, exit 0"


def diff_text(c: Comparison, before: str, after: str) -> str:
    # A throughput's name comes from the file: escaped like every recorded string.
    table = [("", "BEFORE", "AFTER", "change"), *(tuple(map(terminal, r)) for r in rows(c))]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    lines = [
        f"BEFORE: {terminal(before)}",
        f"AFTER:  {terminal(after)}",
        "",
        *("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in table),
        "",
        terminal(closing(c)),
    ]
    return "\n".join(lines) + "\n"


def diff_markdown(c: Comparison, before: str, after: str) -> str:
    lines = [
        "## oversub diff",
        "",
        f"BEFORE: <code>{_md(before)}</code>, AFTER: <code>{_md(after)}</code>",
        "",
        "| | BEFORE | AFTER | change |",
        "|---|---|---|---|",
        *(f"| {' | '.join(_md(cell) for cell in r)} |" for r in rows(c)),
        "",
        f"**{_md(closing(c))}**",
    ]
    return "\n".join(lines) + "\n"


def _figures(f: Figures) -> dict[str, Any]:
    return {
        "verdict": f.verdict,
        "vcpus": f.vcpus,
        "demand": round(f.demand, 3),
        "run_delay_ratio": None if f.run_delay_ratio is None else round(f.run_delay_ratio, 3),
        "active_threads": f.active_threads,
        "involuntary_ctx_per_cpu_s": None
        if f.involuntary_ctx_per_cpu_s is None
        else round(f.involuntary_ctx_per_cpu_s, 3),
        "cpu_percent": round(f.cpu_percent, 3),
        "seconds": round(f.seconds, 3),
        "metric": f.metric,
        "metrics": dict(f.metrics),
    }


def diff_dict(c: Comparison, before: str, after: str) -> dict[str, Any]:
    """`diff --format json`: `before`, `after` (file and figures: `verdict`, `vcpus`, `demand`,
    `run_delay_ratio`, `active_threads`, `involuntary_ctx_per_cpu_s`, `cpu_percent`,
    `seconds`, `metric`: the gated figure's value, `metrics`: every figure the run
    recorded), `metric` (the gated name, or null), `metrics` (the names shown: the gated
    one, then every other both runs recorded), `worse` and `better` (reasons, in words),
    `noted` (a shown figure that is not gated and is lower in AFTER), `unjudged` (which run
    has no verdict), `exit_status`."""
    return {
        "before": {"file": before, **_figures(c.before)},
        "after": {"file": after, **_figures(c.after)},
        "metric": c.metric,
        "metrics": list(c.metrics),
        "worse": list(c.worse),
        "better": list(c.better),
        "noted": list(c.noted),
        "unjudged": list(c.unjudged),
        "exit_status": 3 if c.unjudged else 1 if c.worse else 0,
    }
