"""`oversub run`'s records: the cure it applies, what each process's hook did, and the
lines of its verification (built by `analysis.cureplan` and `analysis.cured`, worded by
`render.cure_text`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.model import Plan


class Variables(NamedTuple):
    """What CMD's environment gets."""

    managed: Mapping[str, str]
    """Variable -> the value `run` sets (the plan's threads for the first process)."""
    kept: Mapping[str, str]
    """Variable -> the user's value, which wins (already set in oversub's environment)."""
    skipped: Mapping[str, str]
    """Variable -> why `run` never sets it (`NOT_EXPORTED`)."""


class Cure(NamedTuple):
    """The plan `run` applies: the budget, how each process's share is found, the variables."""

    plan: Plan
    """The plan as `recommend` computes it (for the tree's own count: M = 1, the root's)."""
    tree: bool
    """`--procs auto` without a launcher variable: each process's share is its parent's
    divided among the processes the parent runs at once (docs/run.md)."""
    threads: int | None
    """Threads of each main process: the plan's T, or `--threads`; None in the tree's count."""
    variables: Variables


class Knob(NamedTuple):
    """What the hook did to one runtime in one process."""

    knob: str
    value: int | None
    state: str
    """"sized" (oversub set it), "kept" (the program's own setting), "failed"."""
    sessions: int | None = None


class HookRecord(NamedTuple):
    """One process's record, as the hook wrote it."""

    pid: int
    ppid: int
    start: int | None
    role: str
    threads: int | None
    siblings: int | None
    user_vars: Mapping[str, str]
    knobs: Mapping[str, Knob]
    faults: tuple[str, ...]


class Line(NamedTuple):
    """One line of the verification: a state, a runtime, the processes, what to do."""

    state: str
    """"sized", "kept", "escaped", "failed", "not-reached", "variables-only"."""
    runtime: str
    """A human name ("OpenBLAS"), or "" for a line about processes."""
    pids: tuple[int, ...]
    detail: str
    fix: str = ""
    names: tuple[str, ...] = ()
    """The processes' names (a command line's first words), beside `pids`, for lines about
    processes (hostile text: escape it where it is shown)."""
