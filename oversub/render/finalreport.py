"""`watch` and `check` for people: the final report of a run, as a rich renderable for a
terminal and as plain text for stderr in CI.

Pure: returns a renderable or a string. `summary_text` (the non-terminal path) costs no
rich import. Every line goes through `escape.terminal` (see `richparts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from oversub.core.plural import count
from oversub.core.results import Summary
from oversub.render import richparts
from oversub.render.episodeview import episode_lines
from oversub.render.escape import terminal
from oversub.render.phrases import (
    budget_limit_line,
    delay_text,
    finding_line,
    headline,
    host_phrases,
    live_pools_line,
    number,
    rate,
    target_name,
    totals_line,
    unavailable_text,
)

if TYPE_CHECKING:
    from rich.console import RenderableType


SUMMARY_HEADERS = (
    "PID",
    "Name",
    "Threads peak\nactive/total",
    "CPU%\nmean/peak",
    "Demand\nmean/peak",
    "Delay\nmean/peak",
    "Invol/s\nmean/peak",
)
SUMMARY_OPTIONAL = ("Invol/s\nmean/peak", "Threads peak\nactive/total")
"""Left out, in this order, when the terminal is too narrow for every column."""


def _summary_table(summary: Summary) -> richparts.ProcessTable:
    th = summary.thresholds
    ordered = sorted(summary.processes, key=lambda p: p.cpu_percent, reverse=True)
    labels = richparts.process_labels(summary.processes)

    def delays(ratio: float | None, demand: float, peak: float | None, top: float) -> str:
        # The peak ratio and the peak demand may come from different intervals: the peak
        # demand bounds the demand behind the peak ratio, so "low" stays true.
        return f"{delay_text(ratio, demand, th)}/{delay_text(peak, top, th)}"

    rows: list[tuple[Sequence[str], str | None]] = []
    prose = []
    for p in ordered:
        label = labels[p.pid] + (" (exited)" if p.exited else "")
        delay = delays(p.run_delay_ratio, p.demand, p.run_delay_ratio_peak, p.demand_peak)
        cells = (
            str(p.pid),
            label,
            f"{p.active_threads_peak}/{p.threads}",
            f"{p.cpu_percent:.0f}/{p.cpu_percent_peak:.0f}",
            f"{p.demand:.2f}/{p.demand_peak:.2f}",
            delay,
            f"{rate(p.involuntary_ctx_per_s)}/{rate(p.involuntary_ctx_per_s_peak)}",
        )
        rows.append((cells, None))
        prose.append(
            f"pid {p.pid} {label}: peak threads "
            f"{p.active_threads_peak}/{p.threads} active/total, mean/peak CPU "
            f"{p.cpu_percent:.0f}/{p.cpu_percent_peak:.0f}%, "
            f"demand {p.demand:.2f}/{p.demand_peak:.2f}, delay {delay}"
        )
    t, peak = summary.totals, summary.totals_peak
    total_delay = delays(t.run_delay_ratio, t.demand, peak.run_delay_ratio, peak.demand)
    total = (
        "total",
        count(t.processes, "proc"),
        f"{peak.active_threads}/{peak.threads}",
        f"{t.cpu_percent:.0f}/{peak.cpu_percent:.0f}",
        f"{t.demand:.2f}/{peak.demand:.2f}",
        total_delay,
        f"{rate(t.involuntary_ctx_per_s)}/{rate(peak.involuntary_ctx_per_s)}",
    )
    prose.append(
        f"total {count(t.processes, 'proc')}: peak threads {peak.active_threads}/{peak.threads} "
        f"active/total, mean/peak CPU {t.cpu_percent:.0f}/{peak.cpu_percent:.0f}%, "
        f"demand {t.demand:.2f}/{peak.demand:.2f}, delay {total_delay}"
    )
    return richparts.ProcessTable(
        SUMMARY_HEADERS, rows, total, prose, optional=SUMMARY_OPTIONAL, fold=True
    )


def _run_line(summary: Summary, sep: str = " · ") -> str:
    if summary.preflight:
        return "static preflight, nothing sampled"
    exited = f"{sep}target exited" if summary.target_exited else ""
    samples = count(summary.samples, "sample")
    name = target_name(summary.root_pid, summary.budget)
    return f"{name}{sep}{summary.duration_s:.1f} s{sep}{samples}{exited}"


def _episode_line(line: str) -> RenderableType:
    """A line of `episode_lines` whose continuation lines start under its text, after
    "episodes: ", "- " (a cause's first line), "  busy: " and the like."""
    head, sep, rest = line.partition(": ")
    if line.startswith("- "):
        return richparts.hanging("- ", line[2:])
    if sep and " " not in head.strip():  # "episodes: ", "  busy: ", "  fix: "
        return richparts.hanging(head + sep, rest)
    return richparts.hanging("  ", line[2:]) if line.startswith("  ") else richparts.text(line)


def summary_renderable(summary: Summary) -> RenderableType:
    """The final terminal report: run line, N, verdict banner, findings with fixes, the
    episodes (`episodeview.episode_lines`), per-process mean/peak table with totals, host
    context, and dim notes."""
    from rich.console import Group

    parts: list[RenderableType] = [
        richparts.text(f"oversub summary · {_run_line(summary)}", "bold"),
        richparts.text(budget_limit_line(summary.budget)),
        richparts.banner(summary.verdict, headline(summary)[1]),
        richparts.findings_renderable(summary.findings),
        *(_episode_line(line) for line in episode_lines(summary)),
    ]
    if summary.samples:  # a preflight or an unmeasured run has no table, totals or host context
        ordered = sorted(summary.processes, key=lambda p: p.cpu_percent, reverse=True)
        extra = richparts.pools_and_vars(ordered)
        parts += [
            _summary_table(summary),
            richparts.Legend(),
            *([extra] if extra is not None else []),
            richparts.text(
                f"totals: {totals_line(summary.totals, summary.budget.vcpus, summary.thresholds)}; "
                f"peak demand {number(summary.totals_peak.demand)}"
            ),
            richparts.text(richparts.host_line(summary.host), "dim"),
        ]
        live = live_pools_line(summary.processes, summary.budget.vcpus)
        if live is not None:
            parts.append(richparts.text(f"pool sizes read live: {live}", "dim"))
    if summary.unavailable:
        parts.append(richparts.text(f"unavailable: {unavailable_text(summary.unavailable)}", "dim"))
    for note in summary.notes:
        parts.append(richparts.text(f"note: {note}", "dim"))
    return Group(*parts)


def summary_text(summary: Summary) -> str:
    """A short plain report for stderr in CI (no colour, no rich, ASCII punctuation), without
    a trailing newline:

        oversub: oversubscribed (the tree keeps ...), pid 1234, 10.0 s, 20 samples
        N = 2 usable vCPUs (limited by affinity: 2 CPUs)
        [critical] oversubscribed-pools: message
          fix: ...
        episodes: 3 oversubscribed, 12.0 s (26% of the time measured): ... (when it had some)
        - oversubscribed at 24.0-27.0 s (3.0 s, the worst of 3): peak demand 4.07 ...
        totals: 3 processes, 7 threads (4 active), CPU 200%, demand 4.00 ...; peak demand 4.20
    """
    word, meaning = headline(summary)
    lines = [
        f"oversub: {word} ({meaning}), {_run_line(summary, ', ')}",
        budget_limit_line(summary.budget),
    ]
    for f in summary.findings:
        lines.append(finding_line(f))
        lines.append(f"  fix: {f.fix}")
    lines.extend(episode_lines(summary))
    if summary.samples:
        lines.append(
            f"totals: {totals_line(summary.totals, summary.budget.vcpus, summary.thresholds)}; "
            f"peak demand {number(summary.totals_peak.demand)}"
        )
        live = live_pools_line(summary.processes, summary.budget.vcpus)
        if live is not None:
            lines.append(f"pool sizes read live: {live}")
        host = host_phrases(summary.host)
        if host:
            lines.append("host: " + ", ".join(host))
    if summary.unavailable:
        lines.append(f"unavailable here: {unavailable_text(summary.unavailable)}")
    lines.extend(f"note: {note}" for note in summary.notes)
    # One line each whatever they hold: a newline in a thread variable must not forge a
    # line of the CI log (`::error::…`, `oversub check: pass`).
    return "\n".join(terminal(line) for line in lines)
