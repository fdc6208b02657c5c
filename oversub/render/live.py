"""`watch` for people: the live frame of one interval.

Pure: every function returns a renderable; the caller owns the Console, the `Live` and the
clock (as in rich's examples/top_lite_simulator.py: a pure function builds the frame, the
app refreshes it). The final report is `render.finalreport`; the pieces both use, `richparts`.

On a terminal the frame fits the screen (`LiveFrame`): a frame taller than the terminal is
cut at the bottom by rich's Live, which is where the fix is, so the frame gives up its
least useful lines first (the process table's rows, the pools, the context lines) and keeps
the verdict, every fix and the line that says how to stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from oversub.core.model import Budget
from oversub.core.names import Verdict
from oversub.core.plural import count
from oversub.core.results import Assessment, Finding, Interval, ProcessRates, Totals
from oversub.core.thresholds import Thresholds
from oversub.render.escape import terminal
from oversub.render.phrases import (
    VERDICT_MEANING,
    budget_limit_line,
    delay_text,
    rate,
    starved_clause,
    target_name,
    unavailable_text,
)
from oversub.render.richparts import (
    SEVERITY_STYLE,
    Legend,
    ProcessTable,
    banner,
    hanging,
    host_line,
    pools_and_vars,
    process_labels,
    text,
)

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.segment import Segment

HEADERS = ("PID", "Name", "Threads\nactive/total", "CPU%", "Demand", "Delay", "Invol/s")
OPTIONAL = ("Invol/s", "Threads\nactive/total")
"""Left out, in this order, when the terminal is too narrow for every column."""


def _interval_table(
    processes: tuple[ProcessRates, ...],
    totals: Totals,
    vcpus: int,
    max_processes: int,
    th: Thresholds,
) -> ProcessTable:
    ordered = sorted(processes, key=lambda r: r.cpu_percent, reverse=True)
    labels = process_labels(processes)
    rows: list[tuple[Sequence[str], str | None]] = []
    prose = []
    for r in ordered[:max_processes]:
        label = labels[r.pid] + (" (exited)" if r.exited else "")
        delay = delay_text(r.run_delay_ratio, r.demand, th)
        cells = (
            str(r.pid),
            label,
            f"{r.active_threads}/{r.threads}",
            f"{r.cpu_percent:.0f}",
            f"{r.demand:.2f}",
            delay,
            rate(r.involuntary_ctx_per_s),
        )
        rows.append((cells, "dim" if r.exited else None))
        prose.append(
            f"pid {r.pid} {label}: threads {r.active_threads}/{r.threads} active/total, "
            f"CPU {r.cpu_percent:.0f}%, demand {r.demand:.2f}, delay {delay}, "
            f"invol/s {rate(r.involuntary_ctx_per_s)}"
        )
    total_delay = delay_text(totals.run_delay_ratio, totals.demand, th)
    total = (
        "total",
        count(totals.processes, "proc"),
        f"{totals.active_threads}/{totals.threads}",
        f"{totals.cpu_percent:.0f}",
        f"{totals.demand:.2f} / {vcpus}",
        total_delay,
        rate(totals.involuntary_ctx_per_s),
    )
    prose.append(
        f"total {count(totals.processes, 'proc')}: "
        f"threads {totals.active_threads}/{totals.threads} active/total, "
        f"CPU {totals.cpu_percent:.0f}%, demand {totals.demand:.2f} / {vcpus}, "
        f"delay {total_delay}, invol/s {rate(totals.involuntary_ctx_per_s)}"
    )
    return ProcessTable(
        HEADERS,
        rows,
        total,
        prose,
        optional=OPTIONAL,
        hidden=max(0, len(ordered) - max_processes),
    )


def footer(target: str, *, elapsed: float, duration: float | None) -> str:
    """How the view ends: "Ctrl-C stops and prints the summary · ends in 12 s or when pid
    1234 exits". `target` is what `target_name` says; a cgroup ends when it is removed."""
    gone = f"{target} is removed" if target.startswith("cgroup ") else f"{target} exits"
    ends = f"ends when {gone}"
    if duration is not None:
        ends = f"ends in {max(0.0, duration - elapsed):.0f} s or when {gone}"
    return f"Ctrl-C stops and prints the summary · {ends}"


class _Part(NamedTuple):
    """A line or block of the frame and the levels it is shown at (`LiveFrame`)."""

    renderable: RenderableType
    upto: int
    """Shown at levels 0 to `upto`."""


class LiveFrame:
    """The frame, fitted to the screen when it is drawn on a terminal.

    Off a terminal (a file, a test's buffer) it is printed whole. On one, it takes the
    terminal's height from the render options and shows, at the first level that fits:
      0. everything;
      1. without the pools table, the process table cut to the busiest rows that fit
         (at least `ROWS`; "… K more" for the rest);
      2. also without the sparkline, the host and the unavailable lines;
      3. also each finding's message cut to one line (its fix stays whole), no legend;
      4. also no process row (the total stays);
      5. also without the budget line, and only the first finding ("… K more findings").
    The header, the verdict banner, the table's total, the fixes (all but at level 5) and
    the line that says how to stop are always there. Each block is rendered once per
    frame; the process table's height follows from its row count (its rows are one line
    each), so only the table that is shown is rendered.
    """

    LEVELS = 5
    ROWS = 3
    """Process rows kept at levels 1-3 (fewer only when the tree has fewer)."""

    def __init__(
        self,
        head: Sequence[_Part],
        table: ProcessTable,
        pools: RenderableType | None,
        findings: tuple[Finding, ...],
        tail: Sequence[_Part],
    ) -> None:
        from rich.text import Text

        self.head = head
        self.table = table
        self.pools = pools
        self.tail = tail
        self.findings: list[tuple[RenderableType, RenderableType, RenderableType]] = []
        """Per finding: its message (wrapped), its message on one line, its fix."""
        for f in findings:
            style = SEVERITY_STYLE[f.severity]
            line = f"[{f.severity.value}] {f.rule}: {f.message}"
            self.findings.append(
                (
                    hanging(f"[{f.severity.value}] ", f"{f.rule}: {f.message}", style),
                    Text(terminal(line), style=style, no_wrap=True, overflow="ellipsis"),
                    hanging("  fix: ", f.fix),
                )
            )
        self.none = Text("No findings.", style="green")
        more = len(findings) - 1
        self.more = Text(
            f"… {count(more, 'more finding')}: in the summary when watch ends", style="dim"
        )

    def _around(self, level: int) -> tuple[list[RenderableType], list[RenderableType]]:
        """The blocks above the process table and below it, at `level`."""
        above = [p.renderable for p in self.head if level <= p.upto]
        below: list[RenderableType] = []
        if self.pools is not None and level == 0:
            below.append(self.pools)
        if not self.findings:
            below.append(self.none)
        for i, (message, short, fix) in enumerate(self.findings):
            if level >= 5 and i > 0:
                below.append(self.more)
                break
            below += [short if level >= 3 else message, fix]
        below += [p.renderable for p in self.tail if level <= p.upto]
        return above, below

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        width = options.max_width
        if not console.is_terminal:
            above, below = self._around(0)
            yield from [*above, self.table.rendered(width), *below]
            return
        height = options.height or options.size.height
        rendered: dict[int, tuple[RenderableType, list[list[Segment]]]] = {}

        def lines(r: RenderableType) -> list[list[Segment]]:
            # Keyed by identity, the renderable kept alive with its lines (an id is unique
            # only while its object lives).
            if id(r) not in rendered:
                rendered[id(r)] = (r, console.render_lines(r, options, pad=False))
            return rendered[id(r)][1]

        def table_lines(rows: int) -> int:
            known = self.table.lines(width, rows)
            # The prose form's paragraphs may wrap: those are rendered to be counted.
            return known if known is not None else len(lines(self.table.rendered(width, rows)))

        most = len(self.table.rows)
        level, rows = self.LEVELS, 0
        for candidate in range(self.LEVELS + 1):
            above, below = self._around(candidate)
            room = height - sum(len(lines(b)) for b in (*above, *below))
            least = most if candidate == 0 else min(most, self.ROWS if candidate < 4 else 0)
            fits = next((n for n in range(most, least - 1, -1) if table_lines(n) <= room), None)
            if fits is not None:
                level, rows = candidate, fits
                break
        above, below = self._around(level)
        for block in (*above, self.table.rendered(width, rows), *below):
            for line in lines(block):
                yield from line
                yield Segment.line()


def verdict_clause(assessment: Assessment) -> str:
    """The banner's clause: a starved verdict names what its finding measured took the CPUs,
    as the run's headline does (`phrases.starved_clause`: one wording, one place)."""
    if assessment.verdict is Verdict.STARVED:
        first = next((f for f in assessment.findings if f.verdict is Verdict.STARVED), None)
        if first is not None:
            return starved_clause(first)
    return VERDICT_MEANING[assessment.verdict]


def watch_renderable(
    interval: Interval,
    assessment: Assessment,
    budget: Budget,
    *,
    elapsed: float,
    samples: int,
    max_processes: int = 30,
    thresholds: Thresholds | None = None,
    history: Sequence[tuple[float, float, int]] = (),
    duration: float | None = None,
) -> RenderableType:
    """One live frame: header (pid, time, N and its limit, host context), verdict banner,
    per-process table sorted by CPU (at most `max_processes` rows) with a totals row, the
    pools and their sizing variables, the findings with their fixes, then how to stop
    (`duration`: the run's --duration, to say when it ends) and what the columns mean. On a
    terminal the frame fits its height (`LiveFrame`). `thresholds` (default: the defaults)
    decide when a delay ratio is too small to mean anything. `history`: (time, demand, N)
    of the last minute's intervals, drawn as a sparkline under the banner
    (`render.sparkline`)."""
    th = thresholds if thresholds is not None else Thresholds()
    target = target_name(interval.root_pid, budget)
    header = text(
        f"oversub watch · {target} · {elapsed:.1f} s · "
        f"{count(samples, 'sample')} · last interval {interval.seconds:.2f} s",
        "bold",
    )
    parts = [
        _Part(header, LiveFrame.LEVELS),
        _Part(text(budget_limit_line(budget)), 4),
        _Part(text(host_line(interval.host), "dim"), 1),
    ]
    if interval.unavailable:
        unavailable = f"unavailable: {unavailable_text(interval.unavailable)}"
        parts.append(_Part(text(unavailable, "dim"), 1))
    parts.append(_Part(banner(assessment.verdict, verdict_clause(assessment)), LiveFrame.LEVELS))
    if history:
        from oversub.render.sparkline import sparkline

        parts.append(_Part(sparkline(history, th.margin), 1))
    table = _interval_table(interval.processes, interval.totals, interval.vcpus, max_processes, th)
    ordered = sorted(interval.processes, key=lambda r: r.cpu_percent, reverse=True)
    tail = [
        _Part(text(footer(target, elapsed=elapsed, duration=duration)), LiveFrame.LEVELS),
        _Part(Legend(), 2),
    ]
    return LiveFrame(
        parts, table, pools_and_vars(ordered[:max_processes]), assessment.findings, tail
    )
