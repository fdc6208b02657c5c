"""`oversub run` in words: the plan it applies, `--dry-run`, and its closing verification.

Pure text, one line per fact, each prefixed `oversub run:` (they go to stderr, beside CMD's
own output). Command lines and names come from the tree: escaped for the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oversub.core.cures import Cure, Line
from oversub.core.plural import count
from oversub.render.escape import terminal

PREFIX = "oversub run: "
MAX_PIDS = 8
"""Pids listed on one line before "and N more"."""


def plan_line(cure: Cure) -> str:
    """What the cure gives each process, in one line."""
    plan = cure.plan
    n = plan.budget.vcpus
    workers = (
        f", {count(plan.workers, 'worker')} each at 1 thread"
        if plan.workers
        else ", forked children and DataLoader workers 1 thread"
    )
    if cure.tree:
        how = (
            "each process gets its share as it starts: its parent's share divided among the "
            "processes the parent runs at once (--procs auto, no launcher variable)"
        )
    else:
        source = f" ({plan.procs_source})" if plan.procs_source else ""
        how = f"{count(plan.procs, 'process')}{source} x {count(cure.threads or 1, 'thread')}" + (
            " (--threads)" if cure.threads != plan.threads_per_process else ""
        )
    return f"{PREFIX}N = {count(n, 'usable vCPU')}; {how}{workers}"


def variable_lines(cure: Cure) -> list[str]:
    """The user's own variables, which win over the plan's."""
    lines = []
    for name, value in cure.variables.kept.items():
        lines.append(
            f"{PREFIX}{name}={terminal(value[:40])} is yours: kept (run sets none you set)"
        )
    return lines


def dry_run(
    cure: Cure,
    knobs: Sequence[tuple[str, str, str, str]],
    installed: Mapping[str, str | None],
    interpreter: str,
) -> str:
    """`run --dry-run`: the plan, the variables, and the hooks that would act.

    `knobs` are the hook's (module, runtime, label, what) rows; `installed` maps each module
    found in `interpreter`'s environment to its version (None: version unknown)."""
    out = [plan_line(cure).removeprefix(PREFIX)]
    for line in cure.plan.warnings:
        out.append(f"  note: {line}")
    out.append("variables (CMD's environment; forked children and workers get 1):")
    for name, value in cure.variables.managed.items():
        out.append(f"  {name}={value}")
    for name, value in cure.variables.kept.items():
        out.append(f"  {name}={terminal(value[:40])}  (yours: kept)")
    for name, why in cure.variables.skipped.items():
        out.append(f"  {name} not set: {why}")
    out.append(
        "hooks in every Python process (PYTHONPATH; -I/-E/-S and non-Python processes get "
        f"the variables only), for what {terminal(interpreter)} has installed:"
    )
    for module, _runtime, label, what in knobs:
        if module in installed:
            version = installed[module]
            shown = f" {terminal(version)}" if version else ""
            out.append(f"  {label} ({module}{shown}): {what}")
    missing = [module for module, *_ in knobs if module not in installed]
    if missing:
        out.append(f"  not installed (nothing to do): {', '.join(missing)}")
    return "\n".join(out)


def _pids(pids: Sequence[int], names: Sequence[str] = ()) -> str:
    shown = [
        f"{pid} ({terminal(names[i])})" if i < len(names) and names[i] else str(pid)
        for i, pid in enumerate(pids[:MAX_PIDS])
    ]
    more = f" and {len(pids) - MAX_PIDS} more" if len(pids) > MAX_PIDS else ""
    word = "pid" if len(pids) == 1 else "pids"
    return f"{word} {', '.join(shown)}{more}"


_STATE_WORDS = {
    "sized": "sized",
    "kept": "kept",
    "escaped": "escaped",
    "failed": "not applied",
    "unplanned": "no share of its own",
}


def verification(lines: Sequence[Line]) -> list[str]:
    """One line per state, runtime and setting (its processes listed)."""
    out = []
    for line in lines:
        if line.state == "not-reached":
            out.append(
                f"{PREFIX}not reached by the hook: {_pids(line.pids, line.names)}: "
                f"{line.detail}; the thread variables only"
            )
        elif line.state == "variables-only":
            out.append(
                f"{PREFIX}the thread variables only ({line.detail}): {_pids(line.pids, line.names)}"
            )
        else:
            word = _STATE_WORDS.get(line.state, line.state)
            fix = f" -> {line.fix}" if line.fix else ""
            out.append(
                f"{PREFIX}{word}: {line.runtime}: {terminal(line.detail)} in {_pids(line.pids)}"
                + fix
            )
    return out


def closing_line(verdict: str | None, demand: float | None, vcpus: int, status: str) -> str:
    """The last line: the tree's verdict with the cure, and the exit status passed on."""
    if verdict is None:
        return f"{PREFIX}not judged (the command ended before a full interval); {status}"
    shown = "" if demand is None else f": demand {demand:.2f} runnable threads on N = {vcpus}"
    return f"{PREFIX}{verdict}{shown}; {status}"
