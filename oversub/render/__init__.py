"""Output formats: pure functions from model objects to strings or rich renderables.

Nothing in this package does I/O: the CLI decides where output goes (data to stdout,
diagnostics to stderr) and builds its own `Console` per invocation. This module and
`serialize` never import rich, so the JSON paths start fast; the text renderers
(`budget_text`, `plan_text`, `live`) are imported only when a text format is chosen.

The format enums below are what `--format` accepts. Each `render_*` dispatcher maps every
member explicitly and ends in `unreachable`, so adding a member without a renderer fails
mypy (the value narrows to `NoReturn` only when every member is handled) and the test that
loops over every member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from oversub.core.names import Name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import RenderableType

    from oversub.core.checkups import DoctorReport
    from oversub.core.errors import ExitStatus
    from oversub.core.model import Budget, Plan
    from oversub.core.nodes import JobReport
    from oversub.core.origin import NodeIdentity
    from oversub.core.results import Assessment, Interval, Summary
    from oversub.core.thresholds import Thresholds
    from oversub.render.serialize import ProcessTexts


class CpusFormat(Name):
    """`oversub cpus --format`."""

    TEXT = "text"
    """A rich table of every limit and the one that binds."""
    JSON = "json"
    """`plan_formats.budget_dict`, indented."""


class RecommendFormat(Name):
    """`oversub recommend --format`."""

    TEXT = "text"
    """A rich plan: numbers, export lines, code lines, warnings, binding."""
    JSON = "json"
    """`plan_formats.plan_dict`, indented."""
    ENV = "env"
    """Only `export NAME=VALUE` lines, for `eval "$(oversub recommend --format env)"`."""
    PREFIX = "prefix"
    """`NAME=VALUE ...` on one line, for one command: `env $(oversub recommend --format
    prefix) python job.py` (the shell keeps its own settings)."""


class WatchFormat(Name):
    """`oversub watch/check --format`."""

    LIVE = "live"
    """A live rich view per interval, then a rich summary."""
    NDJSON = "ndjson"
    """One JSON line per interval (`"type": "interval"` + `interval_dict`), then one
    summary line (`"type": "summary"` + `summary_dict`)."""
    JSON = "json"
    """Nothing per interval; the summary object, indented, at the end."""


class MergeFormat(Name):
    """`oversub merge --format`."""

    TEXT = "text"
    """Plain text: the node table, findings by rule, notes, the verdict line."""
    JSON = "json"
    """`mergeview.merge_dict`, indented."""
    MARKDOWN = "markdown"
    """The same as text, as Markdown tables (a CI job summary)."""
    JUNIT = "junit"
    """JUnit XML, one test case per node."""


class DoctorFormat(Name):
    """`oversub doctor --format`."""

    TEXT = "text"
    """The table, the budgets compared, what ignores a quota and what oversubscribes."""
    JSON = "json"
    """`doctorview.doctor_dict`, indented (every key in docs/cli.md)."""


def unreachable(value: NoReturn) -> NoReturn:
    """Close an exhaustive if/elif chain (typing_extensions.assert_never is not a dependency)."""
    raise AssertionError(f"unhandled format: {value!r}")


def render_cpus(
    budget: Budget, fmt: CpusFormat, *, colour: bool = False, width: int | None = None
) -> str:
    """The budget in `fmt`, a string ending in a newline: plain text for TEXT (`colour`: SGR
    codes; `width`: the terminal's columns, None off a terminal), JSON for JSON."""
    if fmt is CpusFormat.TEXT:
        from oversub.render.budget_text import budget_text

        return budget_text(budget, colour=colour, width=width)
    elif fmt is CpusFormat.JSON:
        from oversub.render.plan_formats import budget_dict
        from oversub.render.serialize import to_json

        return to_json(budget_dict(budget), indent=2) + "\n"
    else:
        unreachable(fmt)


def render_recommend(
    plan: Plan,
    fmt: RecommendFormat,
    *,
    command: str | None = None,
    colour: bool = False,
    width: int | None = None,
) -> str:
    """The plan in `fmt`, a string ending in a newline (empty for a prefix without
    variables): plain text for TEXT (`colour`, `width` as for `render_cpus`), JSON, exports
    or a prefix otherwise. `command`: the `oversub recommend ...` that made it, which the
    text shows with `--format prefix` for one command."""
    if fmt is RecommendFormat.TEXT:
        from oversub.render.plan_text import plan_text

        return plan_text(plan, command=command, colour=colour, width=width)
    elif fmt is RecommendFormat.JSON:
        from oversub.render.plan_formats import plan_dict
        from oversub.render.serialize import to_json

        return to_json(plan_dict(plan), indent=2) + "\n"
    elif fmt is RecommendFormat.ENV:
        from oversub.render.plan_formats import plan_env

        return plan_env(plan)
    elif fmt is RecommendFormat.PREFIX:
        from oversub.render.plan_formats import plan_prefix

        return plan_prefix(plan)
    else:
        unreachable(fmt)


def render_watch_interval(
    interval: Interval,
    assessment: Assessment,
    budget: Budget,
    fmt: WatchFormat,
    *,
    elapsed: float,
    samples: int,
    thresholds: Thresholds | None = None,
    timestamp: str | None = None,
    history: Sequence[tuple[float, float, int]] = (),
    texts: ProcessTexts | None = None,
    duration: float | None = None,
) -> RenderableType | None:
    """One interval in `fmt`: the live frame (LIVE), one JSON line with newline (NDJSON),
    or None (JSON prints only the summary). `timestamp` (wall clock, UTC, ISO 8601) goes
    into the NDJSON record as "timestamp"; the caller reads the clock. `history`: the live
    frame's sparkline of the last minute ((time, demand, N) per interval). `texts`: the
    NDJSON stream's processes already encoded (`serialize.ProcessTexts`). `duration`: the
    run's --duration, which the live frame counts down."""
    if fmt is WatchFormat.LIVE:
        from oversub.render.live import watch_renderable

        return watch_renderable(
            interval,
            assessment,
            budget,
            elapsed=elapsed,
            samples=samples,
            thresholds=thresholds,
            history=history,
            duration=duration,
        )
    elif fmt is WatchFormat.NDJSON:
        from oversub.render.serialize import interval_line

        return interval_line(interval, assessment, timestamp, texts) + "\n"
    elif fmt is WatchFormat.JSON:
        return None
    else:
        unreachable(fmt)


def render_watch_summary(
    summary: Summary,
    fmt: WatchFormat,
    *,
    timestamp: str | None = None,
    identity: NodeIdentity | None = None,
) -> RenderableType:
    """The run's summary in `fmt`: a rich report (LIVE), one JSON line (NDJSON, with
    "timestamp" as for intervals), or indented JSON (JSON); strings end in a newline. The
    JSON formats end with `serialize.identity_dict(identity)` when it is given."""
    if fmt is WatchFormat.LIVE:
        from oversub.render.finalreport import summary_renderable

        return summary_renderable(summary)
    elif fmt is WatchFormat.NDJSON:
        from oversub.render.serialize import identity_dict, summary_dict, to_json

        record = {"type": "summary", "timestamp": timestamp, **summary_dict(summary)}
        if identity is not None:
            record.update(identity_dict(identity))
        return to_json(record, indent=None) + "\n"
    elif fmt is WatchFormat.JSON:
        from oversub.render.serialize import identity_dict, summary_dict, to_json

        doc = summary_dict(summary)
        if identity is not None:
            doc.update(identity_dict(identity))
        return to_json(doc, indent=2) + "\n"
    else:
        unreachable(fmt)


def render_merge(job: JobReport, status: ExitStatus, fmt: MergeFormat) -> str:
    """The merged report of a multi-node job in `fmt`, a string ending in a newline."""
    from oversub.render import mergeview

    if fmt is MergeFormat.TEXT:
        return mergeview.merge_text(job, status)
    elif fmt is MergeFormat.JSON:
        from oversub.render.serialize import to_json

        return to_json(mergeview.merge_dict(job, status), indent=2) + "\n"
    elif fmt is MergeFormat.MARKDOWN:
        return mergeview.merge_markdown(job, status)
    elif fmt is MergeFormat.JUNIT:
        return mergeview.merge_junit(job, status)
    else:
        unreachable(fmt)


def render_doctor(report: DoctorReport, fmt: DoctorFormat) -> str:
    """`oversub doctor`'s report in `fmt`, as one string ending in a newline."""
    if fmt is DoctorFormat.TEXT:
        from oversub.render.doctorview import doctor_text

        return doctor_text(report)
    elif fmt is DoctorFormat.JSON:
        from oversub.render.doctorview import doctor_dict
        from oversub.render.serialize import to_json

        return to_json(doctor_dict(report), indent=2) + "\n"
    else:
        unreachable(fmt)
