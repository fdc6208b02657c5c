"""Rich building blocks shared by the live frame (`live`) and the final report (`report`):
verdict banners, findings with their fixes, process tables that fall back to one wrapped
line per process on a narrow terminal, and the pools table.

Names, command lines, thread variables, messages and notes come from the watched processes
and the user: every text built here goes through `escape.terminal` (`text`, `add_row`,
`hanging`), so an escape sequence or a newline in them is shown, never obeyed, and table
cells are Text, which rich never parses as markup. rich is imported inside the functions:
importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from oversub.core.names import Severity, Verdict
from oversub.core.results import Finding, HostRates, OwnerCount, ProcessRates, ProcessSummary
from oversub.core.runtimes import describe
from oversub.render.escape import terminal
from oversub.render.phrases import (
    NOT_JUDGED,
    host_phrases,
    pools_text,
    process_label,
    sizing_vars_text,
)

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Table
    from rich.text import Text

VERDICT_STYLE: Mapping[Verdict, str] = {
    Verdict.OK: "bold black on green",
    Verdict.AT_RISK: "bold black on yellow",
    Verdict.STARVED: "bold white on magenta",
    Verdict.OVERSUBSCRIBED: "bold white on red",
}
"""Banner style per verdict: green ok, yellow at-risk, magenta starved, red oversubscribed."""

_SEVERITY_STYLE: Mapping[Severity, str] = {
    Severity.CRITICAL: "bold red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}


class FitOrList:
    """A table where it fits, else one wrapped paragraph per row (a 40-column terminal).

    rich would squeeze a too-wide table into "1…" cells or drop columns; a pid or a delay
    cut to an ellipsis is worse than a longer report. Decided at render time, when the
    width is known, by measuring the table's natural width (padding and edges included),
    so the frame builders stay pure.
    """

    def __init__(self, table: Table, rows: list[str]) -> None:
        self.table = table
        self.rows = rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.measure import Measurement
        from rich.text import Text

        # The minimum: the Name column may wrap (a long command line folds onto a second
        # line), every number column must stay whole.
        needs = Measurement.get(console, options.update(width=10**6), self.table).minimum
        if needs <= options.max_width:
            yield self.table
            return
        for row in self.rows:
            yield Text(terminal(row))


def text(content: str, style: str = "") -> Text:
    """A rich Text of untrusted `content`, control characters shown escaped."""
    from rich.text import Text

    return Text(terminal(content), style=style)


def add_row(table: Table, cells: Sequence[str], style: str | None = None) -> None:
    """A table row of untrusted cells: control characters shown escaped, and each cell a
    Text, which rich never parses as markup (a process named "[/]" is a name)."""
    from rich.text import Text

    table.add_row(*(Text(terminal(cell)) for cell in cells), style=style)


def add_columns(table: Table, headers: Sequence[str]) -> None:
    """Numbers right-aligned and never wrapped; the Name (a command line) left-aligned and
    folded onto more lines when the terminal is narrow."""
    for name in headers:
        if name == "Name":
            table.add_column(name, justify="left", overflow="fold", min_width=12)
        else:
            table.add_column(name, justify="right", no_wrap=True)


def host_line(h: HostRates) -> str:
    phrases = host_phrases(h)
    return "host: " + (" · ".join(phrases) if phrases else "no context available")


NOT_JUDGED_STYLE = "bold white on grey37"
"""Banner style of a run without a verdict: neither green nor red."""


def banner(verdict: Verdict | None, meaning: str) -> Text:
    from rich.text import Text

    text = Text()
    if verdict is None:
        text.append(f" {NOT_JUDGED.upper()} ", style=NOT_JUDGED_STYLE)
    else:
        text.append(f" {verdict.value.upper()} ", style=VERDICT_STYLE[verdict])
    text.append(terminal(f"  {meaning}"))
    return text


def hanging(prefix: str, text: str, style: str = "") -> RenderableType:
    """`prefix` then `text`, whose continuation lines start under the text, not at column 0
    (a one-row grid: rich's Text has no hanging indent)."""
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=0)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(terminal(prefix), style=style), Text(terminal(text), style=style))
    return grid


def findings_renderable(findings: tuple[Finding, ...]) -> RenderableType:
    """Each finding and its fix, with continuation lines indented on a terminal."""
    from rich.console import Group
    from rich.text import Text

    if not findings:
        return Text("No findings.", style="green")
    lines: list[RenderableType] = []
    for f in findings:
        style = _SEVERITY_STYLE[f.severity]
        lines.append(hanging(f"[{f.severity.value}] ", f"{f.rule}: {f.message}", style))
        lines.append(hanging("  fix: ", f.fix))
    return Group(*lines)


def process_labels(processes: Sequence[ProcessRates] | Sequence[ProcessSummary]) -> dict[int, str]:
    """pid -> what the process is ("spawn worker", "fork of 12", "python train.py"), from
    the command lines of the processes and of their parents."""
    cmdlines = {p.pid: p.cmdline for p in processes}
    return {
        p.pid: process_label(p.name, p.cmdline, cmdlines.get(p.ppid), p.ppid) for p in processes
    }


def _counts(p: ProcessRates | ProcessSummary) -> tuple[OwnerCount, ...] | None:
    return p.owner_counts if isinstance(p, ProcessRates) else p.owners


def pools_and_vars(
    processes: Sequence[ProcessRates] | Sequence[ProcessSummary],
) -> Table | None:
    """Per process that maps a pool or sets a sizing variable: the pools, and the variables
    that size them, set or unset (the fact that decides their size); below the numbers so
    that both stay readable in an 80-column terminal. None when there is nothing to show."""
    from rich import box
    from rich.table import Table

    def owners(p: ProcessRates | ProcessSummary) -> str:
        counts = _counts(p)
        return "?" if counts is None else describe(counts)

    shown = [
        p
        for p in processes
        if p.pools != ()
        or sizing_vars_text(p.pools, p.thread_env) != "-"
        or any(c.owner not in ("python", "unattributed") for c in _counts(p) or ())
    ]
    if not shown:
        return None
    table = Table(box=box.SIMPLE, header_style="bold")
    table.add_column("PID", justify="right", no_wrap=True)
    table.add_column("Pools", overflow="fold")
    table.add_column("Sizing variables", overflow="fold")
    table.add_column("Threads by owner", overflow="fold")
    for p in shown:
        add_row(
            table,
            (
                str(p.pid),
                pools_text(p.pools, p.live_pools),
                sizing_vars_text(p.pools, p.thread_env),
                owners(p),
            ),
        )
    return table
