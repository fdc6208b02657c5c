"""`oversub recommend` for a terminal: the numbers, what to paste, and how to bind.

Pure: builds rich renderables, prints nothing. Imported only on text paths.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from oversub.model import Plan
from oversub.render.phrases import budget_limit_line
from oversub.render.serialize import export_lines, plan_env

__all__ = ["binding_lines", "code_lines", "plan_renderable"]


def code_lines(p: Plan) -> list[str]:
    """Python lines that apply the plan from inside the program, for the main processes and,
    when there are workers, for each worker."""
    t = p.threads_per_process
    lines = [
        "# in each main process, before the first parallel operation:",
        f"torch.set_num_threads({t})",
        f"threadpoolctl.threadpool_limits({t})",
    ]
    if p.workers > 0:
        lines += [
            "# in each DataLoader/pool worker, one thread:",
            "DataLoader(..., worker_init_fn=oversub.worker_init_fn)",
            "# or in your own worker_init_fn:",
            "torch.set_num_threads(1); threadpoolctl.threadpool_limits(1)",
        ]
    return lines


def binding_lines(p: Plan) -> list[str]:
    """One `taskset -c LIST <cmd>` line per main process, with the numactl equivalent; empty
    when the plan has no binding."""
    from oversub.probe.topology import format_cpulist

    lines = []
    for index, cpus in enumerate(p.binding):
        cpulist = format_cpulist(cpus)
        lines.append(
            f"process {index}: taskset -c {cpulist} <cmd>    # or: numactl -C {cpulist} <cmd>"
        )
    return lines


def _numbers_table(p: Plan) -> Table:
    table = Table(box=box.SIMPLE, show_header=False)
    table.add_column("Quantity", style="bold")
    table.add_column("Value")
    table.add_column("Meaning", style="dim")
    if p.budget.limited_by != "none":
        source = f"limited by {p.budget.limited_by}"
    else:
        # pid 0 marks a budget given with --cpus (analysis.recommend.synthetic_budget).
        source = "given" if p.budget.pid == 0 else "all host CPUs"
    table.add_row("N", str(p.budget.vcpus), f"usable vCPUs ({source})")
    procs_meaning = "main processes sharing N"
    if p.procs_source:
        procs_meaning += f" (from {p.procs_source})"
    table.add_row("M", str(p.procs), procs_meaning)
    table.add_row("W", str(p.workers), "single-thread workers per main process")
    table.add_row("T", str(p.threads_per_process), "threads per main process")
    leftover_style = "red" if p.leftover < 0 else None
    table.add_row(
        "leftover",
        Text(str(p.leftover), style=leftover_style or ""),
        "N - M*(T + W): CPUs not handed out",
    )
    return table


def plan_renderable(p: Plan) -> RenderableType:
    """The plan for a terminal: numbers table, budget sentence, export lines, code lines,
    warnings (red when the plan itself oversubscribes, yellow otherwise), binding lines."""
    parts: list[RenderableType] = [
        _numbers_table(p),
        Text(budget_limit_line(p.budget), style="bold"),
        Text(""),
    ]
    exports = plan_env(p)
    if exports:
        parts.append(Text("Before starting the job:", style="bold"))
        parts.append(Text(exports.rstrip("\n"), style="cyan"))
    worker_exports = export_lines(p.worker_env)
    if worker_exports:
        parts.append(Text("In each worker's environment:", style="bold"))
        parts.append(Text(worker_exports.rstrip("\n"), style="cyan"))
    parts.append(Text(""))
    parts.append(Text("Or in code:", style="bold"))
    parts.append(Text("\n".join(code_lines(p)), style="cyan"))

    for note in p.budget.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    warning_style = "bold red" if p.oversubscribed else "yellow"
    for warning in p.warnings:
        parts.append(Text(f"warning: {warning}", style=warning_style))

    bindings = binding_lines(p)
    if bindings:
        parts.append(Text(""))
        parts.append(Text("Binding (optional, one CPU set per process):", style="bold"))
        parts.append(Text("\n".join(bindings)))
    return Group(*parts)
