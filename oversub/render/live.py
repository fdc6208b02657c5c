"""`watch` and `check` for people: the live frame, the final terminal report, and a plain
stderr report for CI logs.

Pure: every function returns a renderable or a string; the caller owns the Console, the
`Live` and the clock (as in rich's examples/top_lite_simulator.py: a pure function builds
the frame, the app refreshes it). rich is imported inside the rich functions only, so
`summary_text` (the non-terminal path) costs no rich import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from oversub.model import Budget, Severity, Verdict
from oversub.plural import count
from oversub.render.phrases import (
    NOT_JUDGED,
    VERDICT_MEANING,
    budget_limit_line,
    env_text,
    finding_line,
    headline,
    host_phrases,
    live_pools_line,
    number,
    percent,
    pools_text,
    rate,
    totals_line,
    unavailable_text,
)
from oversub.results import Assessment, Finding, HostRates, Interval, ProcessRates, Summary, Totals

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Table
    from rich.text import Text

__all__ = [
    "VERDICT_STYLE",
    "summary_renderable",
    "summary_text",
    "watch_renderable",
]

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
    width is known, so the frame builders stay pure.
    """

    def __init__(self, table: Table, needs: int, rows: list[str]) -> None:
        self.table = table
        self.needs = needs
        self.rows = rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        if self.needs <= options.max_width:
            yield self.table
            return
        for row in self.rows:
            yield Text(row)


def _width_of(cells: Sequence[tuple[str, ...]], gap: int) -> int:
    """Columns needed by unwrapped cells (multi-line headers count their longest line) with
    `gap` columns of padding each: what the table needs before rich starts cutting cells."""
    widest = [
        max(len(line) for cell in column for line in cell.split("\n"))
        for column in zip(*cells, strict=True)
    ]
    return sum(widest) + gap * len(widest)


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
    text.append(f"  {meaning}")
    return text


def _findings(findings: tuple[Finding, ...]) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    if not findings:
        return Text("No findings.", style="green")
    lines: list[RenderableType] = []
    for f in findings:
        lines.append(Text(finding_line(f), style=_SEVERITY_STYLE[f.severity]))
        lines.append(Text(f"  fix: {f.fix}"))
    return Group(*lines)


def _interval_table(
    processes: tuple[ProcessRates, ...], totals: Totals, vcpus: int, max_processes: int
) -> _FitOrList:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE, header_style="bold", show_footer=False)
    headers = ("PID", "Name", "Threads", "CPU%", "Demand", "Delay", "Invol/s")
    for name in headers:
        table.add_column(name, justify="left" if name == "Name" else "right", no_wrap=True)
    table.add_column("Pools", overflow="fold")
    ordered = sorted(processes, key=lambda r: r.cpu_percent, reverse=True)
    cells = [headers]
    for r in ordered[:max_processes]:
        cell = (
            str(r.pid),
            r.name,
            f"{r.active_threads}/{r.threads}",
            f"{r.cpu_percent:.0f}",
            f"{r.demand:.2f}",
            percent(r.run_delay_ratio),
            rate(r.involuntary_ctx_per_s),
        )
        cells.append(cell)
        table.add_row(*cell, pools_text(r.pools, r.live_pools), style="dim" if r.exited else None)
    hidden = len(ordered) - max_processes
    if hidden > 0:
        table.add_row("", f"… {hidden} more", style="dim")
    table.add_section()
    total = (
        "total",
        count(totals.processes, "proc"),
        f"{totals.active_threads}/{totals.threads}",
        f"{totals.cpu_percent:.0f}",
        f"{totals.demand:.2f} / {vcpus}",
        percent(totals.run_delay_ratio),
        rate(totals.involuntary_ctx_per_s),
    )
    cells.append(total)
    table.add_row(*total, "", style="bold")
    # Pools fold, so they need only a short word's width ("libgomp") beside the numbers.
    needs = _width_of(cells, gap=2) + len("libgomp") + 2
    rows = [
        f"pid {r.pid} {r.name}: threads {r.active_threads}/{r.threads}, "
        f"CPU {r.cpu_percent:.0f}%, demand {r.demand:.2f}, delay {percent(r.run_delay_ratio)}, "
        f"invol/s {rate(r.involuntary_ctx_per_s)}, pools {pools_text(r.pools, r.live_pools)}"
        for r in ordered[:max_processes]
    ]
    if hidden > 0:
        rows.append(f"… {hidden} more")
    rows.append(
        f"total {count(totals.processes, 'proc')}: "
        f"threads {totals.active_threads}/{totals.threads}, "
        f"CPU {totals.cpu_percent:.0f}%, demand {totals.demand:.2f} / {vcpus}, "
        f"delay {percent(totals.run_delay_ratio)}, "
        f"invol/s {rate(totals.involuntary_ctx_per_s)}"
    )
    return _FitOrList(table, needs, rows)


def _pools_and_vars(rows: list[tuple[int, str, str]]) -> Table | None:
    """Pools and thread variables per process, below the numbers so that both stay readable
    in an 80-column terminal; None when no process has either."""
    from rich import box
    from rich.table import Table

    shown = [row for row in rows if row[1] != pools_text(()) or row[2] != env_text({})]
    if not shown:
        return None
    table = Table(box=box.SIMPLE, header_style="bold")
    table.add_column("PID", justify="right", no_wrap=True)
    table.add_column("Pools", overflow="fold")
    table.add_column("Thread vars", overflow="fold")
    for pid, pools, env in shown:
        table.add_row(str(pid), pools, env)
    return table


def watch_renderable(
    interval: Interval,
    assessment: Assessment,
    budget: Budget,
    *,
    elapsed: float,
    samples: int,
    max_processes: int = 30,
) -> RenderableType:
    """One live frame: header (pid, time, N and its limit, host context), verdict banner,
    per-process table sorted by CPU (at most `max_processes` rows) with a totals row, then
    the findings with their fixes."""
    from rich.console import Group
    from rich.text import Text

    header = Text(
        f"oversub watch · pid {interval.root_pid} · {elapsed:.1f} s · {count(samples, 'sample')} · "
        f"last interval {interval.seconds:.2f} s",
        style="bold",
    )
    parts: list[RenderableType] = [
        header,
        Text(budget_limit_line(budget)),
        Text(_host_line(interval.host), style="dim"),
    ]
    if interval.unavailable:
        parts.append(Text(f"unavailable: {unavailable_text(interval.unavailable)}", style="dim"))
    parts += [
        _banner(assessment.verdict, VERDICT_MEANING[assessment.verdict]),
        _interval_table(interval.processes, interval.totals, interval.vcpus, max_processes),
    ]
    ordered = sorted(interval.processes, key=lambda r: r.cpu_percent, reverse=True)
    extra = _pools_and_vars(
        [
            (r.pid, pools_text(r.pools, r.live_pools), env_text(r.thread_env))
            for r in ordered[:max_processes]
        ]
    )
    if extra is not None:
        parts.append(extra)
    parts.append(_findings(assessment.findings))
    return Group(*parts)


def _summary_table(s: Summary) -> _FitOrList:
    from rich import box
    from rich.table import Table

    # One space between columns and two-line headers keep it inside 80 columns.
    table = Table(box=box.SIMPLE, header_style="bold", padding=(0, 1, 0, 0), pad_edge=False)
    headers = (
        "PID",
        "Name",
        "Threads\npeak",
        "CPU%\nmean/peak",
        "Demand\nmean/peak",
        "Delay\nmean/peak",
        "Invol/s\nmean/peak",
    )
    for name in headers:
        table.add_column(name, justify="left" if name == "Name" else "right", no_wrap=True)
    ordered = sorted(s.processes, key=lambda p: p.cpu_percent, reverse=True)
    cells = [headers]
    for p in ordered:
        cells.append(
            (
                str(p.pid),
                p.name + (" (exited)" if p.exited else ""),
                f"{p.active_threads_peak}/{p.threads}",
                f"{p.cpu_percent:.0f}/{p.cpu_percent_peak:.0f}",
                f"{p.demand:.2f}/{p.demand_peak:.2f}",
                f"{percent(p.run_delay_ratio)}/{percent(p.run_delay_ratio_peak)}",
                f"{rate(p.involuntary_ctx_per_s)}/{rate(p.involuntary_ctx_per_s_peak)}",
            )
        )
        table.add_row(*cells[-1])
    table.add_section()
    t, peak = s.totals, s.totals_peak
    cells.append(
        (
            "total",
            count(t.processes, "proc"),
            f"{peak.active_threads}/{peak.threads}",
            f"{t.cpu_percent:.0f}/{peak.cpu_percent:.0f}",
            f"{t.demand:.2f}/{peak.demand:.2f}",
            f"{percent(t.run_delay_ratio)}/{percent(peak.run_delay_ratio)}",
            f"{rate(t.involuntary_ctx_per_s)}/{rate(peak.involuntary_ctx_per_s)}",
        )
    )
    table.add_row(*cells[-1], style="bold")
    needs = _width_of(cells, gap=1)
    rows = [
        f"pid {p.pid} {p.name}{' (exited)' if p.exited else ''}: peak threads "
        f"{p.active_threads_peak}/{p.threads}, mean/peak CPU "
        f"{p.cpu_percent:.0f}/{p.cpu_percent_peak:.0f}%, "
        f"demand {p.demand:.2f}/{p.demand_peak:.2f}, "
        f"delay {percent(p.run_delay_ratio)}/{percent(p.run_delay_ratio_peak)}"
        for p in ordered
    ]
    rows.append(
        f"total {count(t.processes, 'proc')}: peak threads {peak.active_threads}/{peak.threads}, "
        f"mean/peak CPU {t.cpu_percent:.0f}/{peak.cpu_percent:.0f}%, "
        f"demand {t.demand:.2f}/{peak.demand:.2f}, "
        f"delay {percent(t.run_delay_ratio)}/{percent(peak.run_delay_ratio)}"
    )
    return _FitOrList(table, needs, rows)


def _run_line(s: Summary, sep: str = " · ") -> str:
    if s.preflight:
        return "static preflight, nothing sampled"
    exited = f"{sep}target exited" if s.target_exited else ""
    return f"pid {s.root_pid}{sep}{s.duration_s:.1f} s{sep}{count(s.samples, 'sample')}{exited}"


def summary_renderable(s: Summary) -> RenderableType:
    """The final terminal report: run line, N, verdict banner, findings with fixes, per-process
    mean/peak table with totals, host context, and dim notes."""
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = [
        Text(f"oversub summary · {_run_line(s)}", style="bold"),
        Text(budget_limit_line(s.budget)),
        _banner(s.verdict, headline(s)[1]),
        _findings(s.findings),
    ]
    if s.samples:  # a preflight or an unmeasured run has no table, totals or host context
        ordered = sorted(s.processes, key=lambda p: p.cpu_percent, reverse=True)
        extra = _pools_and_vars(
            [(p.pid, pools_text(p.pools, p.live_pools), env_text(p.thread_env)) for p in ordered]
        )
        parts += [
            _summary_table(s),
            *([extra] if extra is not None else []),
            Text(
                f"totals: {totals_line(s.totals, s.budget.vcpus)}; "
                f"peak demand {number(s.totals_peak.demand)}"
            ),
            Text(_host_line(s.host), style="dim"),
        ]
        live = live_pools_line(s.processes, s.budget.vcpus)
        if live is not None:
            parts.append(Text(f"pool sizes read live: {live}", style="dim"))
    if s.unavailable:
        parts.append(Text(f"unavailable: {unavailable_text(s.unavailable)}", style="dim"))
    for note in s.notes:
        parts.append(Text(f"note: {note}", style="dim"))
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
            f"totals: {totals_line(s.totals, s.budget.vcpus)}; "
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
    return "\n".join(lines)
