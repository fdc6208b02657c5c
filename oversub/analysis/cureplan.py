"""`oversub run`'s cure as data: which variables CMD gets, and the plan its hook reads.

Pure: the environment and the plan are passed in. The catalogue (`core.catalogue`, one row
per library) is read through two small accessors (`thread_variables`, `readers`).
docs/run.md is the reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from oversub.core.catalogue import CATALOGUE
from oversub.core.cures import Cure, Variables
from oversub.core.model import Plan
from oversub.core.pools import RECOMMENDED_VARS

PLAN_ENV = "OVERSUB_RUN_PLAN"
"""The variable the hook reads its plan from (oversub/hook/_oversub_hook/planenv.py)."""
PLAN_VERSION = 1

NOT_EXPORTED: Mapping[str, str] = {
    "NUMBA_NUM_THREADS": (
        "a maximum, not a size: numba.set_num_threads above it raises ValueError; the hook "
        "sizes numba with numba.set_num_threads(T) when its threads start"
    ),
    "NUMEXPR_MAX_THREADS": (
        "a maximum: numexpr refuses a NUMEXPR_NUM_THREADS or set_num_threads above it"
    ),
}
"""Catalogue variables `run` never sets, and why: each would make a library refuse a
setting the program asks for (a value must also be a whole number >= 1, which T is)."""


def thread_variables() -> tuple[str, ...]:
    """Every variable that sizes a library of the catalogue, in a stable order: those
    `recommend` exports first, then each row's knob, then the variables its mapped pool
    reads."""
    names: list[str] = list(RECOMMENDED_VARS)
    for row in CATALOGUE:
        names += [v for v in row.variables if v not in names]
    for row in CATALOGUE:
        names += [v for v in row.reads if v not in names]
    return tuple(names)


def readers(variable: str) -> tuple[str, ...]:
    """The human names of the pools `variable` sizes (catalogue order, no repeats): the
    threads a row's knob sizes, then the mapped pools that read it."""
    found: list[str] = []
    for row in CATALOGUE:
        if variable in row.variables and row.label not in found:
            found.append(row.label)
    for row in CATALOGUE:
        label = row.pool_label or row.label
        if variable in row.reads and not any(label in f for f in found):
            found.append(label)
    return tuple(found)


def variables(threads: int, env: Mapping[str, str]) -> Variables:
    """The catalogue's variables at `threads`, except those the user set (non-empty in
    `env`: theirs wins) and those that would make a library refuse a setting."""
    managed: dict[str, str] = {}
    kept: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in thread_variables():
        if name in NOT_EXPORTED:
            skipped[name] = NOT_EXPORTED[name]
        elif env.get(name, "").strip():
            kept[name] = env[name]
        else:
            managed[name] = str(threads)
    user_max = env.get("NUMEXPR_MAX_THREADS", "").strip()
    if "NUMEXPR_NUM_THREADS" in managed and user_max.isdigit() and int(user_max) >= 1:
        # numexpr refuses a count above an inherited maximum (it prints an error and ignores it).
        managed["NUMEXPR_NUM_THREADS"] = str(min(threads, int(user_max)))
    return Variables(managed, kept, skipped)


def make_cure(plan: Plan, env: Mapping[str, str], *, tree: bool, threads: int | None) -> Cure:
    """The cure of `plan` in the environment `env` (the user's, which CMD inherits)."""
    cap = threads if threads is not None else None if tree else plan.threads_per_process
    first = cap if cap is not None else plan.budget.vcpus
    return Cure(plan=plan, tree=tree, threads=cap, variables=variables(first, env))


def hook_plan(cure: Cure, *, top: int, directory: str | None) -> str:
    """OVERSUB_RUN_PLAN for CMD: the JSON the hook reads (`parse_plan` there checks it).

    `top` is the pid of the process that starts CMD (a process whose parent it is, is the
    tree's root); `directory` receives each process's record (None: no records).
    """
    document = {
        "v": PLAN_VERSION,
        "n": cure.plan.budget.vcpus,
        "t": cure.threads,
        "w": cure.plan.workers,
        "top": top,
        "set": dict(cure.variables.managed),
        "dir": directory,
    }
    return json.dumps(document, separators=(",", ":"))


def environment(
    cure: Cure, env: Mapping[str, str], *, hook_dir: str, top: int, directory: str | None
) -> dict[str, str]:
    """CMD's environment: `env` with the managed variables, the plan and the hook's
    directory first on PYTHONPATH (the user's PYTHONPATH follows it)."""
    out = dict(env)
    out.update(cure.variables.managed)
    out[PLAN_ENV] = hook_plan(cure, top=top, directory=directory)
    rest = env.get("PYTHONPATH", "")
    out["PYTHONPATH"] = hook_dir + (":" + rest if rest else "")
    return out
