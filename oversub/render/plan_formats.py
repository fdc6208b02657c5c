"""The CPU budget and a thread plan for scripts: the JSON objects of `cpus` and `recommend
--format json` (a run's JSON carries the same `budget`), and the variables as shell lines
(`--format env`, `prefix`). Keys are a contract, documented in docs/cli.md and only ever
added, as in `render.serialize`; no rich here either (the JSON paths import this module
alone).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oversub.core.pools import RECOMMENDED_VARS

if TYPE_CHECKING:  # annotations only: `recommend --format env` must not build these classes
    from oversub.core.model import Budget, Plan


ROUNDING_RULE = "fractional quotas round down; at least 1"
"""How a fractional cgroup quota becomes the integer N (the `rounding` key)."""

_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def budget_dict(b: Budget) -> dict[str, Any]:
    """The budget as a JSON object: the keys of `cpus --format json`, each documented in
    docs/cli.md (`cgroup` only for a cgroup target's)."""
    quota = b.quota
    out: dict[str, Any] = {
        "vcpus": b.vcpus,
        "logical": b.logical,
        "physical": b.physical,
        "affinity": list(b.affinity),
        "quota": None if quota is None else quota.cpus,
        "quota_detail": None
        if quota is None
        else {
            "quota_us": quota.quota_us,
            "period_us": quota.period_us,
            "cgroup": quota.cgroup,
            "version": quota.version,
        },
        "cpuset": None if b.cpuset is None else list(b.cpuset.cpus),
        "cpuset_cgroup": None if b.cpuset is None else b.cpuset.cgroup,
        "numa": {str(node): list(cpus) for node, cpus in sorted(b.numa.items())},
        "limited_by": b.limited_by,
        "launcher": b.launcher,
        "rounding": ROUNDING_RULE,
        "notes": list(b.notes),
    }
    if b.cpu_model is not None:
        out["cpu_model"] = b.cpu_model
    if b.cpu_flags:
        out["cpu_flags"] = list(b.cpu_flags)
    if b.cgroup is not None:
        out["cgroup"] = b.cgroup
    return out


def plan_dict(p: Plan) -> dict[str, Any]:
    """The thread plan as a JSON object: the keys of `recommend --format json` (docs/cli.md
    documents each), `budget` being `budget_dict`'s."""
    return {
        "vcpus": p.budget.vcpus,
        "procs": p.procs,
        "workers": p.workers,
        "threads_per_process": p.threads_per_process,
        "leftover": max(p.leftover, 0),
        "over_by": max(-p.leftover, 0),
        "oversubscribed": p.oversubscribed,
        "env": dict(p.env),
        "worker_env": dict(p.worker_env),
        "binding": [list(cpus) for cpus in p.binding],
        "warnings": list(p.warnings),
        "procs_source": p.procs_source,
        "launcher_procs": p.launcher_procs,
        "budget": budget_dict(p.budget),
    }


def export_lines(env: Mapping[str, str]) -> str:
    """`export NAME=VALUE` lines for `env`, for `eval` in sh or bash.

    Variables come in `pools.RECOMMENDED_VARS` order, any others after them sorted by name.
    Values are quoted with `shlex.quote` (a no-op for digits). Ends with a newline; empty
    string for an empty mapping. Raises ValueError on a name that is not a shell
    identifier, because eval-ing it would run something else.
    """
    order = {name: i for i, name in enumerate(RECOMMENDED_VARS)}
    names = sorted(env, key=lambda n: (order.get(n, len(order)), n))
    lines = []
    for name in names:
        if not _SHELL_NAME.match(name):
            raise ValueError(f"not a shell variable name: {name!r}")
        lines.append(f"export {name}={shlex.quote(env[name])}\n")
    return "".join(lines)


def prefix_line(env: Mapping[str, str]) -> str:
    """`NAME=VALUE NAME=VALUE` for `env` on one line, ending with a newline: the variables in
    the form to put before one command (`OMP_NUM_THREADS=1 … python job.py`), or to hand to
    `env` (`env $(oversub recommend --procs 2 --format prefix) python job.py`: a POSIX
    shell does not take assignments out of a command substitution, `env` does). Order as
    `export_lines`. Raises ValueError on a name that is not a shell identifier or a value
    that word splitting or globbing would change (thread counts never are)."""
    order = {name: i for i, name in enumerate(RECOMMENDED_VARS)}
    names = sorted(env, key=lambda n: (order.get(n, len(order)), n))
    words = []
    for name in names:
        if not _SHELL_NAME.match(name):
            raise ValueError(f"not a shell variable name: {name!r}")
        value = env[name]
        if not value or shlex.quote(value) != value:
            raise ValueError(f"not a value for a command line prefix: {name}={value!r}")
        words.append(f"{name}={value}")
    return " ".join(words) + "\n" if words else ""


def plan_prefix(p: Plan) -> str:
    """The `--format prefix` output: `prefix_line(p.env)`, the main processes' variables
    (as `plan_env`)."""
    return prefix_line(p.env)


def plan_env(p: Plan) -> str:
    """The `--format env` output: `export_lines(p.env)`, the main processes' variables only
    (workers get theirs from `worker_init_fn`; see `plan_dict`'s `worker_env`)."""
    return export_lines(p.env)
