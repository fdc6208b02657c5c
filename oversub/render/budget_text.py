"""`oversub cpus` for a terminal: every limit on the budget, which one binds, and N.

Pure: builds rich renderables, prints nothing. Imported only on text paths, so rich is
imported at module level here (never from `serialize`).
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from oversub.core.cpulist import format_cpulist
from oversub.core.model import Budget
from oversub.render.escape import terminal
from oversub.render.phrases import budget_limit_line, cpus_phrase
from oversub.render.serialize import ROUNDING_RULE


def _quota_text(b: Budget) -> str:
    q = b.quota
    if q is None:
        return "none"
    return f"{q.cpus:.2f} CPUs ({q.quota_us}/{q.period_us} µs) in {q.cgroup}, cgroup v{q.version}"


def _cpuset_text(b: Budget) -> str:
    c = b.cpuset
    if c is None:
        return "none"
    return f"{cpus_phrase(c.cpus)} in {c.cgroup}, cgroup v{c.version}"


def _smt_text(b: Budget) -> str:
    if b.physical is None:
        return "unknown"
    cores = f"{b.physical} {'core' if b.physical == 1 else 'cores'}"
    if b.cores:
        widest = max(len(group) for group in b.cores)
        return f"{cores}, {widest} {'thread' if widest == 1 else 'threads'} per core"
    return cores


def _numa_text(b: Budget) -> str:
    if not b.numa:
        return "not reported"
    nodes = sorted(b.numa.items())
    return "; ".join(f"node {node}: {format_cpulist(cpus)}" for node, cpus in nodes)


def budget_renderable(b: Budget) -> RenderableType:
    """A table of the host's CPUs and each limit (the binding one marked), then N, the
    rounding rule, notes (dim) and CPU model/flags when known."""
    binding_row = "logical" if b.limited_by == "none" else b.limited_by
    rows: list[tuple[str, str, str]] = [
        ("logical", "Logical CPUs", f"{b.logical} online"),
        ("smt", "Physical cores (SMT)", _smt_text(b)),
        ("numa", "NUMA nodes", _numa_text(b)),
        ("affinity", "Affinity", cpus_phrase(b.affinity)),
        ("quota", "cgroup quota", _quota_text(b)),
        ("cpuset", "cgroup cpuset", _cpuset_text(b)),
    ]
    if b.launcher is not None:
        rows.append(("launcher", "Launcher share", f"{b.launcher} per task"))
    table = Table(box=box.SIMPLE, show_header=True, header_style="bold")
    table.add_column("Limit")
    table.add_column("Value")
    table.add_column("Binds")
    for key, label, value in rows:
        binds = key == binding_row
        table.add_row(
            label,
            # cgroup paths are named by whoever made the cgroup: shown, never obeyed.
            Text(terminal(value)),
            Text("◀ binds", style="bold green") if binds else "",
            style="bold" if binds else None,
        )

    parts: list[RenderableType] = [
        table,
        Text(budget_limit_line(b), style="bold"),
        Text(f"Rounding: {ROUNDING_RULE}.", style="dim"),
    ]
    for note in b.notes:
        parts.append(Text(terminal(f"note: {note}"), style="dim"))
    if b.cpu_model is not None:
        parts.append(Text(terminal(f"CPU model: {b.cpu_model}")))
    if b.cpu_flags:
        parts.append(Text(terminal(f"CPU flags: {' '.join(b.cpu_flags)}"), style="dim"))
    return Group(*parts)
