"""`oversub recommend` for a terminal: the numbers, what to paste, and how to bind.

Pure: builds one string, prints nothing. Plain text with its colours written by hand (SGR
codes, only when the caller asks), as `budget_text` does for `cpus`: importing rich's console
and table cost `recommend` 1.47 x the start-up of `import click, psutil` against a goal of
1.2 x (docs/development.md, Performance). Imported only on text paths.
"""

from __future__ import annotations

from typing import NamedTuple

from oversub.core.cpulist import format_cpulist
from oversub.core.model import Plan
from oversub.core.plural import count, noun
from oversub.render.budget_text import BOLD, DIM, RESET
from oversub.render.escape import terminal
from oversub.render.phrases import budget_limit_line
from oversub.render.plan_formats import export_lines, plan_env, plan_prefix

CYAN, RED = "\x1b[36m", "\x1b[31m"
GAP = "   "
"""Between two columns of the numbers; the table is indented by two spaces."""
MIN_MEANING = 16
"""The meaning column is wrapped to the width left, never narrower than this."""


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


class _Out:
    """The lines of the text, styled when `colour`, prose wrapped to `width` (None: never
    wrapped). Code is never wrapped: a line longer than the terminal stays one line (the
    terminal folds it on screen, a copy gives it back whole)."""

    def __init__(self, colour: bool, width: int | None) -> None:
        self.colour, self.width = colour, width
        self.lines: list[str] = []

    def styled(self, text: str, style: str) -> str:
        return f"{style}{text}{RESET}" if self.colour and style and text else text

    def prose(self, text: str, style: str = "") -> None:
        parts = [text]
        if self.width is not None and len(text) > self.width:
            import textwrap

            parts = textwrap.wrap(text, self.width, break_on_hyphens=False) or [text]
        self.lines += [self.styled(part, style) for part in parts]

    def code(self, lines: list[str], style: str = CYAN) -> None:
        self.lines += [self.styled(terminal(line), style) for line in lines]

    def blank(self) -> None:
        self.lines.append("")


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


def _numbers(p: Plan) -> list[tuple[str, str, str, bool]]:
    """(quantity, value, meaning, over) per row of the numbers."""
    n = p.budget.vcpus
    if p.budget.limited_by != "none":
        source = f"limited by {p.budget.limited_by}"
    else:
        source = "given with --cpus" if p.budget.given else "all host CPUs"
    rows = [("N", str(n), f"usable {noun(n, 'vCPU')} ({source})", False)]
    if p.launcher_procs is not None and p.launcher_procs != p.procs:
        procs_meaning = (
            f"{noun(p.procs, 'process')} planned: one task of the {p.launcher_procs} that "
            f"{p.procs_source} starts on this node, each with its own N"
        )
    else:
        procs_meaning = f"main {noun(p.procs, 'process')} sharing N"
        if p.procs_source:
            procs_meaning += f" (from {p.procs_source})"
    rows.append(("M", str(p.procs), terminal(procs_meaning), False))
    rows.append(
        ("W", str(p.workers), f"single-thread {noun(p.workers, 'worker')} per main process", False)
    )
    t = p.threads_per_process
    rows.append(("T", str(t), f"{noun(t, 'thread')} per main process", False))
    if p.leftover >= 0:
        meaning = f"N - M*(T + W): {noun(p.leftover, 'CPU')} not handed out"
        rows.append(("leftover", str(p.leftover), meaning, False))
    else:
        needed = n - p.leftover
        meaning = (
            f"M*(T + W) - N: the plan needs {count(needed, 'thread')} on "
            f"{count(n, 'vCPU')} ({needed / n:.1f}x), even at 1 thread per process"
        )
        rows.append(("over by", str(-p.leftover), meaning, True))
    return rows


def _numbers_table(out: _Out, p: Plan) -> None:
    """The numbers as three columns between blank lines, the meaning wrapped to the width
    left (at least `MIN_MEANING` columns)."""
    rows = _numbers(p)
    label_w = max(len(r[0]) for r in rows)
    value_w = max(len(r[1]) for r in rows)
    indent = "  " + " " * label_w + GAP + " " * value_w + GAP
    room = None if out.width is None else max(MIN_MEANING, out.width - len(indent))
    out.blank()
    for label, value, meaning, over in rows:
        parts = [meaning]
        if room is not None and len(meaning) > room:
            import textwrap

            parts = textwrap.wrap(meaning, room) or [meaning]
        cells = (
            out.styled(label, BOLD) + " " * (label_w - len(label)),
            out.styled(value, RED if over else "") + " " * (value_w - len(value)),
            out.styled(parts[0], DIM),
        )
        out.lines.append("  " + GAP.join(cells))
        out.lines += [indent + out.styled(more, DIM) for more in parts[1:]]
    out.blank()


def _exports(out: _Out, p: Plan) -> None:
    """The export blocks: one for the main processes and one for the workers, or a single
    one when both get the same values (T = 1)."""
    exports = plan_env(p)
    worker_exports = export_lines(p.worker_env)
    if worker_exports == exports:
        heading = (
            "Before starting the job, in its launch script (main processes and workers alike):"
        )
        out.prose(heading, BOLD)
        out.code(exports.splitlines())
        return
    if exports:
        out.prose("Before starting the job, in its launch script:", BOLD)
        out.code(exports.splitlines())
    if worker_exports:
        out.prose("In each worker's environment:", BOLD)
        out.code(worker_exports.splitlines())


def _one_command(out: _Out, p: Plan, command: str | None) -> None:
    """The same variables for one command only: the line to put before it, and how to get
    it from oversub (`--format prefix`). `eval` changes the shell for every later command."""
    prefix = plan_prefix(p).rstrip("\n")
    if not prefix:
        return
    out.blank()
    out.prose("Or for one command only, leaving this shell as it is (before the command):", BOLD)
    out.code([f"{prefix} python job.py"])
    if command is not None:
        out.code([f"env $({command} --format prefix) python job.py"], DIM + CYAN)


def plan_text(
    p: Plan, *, command: str | None = None, colour: bool = False, width: int | None = None
) -> str:
    """The plan for a terminal: numbers table, budget sentence, export lines, the prefix for
    one command (with the `command` that prints it, `oversub recommend ...`), code lines,
    notes, binding lines; each line ends in a newline. `colour`: SGR codes. `width`: the
    terminal's columns, to which prose is wrapped (None: never wrapped, as off a terminal);
    code never is. The warnings are not here: they are diagnostics, which the CLI prints on
    stderr (`warning_lines`) whatever the format."""
    out = _Out(colour, width)
    _numbers_table(out, p)
    out.prose(budget_limit_line(p.budget), BOLD)
    out.blank()
    _exports(out, p)
    _one_command(out, p, command)
    out.blank()
    code = "Or in code, in each main process before its first parallel operation (the blocks "
    code += "of the runtimes it uses; each runs as pasted):"
    out.prose(code, BOLD)
    out.code(code_lines_for(p.threads_per_process, p.workers))
    for note in p.budget.notes:
        out.prose(terminal(f"note: {note}"), DIM)
    bindings = binding_lines(p)
    if bindings:
        out.blank()
        out.prose("Binding (optional, one CPU set per process):", BOLD)
        out.code(bindings, "")
    elif p.budget.given:
        out.prose(
            "Binding: none, since --cpus gives a count, not this machine's CPUs; run "
            "`oversub recommend` on the machine itself for a binding plan.",
            DIM,
        )
    return "\n".join(out.lines) + "\n"
