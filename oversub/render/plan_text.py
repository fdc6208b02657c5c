"""`oversub recommend` for a terminal: the numbers, what to paste, and how to bind.

Pure: builds rich renderables, prints nothing. Imported only on text paths.
"""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from oversub.core.cpulist import format_cpulist
from oversub.core.model import Plan
from oversub.core.plural import count, noun
from oversub.render.escape import terminal
from oversub.render.phrases import budget_limit_line
from oversub.render.serialize import export_lines, plan_env


def code_lines(p: Plan) -> list[str]:
    """Python lines that apply the plan from inside the program, for the main processes and,
    when there are workers, for each worker."""
    return code_lines_for(p.threads_per_process, p.workers)


def code_lines_for(t: int, workers: int = 0) -> list[str]:
    """`code_lines` for T = `t` threads per main process and `workers` workers each."""
    lines = [
        "# in each main process, before the first parallel operation:",
        f"torch.set_num_threads({t})",
        f"threadpoolctl.threadpool_limits({t})",
        "# and for the runtimes that no variable above reaches, or that read it at import:",
        f"session_options.intra_op_num_threads = {t}  # ONNX Runtime, before InferenceSession",
        f"pyarrow.set_cpu_count({t}); numexpr.set_num_threads({t}); numba.set_num_threads({t})",
        "# polars has no call: POLARS_MAX_THREADS is read once, when polars is imported",
    ]
    if workers > 0:
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
    n = p.budget.vcpus
    if p.budget.limited_by != "none":
        source = f"limited by {p.budget.limited_by}"
    else:
        source = "given with --cpus" if p.budget.given else "all host CPUs"
    table.add_row("N", str(n), f"usable {noun(n, 'vCPU')} ({source})")
    if p.launcher_procs is not None and p.launcher_procs != p.procs:
        procs_meaning = (
            f"{noun(p.procs, 'process')} planned: one task of the {p.launcher_procs} that "
            f"{p.procs_source} starts on this node, each with its own N"
        )
    else:
        procs_meaning = f"main {noun(p.procs, 'process')} sharing N"
        if p.procs_source:
            procs_meaning += f" (from {p.procs_source})"
    table.add_row("M", str(p.procs), procs_meaning)
    table.add_row(
        "W", str(p.workers), f"single-thread {noun(p.workers, 'worker')} per main process"
    )
    table.add_row(
        "T", str(p.threads_per_process), f"{noun(p.threads_per_process, 'thread')} per main process"
    )
    if p.leftover >= 0:
        table.add_row(
            "leftover",
            str(p.leftover),
            f"N - M*(T + W): {noun(p.leftover, 'CPU')} not handed out",
        )
    else:
        needed = n - p.leftover
        table.add_row(
            "over by",
            Text(str(-p.leftover), style="red"),
            f"M*(T + W) - N: the plan needs {count(needed, 'thread')} on "
            f"{count(n, 'vCPU')} ({needed / n:.1f}x), even at 1 thread per process",
        )
    return table


def _exports(p: Plan) -> list[RenderableType]:
    """The export blocks: one for the main processes and one for the workers, or a single
    one when both get the same values (T = 1)."""
    exports = plan_env(p)
    worker_exports = export_lines(p.worker_env)
    if worker_exports == exports:
        heading = "Before starting the job (main processes and workers alike):"
        return [Text(heading, style="bold"), Text(exports.rstrip("\n"), style="cyan")]
    parts: list[RenderableType] = []
    if exports:
        parts.append(Text("Before starting the job:", style="bold"))
        parts.append(Text(exports.rstrip("\n"), style="cyan"))
    if worker_exports:
        parts.append(Text("In each worker's environment:", style="bold"))
        parts.append(Text(worker_exports.rstrip("\n"), style="cyan"))
    return parts


def plan_renderable(p: Plan) -> RenderableType:
    """The plan for a terminal: numbers table, budget sentence, export lines, code lines,
    notes, binding lines. The warnings are not here: they are diagnostics, which the CLI
    prints on stderr (`warning_lines`) whatever the format."""
    parts: list[RenderableType] = [
        _numbers_table(p),
        Text(budget_limit_line(p.budget), style="bold"),
        Text(""),
        *_exports(p),
        Text(""),
        Text("Or in code:", style="bold"),
        Text("\n".join(code_lines(p)), style="cyan"),
    ]
    for note in p.budget.notes:
        parts.append(Text(terminal(f"note: {note}"), style="dim"))

    bindings = binding_lines(p)
    if bindings:
        parts.append(Text(""))
        parts.append(Text("Binding (optional, one CPU set per process):", style="bold"))
        parts.append(Text("\n".join(bindings)))
    elif p.budget.given:
        parts.append(
            Text(
                "Binding: none, since --cpus gives a count, not this machine's CPUs; run "
                "`oversub recommend` on the machine itself for a binding plan.",
                style="dim",
            )
        )
    return Group(*parts)
