"""Recording a run (`--record`), reading it back, judging it again, comparing two
(`diff`) and rendering it (`report`).

The format enums of `report` and `diff` and their dispatchers live here, with the feature:
each maps every member and ends in `render.unreachable` (mypy fails an unhandled member).
The files themselves are opened by `cli.record`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oversub.core.names import Name
from oversub.render import unreachable

if TYPE_CHECKING:
    from oversub.recording.types import Comparison, Replay


class ReportFormat(Name):
    """`oversub report --format`."""

    TEXT = "text"
    """About the recording, terminal charts (demand against N, delay ratio), the summary."""
    JSON = "json"
    """`recording.charts.report_dict`, indented."""
    MARKDOWN = "markdown"
    """The Markdown summary of `check --markdown` with a mermaid chart GitHub draws."""
    HTML = "html"
    """One self-contained page: charts as inline SVG, findings, fixes, processes."""


class DiffFormat(Name):
    """`oversub diff --format`."""

    TEXT = "text"
    """A table of BEFORE, AFTER and the change, then the closing line."""
    JSON = "json"
    """`diffview.diff_dict`, indented."""
    MARKDOWN = "markdown"
    """The table as Markdown (a job summary or a PR comment)."""


def render_report(
    replay: Replay, fmt: ReportFormat, *, width: int = 80, color: bool = False
) -> str:
    """A replayed recording in `fmt`, as one string ending in a newline (text: its charts
    in ANSI colour when `color`)."""
    if fmt is ReportFormat.TEXT:
        from oversub.recording.charts import report_text

        return report_text(replay, width, color=color)
    elif fmt is ReportFormat.JSON:
        from oversub.recording.charts import report_dict
        from oversub.render.serialize import to_json

        return to_json(report_dict(replay), indent=2) + "\n"
    elif fmt is ReportFormat.MARKDOWN:
        from oversub.recording.mermaid import report_markdown

        return report_markdown(replay)
    elif fmt is ReportFormat.HTML:
        from oversub.recording.html import report_html

        return report_html(replay)
    else:
        unreachable(fmt)


def render_diff(c: Comparison, fmt: DiffFormat, *, before: str, after: str) -> str:
    """Two runs compared, in `fmt`, as one string ending in a newline."""
    if fmt is DiffFormat.TEXT:
        from oversub.recording.diffview import diff_text

        return diff_text(c, before, after)
    elif fmt is DiffFormat.JSON:
        from oversub.recording.diffview import diff_dict
        from oversub.render.serialize import to_json

        return to_json(diff_dict(c, before, after), indent=2) + "\n"
    elif fmt is DiffFormat.MARKDOWN:
        from oversub.recording.diffview import diff_markdown

        return diff_markdown(c, before, after)
    else:
        unreachable(fmt)
