"""The Python API: size a job's thread pools from inside the job.

    import oversub
    plan = oversub.recommend(procs="auto", workers=4)   # reads this process's real budget
    oversub.apply(plan)                                 # OMP_NUM_THREADS=T, torch, ...
    loader = DataLoader(ds, num_workers=4, worker_init_fn=oversub.worker_init_fn)

Call `apply` before numpy/torch create their pools where possible: OpenBLAS and OpenMP
read their variables once, when first loaded. Pools that are already loaded are resized
through threadpoolctl (a dependency: it finds every loaded OpenBLAS, MKL, BLIS and OpenMP
library, whoever loaded it) and torch.set_num_threads when the process has imported torch.
threadpoolctl is imported when a plan is applied (`apply`, `worker_init_fn`), and torch is
never imported here (only looked up in `sys.modules`); `import oversub` loads this module
only on first use of its names.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from oversub.analysis.launcher import plan_for_procs
from oversub.analysis.plans import synthetic_budget
from oversub.core.model import Budget, Plan
from oversub.core.pools import RECOMMENDED_VARS

__all__ = ["apply", "recommend", "worker_init_fn"]

# threadpoolctl's limiter sets the limits when it is created and restores the originals
# only through restore_original_limits() or a `with` block's exit. Holding the latest one
# here keeps that handle for the life of the process (and makes the lifetime explicit
# rather than relying on the object having no finaliser).
_threadpool_limiter: Any = None


def _budget(cpus: int | None, pid: int | None) -> Budget:
    if cpus is not None:
        if pid is not None:
            raise ValueError("give cpus or pid, not both: cpus replaces the measured budget")
        return synthetic_budget(cpus)
    # Imported here: the probe reads /proc and /sys, and `import oversub` must stay cheap.
    from oversub.probe.budget import read_budget

    return read_budget(pid)


def recommend(
    procs: int | str = "auto",
    workers: int = 0,
    *,
    cpus: int | None = None,
    pid: int | None = None,
) -> Plan:
    """A thread plan for `procs` processes with `workers` single-thread workers each.

    `procs="auto"` takes the count from the launcher (torchrun, SLURM, Open MPI, MPICH) in
    os.environ and raises oversub.core.errors.UsageError when none is set. The budget N is
    measured for `pid` (default: this process) unless `cpus` gives it.
    """
    _require_count("workers", workers)
    if cpus is not None:
        _require_count("cpus", cpus)
    if pid is not None:
        _require_count("pid", pid)
    if not isinstance(procs, str):
        _require_count("procs", procs)
    elif procs != "auto":
        if not procs.strip().isdigit():
            raise ValueError(f"procs must be a positive integer or 'auto', got {procs!r}")
        procs = int(procs)
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if isinstance(procs, int) and procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    return plan_for_procs(_budget(cpus, pid), procs, workers, os.environ)


def _require_count(name: str, value: object) -> None:
    """TypeError unless `value` is an int: True is not 1 process, 2.5 is not a count."""
    # bool is an int subclass, so it must be refused by name.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")


def _apply_threads(threads: int, env: Mapping[str, str]) -> None:
    global _threadpool_limiter
    # Children (and libraries loaded from now on) read the variables.
    os.environ.update(env)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    # A library that is already loaded read the variables when it loaded (NumPy's OpenBLAS
    # in a spawned worker, an OpenMP runtime another extension pulled in): only
    # threadpoolctl can still resize it. It looks at the loaded libraries themselves, so it
    # runs whatever was imported; imported here so that `import oversub` stays cheap.
    try:
        threadpoolctl = importlib.import_module("threadpoolctl")
    except ImportError:
        warnings.warn(
            "oversub.apply: threadpoolctl is not installed (it is a dependency of oversub), "
            "so BLAS/OpenMP pools that are already loaded keep their size; only the "
            "environment variables were set",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    _threadpool_limiter = threadpoolctl.threadpool_limits(limits=threads)


def apply(plan: Plan, *, role: Literal["main", "worker"] = "main") -> int:
    """Apply `plan` to this process and its future children; returns the threads set.

    role "main": T threads (`plan.env`). role "worker": 1 thread (`plan.worker_env`, or
    every variable at 1 when the plan has no workers). Sets the thread variables in
    os.environ, limits every BLAS/OpenMP pool already loaded with
    threadpoolctl.threadpool_limits, and calls torch.set_num_threads when torch is imported.
    """
    if role == "main":
        threads, env = plan.threads_per_process, plan.env
    elif role == "worker":
        threads = 1
        env = plan.worker_env or {name: "1" for name in RECOMMENDED_VARS}
    else:
        raise ValueError(f"role must be 'main' or 'worker', got {role!r}")
    _apply_threads(threads, env)
    return threads


def worker_init_fn(worker_id: int) -> None:
    """One thread for this worker: pass as `DataLoader(worker_init_fn=oversub.worker_init_fn)`.

    torch already sets its own pool to 1 in DataLoader workers, but not OpenBLAS/MKL/OpenMP
    pools (NumPy's keeps all N threads); this sets every thread variable to 1 and resizes
    every loaded pool with threadpoolctl.
    """
    del worker_id  # the same for every worker
    _apply_threads(1, {name: "1" for name in RECOMMENDED_VARS})
