"""`import oversub.auto`: `oversub run`'s cure from inside the program, for a job whose
command cannot be wrapped.

    import oversub.auto   # first, before numpy, torch & co

On import it measures this process's budget N, makes the plan as `oversub run --procs auto`
does (the launcher's count from torchrun, SLURM or MPI variables, else the tree's own count
as its processes start), sets the thread variables (never one already set) and installs the
hook of `oversub run` in this process (the package `_oversub_hook` of `oversub/hook/`,
loaded by the bare name the tree's processes import it by); its children get the plan and
the hook through OVERSUB_RUN_PLAN and PYTHONPATH. Under `oversub run` it does nothing: the
hook is there already. A library imported before it keeps its size unless threadpoolctl
reaches it (BLAS, OpenMP) or the hook resizes it (torch, pyarrow, ...). docs/run.md is the
reference.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from oversub.analysis.cureplan import PLAN_ENV, environment, make_cure
from oversub.analysis.launcher import launcher_set, plan_for_procs
from oversub.hook import DIRECTORY, load

if TYPE_CHECKING:
    from oversub.hook._oversub_hook.share import Hook

__all__ = ["HOOK"]


def _install() -> Hook:
    hook = load()
    active: Hook | None = hook.active()
    if active is not None:
        return active
    from oversub.probe.budget import read_budget

    tree = not launcher_set(os.environ)
    plan = plan_for_procs(read_budget(None), 1 if tree else "auto", 0, os.environ)
    cure = make_cure(plan, os.environ, tree=tree, threads=None)
    env = environment(cure, os.environ, hook_dir=DIRECTORY, top=os.getppid(), directory=None)
    for name in (*cure.variables.managed, PLAN_ENV, "PYTHONPATH"):
        os.environ[name] = env[name]
    installed: Hook = hook.install(hook.parse_plan(env[PLAN_ENV]), "oversub.auto")
    return installed


HOOK: Hook = _install()
"""The hook applied in this process (its role, threads, and what it did)."""
