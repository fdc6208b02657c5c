"""`watch --all`: a row per cgroup and the node's totals, as a live frame, NDJSON and JSON.

Pure: rounds and summaries in, text or rich renderables out. Cgroup paths are untrusted
(whoever made the cgroup chose them): bounded (`workload.bounded`) and escaped per sink.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from oversub.core.plural import count
from oversub.core.results import Summary
from oversub.core.targets import Round, TargetResult
from oversub.core.thresholds import Thresholds
from oversub.core.workload import bounded, describe
from oversub.render.phrases import UNKNOWN, delay_text
from oversub.render.plan_formats import budget_dict
from oversub.render.serialize import (
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


ROOT_PIDS_MAX = 5
"""Pids of the root cgroup's busiest processes a JSON record lists."""


class RootLoad(NamedTuple):
    """Runnable load held by processes of the root cgroup itself: in no child cgroup, so in
    no target of `--all` (`workload.group_of`), and judged by no verdict."""

    demand: float
    """Their demand: runnable threads on average (over the interval, or the run)."""
    pids: tuple[int, ...]
    """The processes, busiest first."""
    watch: int
    """The pid to follow as a process tree: the busiest one's, or the parent of several."""
    name: str
    """That process's name (its comm: untrusted, escape it at the sink)."""


class _Proc(NamedTuple):
    pid: int
    ppid: int
    name: str
    demand: float
    """Its share of the span's demand (a process seen for part of it counts for that part)."""
    busy: bool


def _root_load(node: Iterable[_Proc], in_targets: set[int]) -> RootLoad | None:
    """The busy processes of the node that no target holds. A process with a thread runnable
    `--active-cpu` of an interval makes its cgroup hold load (`fleet.holds_load`), so a busy
    process in no target shown is in the root cgroup (or a kernel thread, which is too)."""
    procs = {p.pid: p for p in node}
    busy = sorted(
        (p for p in procs.values() if p.busy and p.pid not in in_targets),
        key=lambda p: (-p.demand, p.pid),
    )
    if not busy:
        return None
    busy_pids = {p.pid for p in busy}
    children: dict[int, int] = {}
    for p in busy:
        children[p.ppid] = children.get(p.ppid, 0) + 1
    # Follow the busiest one up while its parent holds more of them (the workers of one
    # job share a parent) or is busy itself; never up to init or the kernel.
    top = busy[0]
    seen = {top.pid}
    while top.ppid > 1 and top.ppid in procs and top.ppid not in seen:
        parent = procs[top.ppid]
        if parent.pid in in_targets:
            break
        if parent.pid not in busy_pids and children.get(parent.pid, 0) < 2:
            break
        seen.add(parent.pid)
        top = parent
    return RootLoad(sum(p.demand for p in busy), tuple(p.pid for p in busy), top.pid, top.name)


def round_root_load(r: Round) -> RootLoad | None:
    """The root cgroup's load in one round (`RootLoad`); None without the node or when its
    processes held none."""
    if r.node is None:
        return None
    iv = r.node.interval
    span = iv.seconds
    procs = (
        _Proc(
            p.pid,
            p.ppid,
            p.name,
            p.demand if p.seconds is None or span <= 0 else p.demand * p.seconds / span,
            p.active_threads > 0,
        )
        for p in iv.processes
    )
    return _root_load(procs, {p.pid for t in r.targets for p in t.interval.processes})


def summary_root_load(summaries: Mapping[str, Summary], node: Summary | None) -> RootLoad | None:
    """The same over a whole run: processes of the node that had a busy interval and belong to
    no cgroup shown (`summaries`: the cgroups that held load at some point)."""
    if node is None:
        return None
    span = node.duration_s
    procs = (
        _Proc(
            p.pid,
            p.ppid,
            p.name,
            p.demand * p.seconds / span if span > 0 else p.demand,
            p.active_threads_peak > 0,
        )
        for p in node.processes
    )
    return _root_load(procs, {p.pid for s in summaries.values() for p in s.processes})


def root_record(load: RootLoad | None) -> dict[str, Any] | None:
    """The `root_cgroup` of a node record: null when the root cgroup's own processes held no
    load, else `demand`, `pids` (busiest first, at most `ROOT_PIDS_MAX`) and `watch` (the
    pid `oversub watch PID` would follow them through)."""
    if load is None:
        return None
    return {
        "demand": json_number(load.demand),
        "pids": list(load.pids[:ROOT_PIDS_MAX]),
        "watch": load.watch,
    }


def root_lines(load: RootLoad, node_demand: float | None, *, alone: bool) -> tuple[str, str]:
    """What the text says of the root cgroup's load: where it is, that `--all` does not judge
    it, and the command that does (`alone`: no child cgroup held any)."""
    of_node = "" if node_demand is None else f" of the node's {node_demand:.2f}"
    figures = f"demand {load.demand:.2f}{of_node}, {count(len(load.pids), 'process')}"
    if alone:
        first = (
            f"no child cgroup held runnable load: the root cgroup did ({figures}), and "
            "--all judges child cgroups only"
        )
    else:
        first = (
            f"the root cgroup held runnable load too ({figures}): --all judges child cgroups only"
        )
    second = (
        f"  judge its processes as a tree: oversub watch {load.watch} ({load.name}), "
        f"or serve --pid {load.watch}"
    )
    return first, second


def root_serve_line(load: RootLoad, node_demand: float | None) -> str:
    """`serve --all`'s line on stderr when the root cgroup's own processes hold load: no
    series exports it (the node's `/` counts them, no verdict does)."""
    of_node = "" if node_demand is None else f" of the node's {node_demand:.2f}"
    return (
        f"oversub serve: the root cgroup holds runnable load (demand {load.demand:.2f}"
        f"{of_node}, {count(len(load.pids), 'process')}), which --all exports in the node's "
        f"totals only: serve --pid {load.watch} ({load.name}) judges its processes as a tree"
    )


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
    has no verdict: its processes are held to their cgroups' budgets; `root_cgroup`: the load
    of the processes in no child cgroup, which no target judges, `root_record`), `targets`
    (the cgroups that held load, worst first: `target_record`)."""
    node = r.node
    return {
        "type": "node-interval",
        "timestamp": timestamp,
        "seconds": json_number(node.interval.seconds) if node else None,
        "node": None
        if node is None
        else {
            "vcpus": node.budget.vcpus,
            "totals": totals_dict(node.interval.totals),
            "root_cgroup": root_record(round_root_load(r)),
        },
        "targets": [target_record(t) for t in r.targets],
    }


def node_summary_record(
    summaries: Mapping[str, Summary], node: Summary | None, timestamp: str | None
) -> dict[str, Any]:
    """The end of `watch --all`: `type` "node-summary", `timestamp`, `node` (`vcpus`,
    `duration_s`, `samples`, `totals` over the run, `root_cgroup` as in `round_record`, over
    the run), `targets` (per cgroup that held load at
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
            "root_cgroup": root_record(summary_root_load(summaries, node)),
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
    load = round_root_load(r)
    if load is not None:
        first, second = root_lines(
            load, None if node is None else node.interval.totals.demand, alone=not r.targets
        )
        parts += [text(first), text(second, "dim")]
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
    load = summary_root_load(summaries, node)
    root = (
        []
        if load is None
        else root_lines(load, node.totals.demand if node else None, alone=not summaries)
    )
    if not summaries:
        if root:
            parts += [text(root[0]), text(root[1], "dim")]
        else:
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
    if root:
        parts += [text(root[0]), text(root[1], "dim")]
    return Group(*parts)
