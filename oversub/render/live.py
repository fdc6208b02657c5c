"""`watch` for people: the live frame of one interval.

Pure: every function returns a renderable; the caller owns the Console, the `Live` and the
clock (as in rich's examples/top_lite_simulator.py: a pure function builds the frame, the
app refreshes it). The final report is `render.report`; the pieces both use, `richparts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from oversub.core.model import Budget
from oversub.core.plural import count
from oversub.core.results import Assessment, Interval, ProcessRates, Totals
from oversub.core.thresholds import Thresholds
from oversub.render.phrases import (
    VERDICT_MEANING,
    budget_limit_line,
    delay_text,
    rate,
    target_name,
    unavailable_text,
)
from oversub.render.richparts import (
    FitOrList,
    add_columns,
    add_row,
    banner,
    findings_renderable,
    host_line,
    pools_and_vars,
    process_labels,
    text,
)

if TYPE_CHECKING:
    from rich.console import RenderableType


def _interval_table(
    processes: tuple[ProcessRates, ...],
    totals: Totals,
    vcpus: int,
    max_processes: int,
    th: Thresholds,
) -> FitOrList:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE, header_style="bold", show_footer=False)
    headers = ("PID", "Name", "Threads\nactive/total", "CPU%", "Demand", "Delay", "Invol/s")
    add_columns(table, headers)
    ordered = sorted(processes, key=lambda r: r.cpu_percent, reverse=True)
    labels = process_labels(processes)
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
        add_row(table, cell, "dim" if r.exited else None)
    hidden = len(ordered) - max_processes
    if hidden > 0:
        add_row(table, ("", f"… {hidden} more"), "dim")
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
    add_row(table, total, "bold")
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
    return FitOrList(table, rows)


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
) -> RenderableType:
    """One live frame: header (pid, time, N and its limit, host context), verdict banner,
    per-process table sorted by CPU (at most `max_processes` rows) with a totals row, the
    pools and their sizing variables, then the findings with their fixes. `thresholds`
    (default: the defaults) decide when a delay ratio is too small to mean anything.
    `history`: (time, demand, N) of the last minute's intervals, drawn as a sparkline under
    the banner (`render.sparkline`)."""
    from rich.console import Group

    th = thresholds if thresholds is not None else Thresholds()
    header = text(
        f"oversub watch · {target_name(interval.root_pid, budget)} · {elapsed:.1f} s · "
        f"{count(samples, 'sample')} · last interval {interval.seconds:.2f} s",
        "bold",
    )
    parts: list[RenderableType] = [
        header,
        text(budget_limit_line(budget)),
        text(host_line(interval.host), "dim"),
    ]
    if interval.unavailable:
        parts.append(text(f"unavailable: {unavailable_text(interval.unavailable)}", "dim"))
    parts += [
        banner(assessment.verdict, VERDICT_MEANING[assessment.verdict]),
    ]
    if history:
        from oversub.render.sparkline import sparkline

        parts.append(sparkline(history, th.margin))
    parts += [
        _interval_table(interval.processes, interval.totals, interval.vcpus, max_processes, th),
    ]
    ordered = sorted(interval.processes, key=lambda r: r.cpu_percent, reverse=True)
    extra = pools_and_vars(ordered[:max_processes])
    if extra is not None:
        parts.append(extra)
    parts.append(findings_renderable(assessment.findings))
    return Group(*parts)
