"""`report --format markdown`: the Markdown summary of `check --markdown`, a mermaid chart of
demand against N that GitHub draws (an `xychart-beta` code block), and a few lines about the
recording. Every recorded string goes through `escape.markdown`; the chart holds numbers
and fixed words only.
"""

from __future__ import annotations

from collections.abc import Sequence

from oversub.recording.types import Replay
from oversub.render.escape import markdown as _md

MAX_POINTS = 60
"""Points per mermaid line: more make GitHub's chart unreadable; longer runs are sampled."""


def _sampled(n: int) -> list[int]:
    """Evenly spaced indices of n points, at most MAX_POINTS, always the last."""
    if n <= MAX_POINTS:
        return list(range(n))
    step = (n - 1) / (MAX_POINTS - 1)
    return sorted({round(i * step) for i in range(MAX_POINTS)})


def _numbers(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def demand_chart(replay: Replay) -> list[str]:
    """A mermaid xychart: demand (first line) and N (second line) per interval."""
    from oversub.recording.charts import series

    s = series(replay)
    if len(s.seconds) < 2:
        return ["(One interval or none: no chart over time.)"]
    keep = _sampled(len(s.seconds))
    demand = [s.demand[i] for i in keep]
    vcpus = [float(s.vcpus[i]) for i in keep]
    top = max(*demand, *vcpus) * 1.1
    digits = 1 if s.seconds[-1] < 100 else 0
    labels = ", ".join(f'"{s.seconds[i]:.{digits}f}"' for i in keep)
    return [
        "Demand (runnable threads, first line) against N (usable vCPUs, second line), "
        "per interval; seconds after the first sample:",
        "",
        "```mermaid",
        "xychart-beta",
        '    title "Demand against N"',
        f'    x-axis "seconds" [{labels}]',
        f'    y-axis "threads" 0 --> {top:.1f}',
        f"    line {_numbers(demand)}",
        f"    line {_numbers(vcpus)}",
        "```",
    ]


def report_markdown(replay: Replay) -> str:
    """The recording as Markdown (for a job summary or a PR comment), ending in a newline."""
    from oversub.core.names import FailOn
    from oversub.core.results import Gate
    from oversub.recording.charts import about_lines
    from oversub.render.markdown import (
        PROCESS_HEADERS,
        episodes_section,
        findings_section,
        markdown_table,
        process_rows,
    )
    from oversub.render.phrases import budget_limit_line, headline, totals_line

    s = replay.summary
    word, meaning = headline(s)
    lines = [
        f"## oversub report: {_md(word.upper())}",
        "",
        f"**Verdict: {_md(word)}**: {_md(meaning)}.",
        "",
        *(f"- {_md(line)}" for line in about_lines(replay)),
        f"- Budget: {_md(budget_limit_line(s.budget))}.",
        "",
        *demand_chart(replay),
        "",
        "### Findings",
        "",
        # A report gates nothing: no finding is marked as failing.
        *findings_section(s.findings, Gate(FailOn.OVERSUBSCRIBED, ())),
        *episodes_section(s),
        "",
        "### Processes",
        "",
    ]
    rows = process_rows(s)
    lines += markdown_table(PROCESS_HEADERS, rows) if rows else ["No process was observed."]
    if s.samples:
        lines += ["", f"Totals (means): {_md(totals_line(s.totals, s.budget.vcpus, s.thresholds))}"]
    lines.extend(f"- Note: {_md(note)}" for note in s.notes)
    return "\n".join(lines) + "\n"
