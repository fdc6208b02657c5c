"""`watch --all`: a row per cgroup and the node's totals, as a live frame, NDJSON and JSON.

Pure: rounds and summaries in, text or rich renderables out. Cgroup paths are untrusted
(whoever made the cgroup chose them): bounded (`workload.bounded`) and escaped per sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oversub.core.plural import count
from oversub.core.results import Summary
from oversub.core.targets import Round, TargetResult
from oversub.core.thresholds import Thresholds
from oversub.core.workload import bounded, describe
from oversub.render.phrases import UNKNOWN, delay_text
from oversub.render.serialize import (
    budget_dict,
    finding_dict,
    host_dict,
    json_number,
    summary_dict,
    totals_dict,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

NO_FINDING = UNKNOWN
"""The worst-finding cell of a target where no rule fired."""
MAX_ROWS = 40
"""Rows of the live table; the rest are counted in a line below it."""
MAX_FIXES = 5
"""Targets whose worst finding and fix the live frame spells out."""


def _worst(t: TargetResult) -> str:
    return t.assessment.findings[0].rule.value if t.assessment.findings else NO_FINDING


def target_record(t: TargetResult) -> dict[str, Any]:
    """One target of an NDJSON round: `cgroup` (path in the hierarchy), `workload` (what the
    path says it is: "slurm job 12", "pod UID", "container ID", "unit NAME", or null), `budget`
    (`budget_dict`), `verdict` (a state: "oversubscribed", "starved", "at-risk", "ok" or
    "not-judged"), `findings` (`finding_dict` list, worst first), `totals`, `host` and
    `unavailable` as in an interval record."""
    iv = t.interval
    return {
        "cgroup": t.cgroup,
        "workload": describe(t.cgroup),
        "budget": budget_dict(t.budget),
        "verdict": t.state,
        "findings": [finding_dict(f) for f in t.assessment.findings],
        "totals": totals_dict(iv.totals),
        "host": host_dict(iv.host),
        "unavailable": [s.value for s in iv.unavailable],
    }


def round_record(r: Round, timestamp: str | None) -> dict[str, Any]:
    """One line of `watch --all --format ndjson`: `type` "node-interval", `timestamp`,
    `seconds` (the interval), `node` (`vcpus` and `totals` of every process on the node; it
    has no verdict: its processes are held to their cgroups' budgets), `targets` (the cgroups
    that held load, worst first: `target_record`)."""
    node = r.node
    return {
        "type": "node-interval",
        "timestamp": timestamp,
        "seconds": json_number(node.interval.seconds) if node else None,
        "node": None
        if node is None
        else {"vcpus": node.budget.vcpus, "totals": totals_dict(node.interval.totals)},
        "targets": [target_record(t) for t in r.targets],
    }


def node_summary_record(
    summaries: Mapping[str, Summary], node: Summary | None, timestamp: str | None
) -> dict[str, Any]:
    """The end of `watch --all`: `type` "node-summary", `timestamp`, `node` (`vcpus`,
    `duration_s`, `samples`, `totals` over the run), `targets` (per cgroup that held load at
    least once: `cgroup`, `workload` as in `target_record`, and its whole-run `summary_dict`,
    worst verdict first)."""
    ordered = sorted(summaries.items(), key=lambda kv: _summary_rank(kv[0], kv[1]))
    return {
        "type": "node-summary",
        "timestamp": timestamp,
        "node": None
        if node is None
        else {
            "vcpus": node.budget.vcpus,
            "duration_s": json_number(node.duration_s),
            "samples": node.samples,
            "totals": totals_dict(node.totals),
        },
        "targets": [
            {"cgroup": key, "workload": describe(key), **summary_dict(s)} for key, s in ordered
        ],
    }


def _summary_rank(key: str, s: Summary) -> tuple[int, float, str]:
    rank = -1 if s.verdict is None else s.verdict.rank
    return (-rank, -s.totals.demand, key)


def _row(t: TargetResult, th: Thresholds) -> list[str]:
    totals = t.interval.totals
    return [
        bounded(t.cgroup),
        str(t.budget.vcpus),
        str(totals.processes),
        f"{totals.active_threads}/{totals.threads}",
        f"{totals.cpu_percent:.0f}",
        f"{totals.demand:.2f}",
        delay_text(totals.run_delay_ratio, totals.demand, th),
        t.state,
        _worst(t),
    ]


_LEFT = ("cgroup", "verdict", "worst")
HEADERS = ("cgroup", "N", "procs", "threads act/all", "CPU%", "demand", "delay", "verdict", "worst")


def round_renderable(r: Round, th: Thresholds) -> RenderableType:
    """The live frame: the node's line, a row per cgroup that holds load (worst first), then
    the worst finding and its fix for the first few targets that are not ok."""
    from rich.console import Group
    from rich.table import Table

    from oversub.render.richparts import add_row, text

    parts: list[RenderableType] = []
    node = r.node
    if node is not None:
        t = node.interval.totals
        parts.append(
            text(
                f"oversub watch --all · {r.elapsed:.1f} s · {count(r.intervals, 'sample')} · "
                f"node: {count(node.budget.vcpus, 'CPU')}, {count(t.processes, 'process')}, "
                f"{t.threads} threads, CPU {t.cpu_percent:.0f}%, demand {t.demand:.2f}",
                "bold",
            )
        )
    parts.append(text(f"{count(len(r.targets), 'cgroup')} with runnable load or a finding", "dim"))
    if r.targets:
        table = Table(box=None, pad_edge=False)
        for header in HEADERS:
            table.add_column(header, justify="left" if header in _LEFT else "right")
        for target in r.targets[:MAX_ROWS]:
            add_row(table, _row(target, th))
        parts.append(table)
        if len(r.targets) > MAX_ROWS:
            parts.append(text(f"… and {len(r.targets) - MAX_ROWS} more", "dim"))
    for target in [t for t in r.targets if t.assessment.findings][:MAX_FIXES]:
        worst = target.assessment.findings[0]
        parts.append(text(f"{bounded(target.cgroup)}: {worst.message}"))
        parts.append(text(f"  fix: {worst.fix}", "dim"))
    return Group(*parts)


def node_summary_renderable(summaries: Mapping[str, Summary], node: Summary | None) -> Any:
    """The end of a live `watch --all`: one row per cgroup over the whole run."""
    from rich.console import Group
    from rich.table import Table

    from oversub.render.richparts import add_row, text

    parts: list[Any] = []
    if node is not None:
        parts.append(
            text(
                f"oversub summary --all · {node.duration_s:.1f} s · "
                f"{count(node.samples, 'sample')} · node demand {node.totals.demand:.2f} on "
                f"{count(node.budget.vcpus, 'CPU')}",
                "bold",
            )
        )
    if not summaries:
        parts.append(text("no cgroup held runnable load"))
        return Group(*parts)
    table = Table(box=None, pad_edge=False)
    for header in ("cgroup", "N", "samples", "demand", "peak", "delay", "verdict", "worst"):
        table.add_column(header, justify="left" if header in _LEFT else "right")
    ordered = sorted(summaries.items(), key=lambda kv: _summary_rank(kv[0], kv[1]))
    for key, s in ordered:
        add_row(
            table,
            [
                bounded(key),
                str(s.budget.vcpus),
                str(s.samples),
                f"{s.totals.demand:.2f}",
                f"{s.totals_peak.demand:.2f}",
                delay_text(s.totals.run_delay_ratio, s.totals.demand, s.thresholds),
                "not judged" if s.verdict is None else s.verdict.value,
                s.findings[0].rule.value if s.findings else NO_FINDING,
            ],
        )
    parts.append(table)
    for key, s in ordered:
        if s.findings and s.verdict is not None and s.verdict.rank > 0:
            parts.append(text(f"{bounded(key)}: {s.findings[0].message}"))
            parts.append(text(f"  fix: {s.findings[0].fix}", "dim"))
    return Group(*parts)
