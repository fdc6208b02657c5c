"""`watch` and `check` for people: the live frame, the final terminal report, and a plain
stderr report for CI logs.

Pure: every function returns a renderable or a string; the caller owns the Console, the
`Live` and the clock (as in rich's examples/top_lite_simulator.py: a pure function builds
the frame, the app refreshes it). rich is imported inside the rich functions only, so
`summary_text` (the non-terminal path) costs no rich import.

Names, command lines, thread variables, messages and notes come from the watched processes
and the user: every text built here goes through `escape.terminal` (`_text`, `_add_row`,
`hanging`, each line of `summary_text`), so an escape sequence or a newline in them is
shown, never obeyed, and table cells are Text, which rich never parses as markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from oversub.model import Budget, Thresholds
from oversub.names import Severity, Verdict
from oversub.plural import count
from oversub.render.escape import terminal
from oversub.render.phrases import (
    NOT_JUDGED,
    VERDICT_MEANING,
    budget_limit_line,
    delay_text,
    finding_line,
    headline,
    host_phrases,
    live_pools_line,
    number,
    pools_text,
    process_label,
    rate,
    sizing_vars_text,
    totals_line,
    unavailable_text,
)
from oversub.results import (
    Assessment,
    Finding,
    HostRates,
    Interval,
    ProcessRates,
    ProcessSummary,
    Summary,
    Totals,
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


class _FitOrList:
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


def _text(content: str, style: str = "") -> Text:
    """A rich Text of untrusted `content`, control characters shown escaped."""
    from rich.text import Text

    return Text(terminal(content), style=style)


def _add_row(table: Table, cells: Sequence[str], style: str | None = None) -> None:
    """A table row of untrusted cells: control characters shown escaped, and each cell a
    Text, which rich never parses as markup (a process named "[/]" is a name)."""
    from rich.text import Text

    table.add_row(*(Text(terminal(cell)) for cell in cells), style=style)


def _add_columns(table: Table, headers: Sequence[str]) -> None:
    """Numbers right-aligned and never wrapped; the Name (a command line) left-aligned and
    folded onto more lines when the terminal is narrow."""
    for name in headers:
        if name == "Name":
            table.add_column(name, justify="left", overflow="fold", min_width=12)
        else:
            table.add_column(name, justify="right", no_wrap=True)


def _host_line(h: HostRates) -> str:
    phrases = host_phrases(h)
    return "host: " + (" · ".join(phrases) if phrases else "no context available")


NOT_JUDGED_STYLE = "bold white on grey37"
"""Banner style of a run without a verdict: neither green nor red."""


def _banner(verdict: Verdict | None, meaning: str) -> Text:
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


def _findings(findings: tuple[Finding, ...]) -> RenderableType:
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


def _labels(processes: Sequence[ProcessRates] | Sequence[ProcessSummary]) -> dict[int, str]:
    """pid -> what the process is ("spawn worker", "fork of 12", "python train.py"), from
    the command lines of the processes and of their parents."""
    cmdlines = {p.pid: p.cmdline for p in processes}
    return {
        p.pid: process_label(p.name, p.cmdline, cmdlines.get(p.ppid), p.ppid) for p in processes
    }


def _interval_table(
    processes: tuple[ProcessRates, ...],
    totals: Totals,
    vcpus: int,
    max_processes: int,
    th: Thresholds,
) -> _FitOrList:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE, header_style="bold", show_footer=False)
    headers = ("PID", "Name", "Threads\nactive/total", "CPU%", "Demand", "Delay", "Invol/s")
    _add_columns(table, headers)
    ordered = sorted(processes, key=lambda r: r.cpu_percent, reverse=True)
    labels = _labels(processes)
    for r in ordered[:max_processes]:
        cell = (
            str(r.pid),
            labels[r.pid] + (" (exited)" if r.exited else ""),
            f"{r.active_threads}/{r.threads}",
            f"{r.cpu_percent:.0f}",
            f"{r.demand:.2f}",
            delay_text(r.run_delay_ratio, r.demand, th),
            rate(r.involuntary_ctx_per_s),
        )
        _add_row(table, cell, "dim" if r.exited else None)
    hidden = len(ordered) - max_processes
    if hidden > 0:
        _add_row(table, ("", f"… {hidden} more"), "dim")
    table.add_section()
    total = (
        "total",
        count(totals.processes, "proc"),
        f"{totals.active_threads}/{totals.threads}",
        f"{totals.cpu_percent:.0f}",
        f"{totals.demand:.2f} / {vcpus}",
        delay_text(totals.run_delay_ratio, totals.demand, th),
        rate(totals.involuntary_ctx_per_s),
    )
    _add_row(table, total, "bold")
    rows = [
        f"pid {r.pid} {labels[r.pid]}{' (exited)' if r.exited else ''}: threads "
        f"{r.active_threads}/{r.threads} active/total, CPU {r.cpu_percent:.0f}%, "
        f"demand {r.demand:.2f}, delay {delay_text(r.run_delay_ratio, r.demand, th)}, "
        f"invol/s {rate(r.involuntary_ctx_per_s)}"
        for r in ordered[:max_processes]
    ]
    if hidden > 0:
        rows.append(f"… {hidden} more")
    rows.append(
        f"total {count(totals.processes, 'proc')}: "
        f"threads {totals.active_threads}/{totals.threads} active/total, "
        f"CPU {totals.cpu_percent:.0f}%, demand {totals.demand:.2f} / {vcpus}, "
        f"delay {delay_text(totals.run_delay_ratio, totals.demand, th)}, "
        f"invol/s {rate(totals.involuntary_ctx_per_s)}"
    )
    return _FitOrList(table, rows)


def _pools_and_vars(
    processes: Sequence[ProcessRates] | Sequence[ProcessSummary],
) -> Table | None:
    """Per process that maps a pool or sets a sizing variable: the pools, and the variables
    that size them, set or unset (the fact that decides their size); below the numbers so
    that both stay readable in an 80-column terminal. None when there is nothing to show."""
    from rich import box
    from rich.table import Table

    shown = [
        p for p in processes if p.pools != () or sizing_vars_text(p.pools, p.thread_env) != "-"
    ]
    if not shown:
        return None
    table = Table(box=box.SIMPLE, header_style="bold")
    table.add_column("PID", justify="right", no_wrap=True)
    table.add_column("Pools", overflow="fold")
    table.add_column("Sizing variables", overflow="fold")
    for p in shown:
        _add_row(
            table,
            (
                str(p.pid),
                pools_text(p.pools, p.live_pools),
                sizing_vars_text(p.pools, p.thread_env),
            ),
        )
    return table


def watch_renderable(
    interval: Interval,
    assessment: Assessment,
    budget: Budget,
    *,
    elapsed: float,
    samples: int,
    max_processes: int = 30,
    thresholds: Thresholds | None = None,
) -> RenderableType:
    """One live frame: header (pid, time, N and its limit, host context), verdict banner,
    per-process table sorted by CPU (at most `max_processes` rows) with a totals row, the
    pools and their sizing variables, then the findings with their fixes. `thresholds`
    (default: the defaults) decide when a delay ratio is too small to mean anything."""
    from rich.console import Group

    th = thresholds if thresholds is not None else Thresholds()
    header = _text(
        f"oversub watch · pid {interval.root_pid} · {elapsed:.1f} s · "
        f"{count(samples, 'sample')} · last interval {interval.seconds:.2f} s",
        "bold",
    )
    parts: list[RenderableType] = [
        header,
        _text(budget_limit_line(budget)),
        _text(_host_line(interval.host), "dim"),
    ]
    if interval.unavailable:
        parts.append(_text(f"unavailable: {unavailable_text(interval.unavailable)}", "dim"))
    parts += [
        _banner(assessment.verdict, VERDICT_MEANING[assessment.verdict]),
        _interval_table(interval.processes, interval.totals, interval.vcpus, max_processes, th),
    ]
    ordered = sorted(interval.processes, key=lambda r: r.cpu_percent, reverse=True)
    extra = _pools_and_vars(ordered[:max_processes])
    if extra is not None:
        parts.append(extra)
    parts.append(_findings(assessment.findings))
    return Group(*parts)


def _summary_table(s: Summary) -> _FitOrList:
    from rich import box
    from rich.table import Table

    th = s.thresholds
    # One space between columns and two-line headers keep it inside 80 columns.
    table = Table(box=box.SIMPLE, header_style="bold", padding=(0, 1, 0, 0), pad_edge=False)
    headers = (
        "PID",
        "Name",
        "Threads peak\nactive/total",
        "CPU%\nmean/peak",
        "Demand\nmean/peak",
        "Delay\nmean/peak",
        "Invol/s\nmean/peak",
    )
    _add_columns(table, headers)
    ordered = sorted(s.processes, key=lambda p: p.cpu_percent, reverse=True)
    labels = _labels(s.processes)

    def delays(ratio: float | None, demand: float, peak: float | None, top: float) -> str:
        # The peak ratio and the peak demand may come from different intervals: the peak
        # demand bounds the demand behind the peak ratio, so "low" stays true.
        return f"{delay_text(ratio, demand, th)}/{delay_text(peak, top, th)}"

    for p in ordered:
        _add_row(
            table,
            (
                str(p.pid),
                labels[p.pid] + (" (exited)" if p.exited else ""),
                f"{p.active_threads_peak}/{p.threads}",
                f"{p.cpu_percent:.0f}/{p.cpu_percent_peak:.0f}",
                f"{p.demand:.2f}/{p.demand_peak:.2f}",
                delays(p.run_delay_ratio, p.demand, p.run_delay_ratio_peak, p.demand_peak),
                f"{rate(p.involuntary_ctx_per_s)}/{rate(p.involuntary_ctx_per_s_peak)}",
            ),
        )
    table.add_section()
    t, peak = s.totals, s.totals_peak
    _add_row(
        table,
        (
            "total",
            count(t.processes, "proc"),
            f"{peak.active_threads}/{peak.threads}",
            f"{t.cpu_percent:.0f}/{peak.cpu_percent:.0f}",
            f"{t.demand:.2f}/{peak.demand:.2f}",
            delays(t.run_delay_ratio, t.demand, peak.run_delay_ratio, peak.demand),
            f"{rate(t.involuntary_ctx_per_s)}/{rate(peak.involuntary_ctx_per_s)}",
        ),
        "bold",
    )
    rows = [
        f"pid {p.pid} {labels[p.pid]}{' (exited)' if p.exited else ''}: peak threads "
        f"{p.active_threads_peak}/{p.threads} active/total, mean/peak CPU "
        f"{p.cpu_percent:.0f}/{p.cpu_percent_peak:.0f}%, "
        f"demand {p.demand:.2f}/{p.demand_peak:.2f}, "
        f"delay {delays(p.run_delay_ratio, p.demand, p.run_delay_ratio_peak, p.demand_peak)}"
        for p in ordered
    ]
    rows.append(
        f"total {count(t.processes, 'proc')}: peak threads {peak.active_threads}/{peak.threads} "
        f"active/total, mean/peak CPU {t.cpu_percent:.0f}/{peak.cpu_percent:.0f}%, "
        f"demand {t.demand:.2f}/{peak.demand:.2f}, "
        f"delay {delays(t.run_delay_ratio, t.demand, peak.run_delay_ratio, peak.demand)}"
    )
    return _FitOrList(table, rows)


def _run_line(s: Summary, sep: str = " · ") -> str:
    if s.preflight:
        return "static preflight, nothing sampled"
    exited = f"{sep}target exited" if s.target_exited else ""
    return f"pid {s.root_pid}{sep}{s.duration_s:.1f} s{sep}{count(s.samples, 'sample')}{exited}"


def summary_renderable(s: Summary) -> RenderableType:
    """The final terminal report: run line, N, verdict banner, findings with fixes, per-process
    mean/peak table with totals, host context, and dim notes."""
    from rich.console import Group

    parts: list[RenderableType] = [
        _text(f"oversub summary · {_run_line(s)}", "bold"),
        _text(budget_limit_line(s.budget)),
        _banner(s.verdict, headline(s)[1]),
        _findings(s.findings),
    ]
    if s.samples:  # a preflight or an unmeasured run has no table, totals or host context
        ordered = sorted(s.processes, key=lambda p: p.cpu_percent, reverse=True)
        extra = _pools_and_vars(ordered)
        parts += [
            _summary_table(s),
            *([extra] if extra is not None else []),
            _text(
                f"totals: {totals_line(s.totals, s.budget.vcpus, s.thresholds)}; "
                f"peak demand {number(s.totals_peak.demand)}"
            ),
            _text(_host_line(s.host), "dim"),
        ]
        live = live_pools_line(s.processes, s.budget.vcpus)
        if live is not None:
            parts.append(_text(f"pool sizes read live: {live}", "dim"))
    if s.unavailable:
        parts.append(_text(f"unavailable: {unavailable_text(s.unavailable)}", "dim"))
    for note in s.notes:
        parts.append(_text(f"note: {note}", "dim"))
    return Group(*parts)


def summary_text(s: Summary) -> str:
    """A short plain report for stderr in CI (no colour, no rich, ASCII punctuation), without
    a trailing newline:

        oversub: oversubscribed (the tree keeps ...), pid 1234, 10.0 s, 20 samples
        N = 2 usable vCPUs (limited by affinity: 2 CPUs)
        [critical] oversubscribed-pools: message
          fix: ...
        totals: 3 processes, 7 threads (4 active), CPU 200%, demand 4.00 ...; peak demand 4.20
    """
    word, meaning = headline(s)
    lines = [
        f"oversub: {word} ({meaning}), {_run_line(s, ', ')}",
        budget_limit_line(s.budget),
    ]
    for f in s.findings:
        lines.append(finding_line(f))
        lines.append(f"  fix: {f.fix}")
    if s.samples:
        lines.append(
            f"totals: {totals_line(s.totals, s.budget.vcpus, s.thresholds)}; "
            f"peak demand {number(s.totals_peak.demand)}"
        )
        live = live_pools_line(s.processes, s.budget.vcpus)
        if live is not None:
            lines.append(f"pool sizes read live: {live}")
        host = host_phrases(s.host)
        if host:
            lines.append("host: " + ", ".join(host))
    if s.unavailable:
        lines.append(f"unavailable here: {unavailable_text(s.unavailable)}")
    lines.extend(f"note: {note}" for note in s.notes)
    # One line each whatever they hold: a newline in a thread variable must not forge a
    # line of the CI log (`::error::…`, `oversub check: pass`).
    return "\n".join(terminal(line) for line in lines)
