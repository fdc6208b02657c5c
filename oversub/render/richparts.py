"""Rich building blocks shared by the live frame (`live`) and the final report (`report`):
verdict banners, findings with their fixes, process tables whose rows stay one line (or
fall back to one wrapped line per process on a narrow terminal), and the pools table.

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

SEVERITY_STYLE: Mapping[Severity, str] = {
    Severity.CRITICAL: "bold red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
}


class ProcessTable:
    """Processes as a table whose rows stay one line each, whatever the width.

    The Name column (a label: `process_labels`) gives way first, cut with "…" down to
    `NAME_MIN` characters; on a narrower terminal the columns of `optional` are left out,
    in that order; narrower still, one wrapped paragraph per process (`prose`), since a pid
    or a delay cut to "1…" is worse than a longer report. Decided at render time, when the
    width is known, so the frame builders stay pure. The live frame also cuts rows to fit
    the screen's height: `lines` says how many lines a table of k rows takes, and `rendered`
    builds that table.
    """

    NAME_MIN = 12
    """Characters a label keeps before columns are dropped: "spawn worker" whole."""
    GAP = 2
    """Characters between two columns: a space of padding and the box's blank rule."""
    INDENT = 1
    """Characters before the table: its rows never start at column 0, where a command's
    own output lines do (check passes CMD's stdout through)."""

    def __init__(
        self,
        headers: Sequence[str],
        rows: Sequence[tuple[Sequence[str], str | None]],
        total: Sequence[str],
        prose: Sequence[str],
        *,
        optional: Sequence[str] = (),
        hidden: int = 0,
        fold: bool = False,
    ) -> None:
        self.headers = tuple(headers)
        self.rows = [(tuple(cells), style) for cells, style in rows]
        """The process rows: their cells (escaped when rendered) and style."""
        self.total = tuple(total)
        self.prose = list(prose)
        """One paragraph per row and the total, the same order."""
        self.optional = tuple(optional)
        self.hidden = hidden
        """Processes left out before any cut by height ("… K more")."""
        self.fold = fold
        """Fold a label that does not fit onto more lines (a report, which no screen
        height bounds) instead of cutting it with "…" (the live frame)."""

    def _widths(self) -> list[int]:
        from rich.cells import cell_len

        widths = []
        for i, header in enumerate(self.headers):
            cells = [cells[i] for cells, _ in self.rows] + [self.total[i]]
            lines = header.split("\n") + [terminal(c) for c in cells]
            widths.append(max(cell_len(x) for x in lines))
        return widths

    def columns(self, width: int) -> tuple[int, ...] | None:
        """The indexes of the columns shown at `width`, or None for the prose form."""
        widths = self._widths()
        keep = list(range(len(self.headers)))
        name = self.headers.index("Name")
        drop = [self.headers.index(h) for h in self.optional]
        while True:
            numbers = sum(widths[i] for i in keep if i != name)
            needed = self.INDENT + numbers + self.NAME_MIN + self.GAP * (len(keep) - 1)
            if needed <= width:
                return tuple(keep)
            if not drop:
                return None
            keep.remove(drop.pop(0))

    def header_lines(self) -> int:
        return max(h.count("\n") + 1 for h in self.headers)

    def lines(self, width: int, shown: int) -> int | None:
        """Lines of the table with its first `shown` rows at `width` (a "… K more" row
        when rows are left out); None when rows may take more lines (the prose form, folded
        labels)."""
        if self.fold or self.columns(width) is None:
            return None
        more = 1 if shown < len(self.rows) or self.hidden else 0
        return self.header_lines() + 1 + shown + more + 1

    def rendered(self, width: int, shown: int | None = None) -> RenderableType:
        """The table of the first `shown` rows (all by default) at `width`, or the prose."""
        from rich import box
        from rich.console import Group
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        keep = self.columns(width)
        shown = len(self.rows) if shown is None else shown
        hidden = self.hidden + len(self.rows) - shown
        if keep is None:
            prose = [*self.prose[:shown]]
            if hidden:
                prose.append(f"… {hidden} more")
            prose.append(self.prose[-1])
            return Group(*(Text(terminal(row)) for row in prose))
        table = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            header_style="bold",
        )
        for i in keep:
            if self.headers[i] == "Name":
                table.add_column("Name", justify="left", min_width=self.NAME_MIN)
            else:
                table.add_column(self.headers[i], justify="right", no_wrap=True)

        name = self.headers.index("Name")

        def add(cells: Sequence[str], style: str | None) -> None:
            table.add_row(
                *(
                    Text(terminal(cells[i]), overflow="fold")
                    if self.fold and i == name
                    else Text(terminal(cells[i]), no_wrap=True, overflow="ellipsis")
                    for i in keep
                ),
                style=style,
            )

        for cells, style in self.rows[:shown]:
            add(cells, style)
        if hidden:
            blank = [""] * len(self.headers)
            blank[name] = f"… {hidden} more"
            add(blank, "dim")
        add(self.total, "bold")
        return Padding(table, (0, 0, 0, self.INDENT), expand=False)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.rendered(options.max_width)


def text(content: str, style: str = "") -> Text:
    """A rich Text of untrusted `content`, control characters shown escaped."""
    from rich.text import Text

    return Text(terminal(content), style=style)


def add_row(table: Table, cells: Sequence[str], style: str | None = None) -> None:
    """A table row of untrusted cells: control characters shown escaped, and each cell a
    Text, which rich never parses as markup (a process named "[/]" is a name)."""
    from rich.text import Text

    table.add_row(*(Text(terminal(cell)) for cell in cells), style=style)


_SHORT_LEGEND = ("Demand: runnable threads", "Delay: share of it waiting", "Invol/s: preemptions/s")

LEGENDS = (
    "Demand: threads running or waiting for a CPU · Delay: share of their time spent "
    "waiting · Invol/s: preemptions per second · PSI some: share of time a task of the "
    "host waited",
    "Demand: runnable threads · Delay: share of it spent waiting · Invol/s: preemptions/s "
    "· PSI some: time a task waited",
    *(" · ".join(_SHORT_LEGEND[:n]) for n in range(len(_SHORT_LEGEND), 0, -1)),
)
"""What the columns and the host line's words mean, longest first: `Legend` shows the
longest that fits the terminal on one line (watch --help says it in full)."""


class Legend:
    """One dim line that says what Demand, Delay, Invol/s and PSI mean: the longest of
    `LEGENDS` that fits the width (on a narrow terminal, fewer terms; nothing below 24
    columns), never wrapped or cut."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.cells import cell_len
        from rich.text import Text

        chosen = next((x for x in LEGENDS if cell_len(x) <= options.max_width), None)
        if chosen is not None:
            yield Text(chosen, style="dim", no_wrap=True)


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
        style = SEVERITY_STYLE[f.severity]
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
