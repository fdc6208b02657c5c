"""`oversub recommend` for a terminal: the numbers, what to paste, and how to bind.

Pure: builds rich renderables, prints nothing. Imported only on text paths.
"""

from __future__ import annotations

from typing import NamedTuple

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from oversub.core.cpulist import format_cpulist
from oversub.core.model import Plan
from oversub.core.plural import count, noun
from oversub.render.escape import terminal
from oversub.render.phrases import budget_limit_line
from oversub.render.plan_formats import export_lines, plan_env, plan_prefix


class Snippet(NamedTuple):
    """Python lines that size one runtime's pool, complete: they run as pasted into a file
    or an interpreter where `module` is importable (imports included)."""

    comment: str
    """What it sizes, as a `#` line above it."""
    module: str
    """The module it imports (tests run each snippet where it is installed)."""
    lines: tuple[str, ...]


def snippets(t: int, workers: int = 0) -> list[Snippet]:
    """The snippets for T = `t` threads per main process (each runtime's own call), then,
    with workers, the function that gives each worker one thread."""
    out = [
        Snippet(
            "# PyTorch's intra-op pool", "torch", ("import torch", f"torch.set_num_threads({t})")
        ),
        Snippet(
            "# BLAS and OpenMP pools already loaded (NumPy, SciPy, scikit-learn)",
            "threadpoolctl",
            ("import threadpoolctl", f"threadpoolctl.threadpool_limits({t})"),
        ),
        Snippet(
            "# ONNX Runtime: give these options to each InferenceSession(path, options)",
            "onnxruntime",
            (
                "import onnxruntime",
                "options = onnxruntime.SessionOptions()",
                f"options.intra_op_num_threads = {t}",
            ),
        ),
        Snippet("# pyarrow", "pyarrow", ("import pyarrow", f"pyarrow.set_cpu_count({t})")),
        Snippet("# numexpr", "numexpr", ("import numexpr", f"numexpr.set_num_threads({t})")),
        Snippet("# numba", "numba", ("import numba", f"numba.set_num_threads({t})")),
    ]
    if workers > 0:
        out.append(
            Snippet(
                "# each DataLoader or pool worker, 1 thread: DataLoader(..., worker_init_fn="
                "one_thread), Pool(initializer=one_thread)",
                "threadpoolctl",
                (
                    "# (or worker_init_fn=oversub.worker_init_fn, oversub installed in the job)",
                    "def one_thread(*_):",
                    "    import threadpoolctl",
                    "    threadpoolctl.threadpool_limits(1)",
                    "    try:",
                    "        import torch",
                    "        torch.set_num_threads(1)",
                    "    except ImportError:",
                    "        pass",
                ),
            )
        )
    return out


POLARS_NOTE = "# polars has no call: POLARS_MAX_THREADS is read once, when polars is imported"


def code_lines_for(t: int, workers: int = 0) -> list[str]:
    """Python lines that apply a plan from inside the program, for T = `t` threads per main
    process and `workers` workers each: every snippet (`snippets`) with its comment, a blank
    line between two, then the polars note."""
    lines: list[str] = []
    for snippet in snippets(t, workers):
        lines += [*([""] if lines else []), snippet.comment, *snippet.lines]
    return [*lines, "", POLARS_NOTE]


def _code(lines: list[str], style: str = "cyan") -> list[Text]:
    """Lines to paste, never wrapped: one longer than the terminal stays one line (the
    terminal folds it on screen, a copy gives it back whole)."""
    return [Text(terminal(line), style=style, no_wrap=True, overflow="ignore") for line in lines]


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
        heading = (
            "Before starting the job, in its launch script (main processes and workers alike):"
        )
        return [Text(heading, style="bold"), *_code(exports.splitlines())]
    parts: list[RenderableType] = []
    if exports:
        parts.append(Text("Before starting the job, in its launch script:", style="bold"))
        parts += _code(exports.splitlines())
    if worker_exports:
        parts.append(Text("In each worker's environment:", style="bold"))
        parts += _code(worker_exports.splitlines())
    return parts


def _one_command(p: Plan, command: str | None) -> list[RenderableType]:
    """The same variables for one command only: the line to put before it, and how to get
    it from oversub (`--format prefix`). `eval` changes the shell for every later command."""
    prefix = plan_prefix(p).rstrip("\n")
    if not prefix:
        return []
    heading = "Or for one command only, leaving this shell as it is (before the command):"
    parts: list[RenderableType] = [
        Text(""),
        Text(heading, style="bold"),
        *_code([f"{prefix} python job.py"]),
    ]
    if command is not None:
        parts += _code([f"env $({command} --format prefix) python job.py"], "dim cyan")
    return parts


def plan_renderable(p: Plan, *, command: str | None = None) -> RenderableType:
    """The plan for a terminal: numbers table, budget sentence, export lines, the prefix for
    one command (with the `command` that prints it, `oversub recommend ...`), code lines,
    notes, binding lines. Code is never wrapped inside a line. The warnings are not here:
    they are diagnostics, which the CLI prints on stderr (`warning_lines`) whatever the
    format."""
    code = "Or in code, in each main process before its first parallel operation (the blocks "
    code += "of the runtimes it uses; each runs as pasted):"
    parts: list[RenderableType] = [
        _numbers_table(p),
        Text(budget_limit_line(p.budget), style="bold"),
        Text(""),
        *_exports(p),
        *_one_command(p, command),
        Text(""),
        Text(code, style="bold"),
        *_code(code_lines_for(p.threads_per_process, p.workers)),
    ]
    for note in p.budget.notes:
        parts.append(Text(terminal(f"note: {note}"), style="dim"))

    bindings = binding_lines(p)
    if bindings:
        parts.append(Text(""))
        parts.append(Text("Binding (optional, one CPU set per process):", style="bold"))
        parts += _code(bindings, "")
    elif p.budget.given:
        parts.append(
            Text(
                "Binding: none, since --cpus gives a count, not this machine's CPUs; run "
                "`oversub recommend` on the machine itself for a binding plan.",
                style="dim",
            )
        )
    return Group(*parts)
