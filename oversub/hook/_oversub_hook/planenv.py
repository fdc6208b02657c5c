"""The plan every process of the tree reads: OVERSUB_RUN_PLAN (JSON, written by
`analysis.cureplan.hook_plan` and by each hooked process for its children), checked field by
field, and its bounds."""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

PLAN_ENV = "OVERSUB_RUN_PLAN"
"""The variable that carries the plan (JSON) to every process of the tree."""
PLAN_VERSION = 1
MAX_PLAN_BYTES = 65536
"""A longer OVERSUB_RUN_PLAN is refused: it is no plan oversub wrote."""
MAX_VALUE = 65536
"""Thread counts above this are refused (the budget's own bound)."""


def parse_plan(text: str) -> dict[str, Any]:
    """The plan of OVERSUB_RUN_PLAN, checked field by field; ValueError when it is not one.

    n: the budget N; t: the plan's threads (None in the tree's own count); w: workers per
    process; top: the pid of the process that started the tree's root; set: the managed
    variables and their values; dir: the records' directory; pb and pp: the budget of the
    process that wrote this plan for its children, and its pid; role: "worker" for a
    DataLoader worker its parent starts."""
    if len(text) > MAX_PLAN_BYTES:
        raise ValueError(f"{PLAN_ENV} is longer than {MAX_PLAN_BYTES} characters")
    plan = json.loads(text)
    if not isinstance(plan, dict) or plan.get("v") != PLAN_VERSION:
        raise ValueError(f"{PLAN_ENV} is not a version {PLAN_VERSION} plan")
    for key, low in (("n", 1), ("w", 0), ("top", 0)):
        _count(plan, key, low, required=True)
    for key, low in (("t", 1), ("pb", 1), ("pp", 1)):
        _count(plan, key, low, required=False)
    variables = plan.get("set")
    if not isinstance(variables, dict) or len(variables) > 64:
        raise ValueError(f"{PLAN_ENV}: 'set' is not a table of variables")
    for name, value in variables.items():
        if not (isinstance(name, str) and isinstance(value, str) and value.isdigit()):
            raise ValueError(f"{PLAN_ENV}: 'set' holds {name!r}")
    for key in ("dir", "role"):
        if plan.get(key) is not None and not isinstance(plan[key], str):
            raise ValueError(f"{PLAN_ENV}: {key!r} is not a string")
    if plan.get("role") not in (None, "worker"):
        raise ValueError(f"{PLAN_ENV}: unknown role {plan['role']!r}")
    return plan


def _count(plan: dict[str, Any], key: str, low: int, *, required: bool) -> None:
    value = plan.get(key)
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_VALUE:
        raise ValueError(f"{PLAN_ENV}: {key!r} is not a whole number >= {low}")
