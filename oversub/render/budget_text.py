"""`oversub cpus` for a terminal: every limit on the budget, which one binds, and N.

Pure: builds one string, prints nothing. Plain text with its colours written by hand (SGR
codes, only when the caller asks: a terminal, without NO_COLOR), not rich: importing rich's
console and table cost `cpus` 22 ms, 1.35 x the start-up of `import click, psutil` against a
goal of 1.2 x (docs/development.md, Performance).
"""

from __future__ import annotations

from collections.abc import Sequence

from oversub.core.cpulist import format_cpulist
from oversub.core.model import Budget
from oversub.render.escape import terminal
from oversub.render.phrases import budget_limit_line, cpus_phrase
from oversub.render.plan_formats import ROUNDING_RULE

BOLD, DIM, GREEN, RESET = "\x1b[1m", "\x1b[2m", "\x1b[32m", "\x1b[0m"
HEADERS = ("Limit", "Value", "Binds")
BINDS = "◀ binds"
GAP = "  "
"""Between two columns, and before the first."""
MIN_VALUE = 16
"""The value column is wrapped to the width left, never narrower than this."""


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


def _rows(b: Budget) -> list[tuple[str, str, bool]]:
    """(label, value, binds) per limit; values escaped (cgroup paths are named by whoever
    made the cgroup: shown, never obeyed)."""
    binding_row = "logical" if b.limited_by == "none" else b.limited_by
    rows = [
        ("logical", "Logical CPUs", f"{b.logical} online"),
        ("smt", "Physical cores (SMT)", _smt_text(b)),
        ("numa", "NUMA nodes", _numa_text(b)),
        ("affinity", "Affinity", cpus_phrase(b.affinity)),
        ("quota", "cgroup quota", _quota_text(b)),
        ("cpuset", "cgroup cpuset", _cpuset_text(b)),
    ]
    if b.launcher is not None:
        rows.append(("launcher", "Launcher share", f"{b.launcher} per task"))
    return [(label, terminal(value), key == binding_row) for key, label, value in rows]


def _wrap(value: str, width: int | None) -> list[str]:
    if width is None or len(value) <= width:
        return [value]
    import textwrap

    # A cgroup path has no spaces: cut it where it must be cut rather than overflow.
    return textwrap.wrap(value, width, break_on_hyphens=False) or [value]


def _styled(text: str, style: str, colour: bool) -> str:
    return f"{style}{text}{RESET}" if colour and style and text else text


def budget_text(b: Budget, *, colour: bool = False, width: int | None = None) -> str:
    """A table of the host's CPUs and each limit (the binding row bold, marked `◀ binds`),
    then N, the rounding rule, notes and the CPU model and flags when known; each line ends
    in a newline. `colour`: SGR codes (bold, dim, green). `width`: the terminal's columns,
    to which the value column is wrapped (None: never wrapped, as off a terminal)."""
    rows = _rows(b)
    label_w = max(len(HEADERS[0]), *(len(label) for label, _, _ in rows))
    value_w = max(len(HEADERS[1]), *(len(value) for _, value, _ in rows))
    binds_w = max(len(HEADERS[2]), len(BINDS))
    room = None
    if width is not None:
        room = width - len(GAP) * 3 - label_w - binds_w
        if room < MIN_VALUE:
            return "\n".join(_stacked(b, rows, colour, width)) + "\n"
        value_w = min(value_w, room)
    widths = (label_w, value_w, binds_w)

    def line(cells: Sequence[str], styles: Sequence[str]) -> str:
        padded = [
            _styled(cell, style, colour) + " " * (w - len(cell))
            for cell, style, w in zip(cells, styles, widths, strict=True)
        ]
        return (GAP + GAP.join(padded)).rstrip()

    out = [
        line(HEADERS, (BOLD,) * 3),
        GAP + GAP.join("─" * w for w in widths),
    ]
    for label, value, binds in rows:
        style = BOLD if binds else ""
        parts = _wrap(value, room)
        out.append(line((label, parts[0], BINDS if binds else ""), (style, style, BOLD + GREEN)))
        out += [line(("", more, ""), ("", style, "")) for more in parts[1:]]
    return "\n".join(out + _closing(b, colour, width)) + "\n"


def _stacked(b: Budget, rows: list[tuple[str, str, bool]], colour: bool, width: int) -> list[str]:
    """The table as a list, for a terminal too narrow for its columns: each limit on a line
    (the binding one bold, marked), its value below it, indented and wrapped."""
    out: list[str] = []
    indent = GAP * 2
    for label, value, binds in rows:
        style = BOLD if binds else ""
        mark = " " + _styled(BINDS, BOLD + GREEN, colour) if binds else ""
        out.append(_styled(label, style, colour) + mark)
        out += [indent + _styled(part, style, colour) for part in _wrap(value, width - len(indent))]
    return [*out, *_closing(b, colour, width)]


def _closing(b: Budget, colour: bool, width: int | None) -> list[str]:
    """N, the rounding rule, notes, the CPU model and flags: each wrapped to `width`."""
    lines = [
        (budget_limit_line(b), BOLD),
        (f"Rounding: {ROUNDING_RULE}.", DIM),
        *((terminal(f"note: {note}"), DIM) for note in b.notes),
    ]
    if b.cpu_model is not None:
        lines.append((terminal(f"CPU model: {b.cpu_model}"), ""))
    if b.cpu_flags:
        lines.append((terminal(f"CPU flags: {' '.join(b.cpu_flags)}"), DIM))
    out = [""]
    for text, style in lines:
        out += [_styled(part, style, colour) for part in _wrap(text, width)]
    return out
