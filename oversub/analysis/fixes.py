"""The fix of a thread-count finding: which knob to turn in which processes.

A fix is only ever for a pool that runs more threads than the target: a variable already at
the target is never asked for again. Each alternative is offered only for the pools it
controls (a variable per pool, `torch.set_num_threads` for PyTorch's pool, threadpoolctl for
BLAS and OpenMP runtimes). When no pool of the busy processes runs more than the target,
their busy threads are the application's own (task threads, executors), and the fix names
that knob instead.

Pure string building from `ProcessRates` and `analysis.poolsize`.
"""

from __future__ import annotations

from collections.abc import Sequence

from oversub.analysis.poolsize import all_idle, blamed, pool_sizes
from oversub.analysis.wording import join_and, pool_order, verb, who
from oversub.core.libraries import candidates_of
from oversub.core.pools import POOLS_BY_KEY, first_level
from oversub.core.results import ProcessRates
from oversub.core.runtimes import label as runtime_label


def _labels(keys: Sequence[str]) -> str:
    return join_and(POOLS_BY_KEY[k].label for k in pool_order(keys))


def limits_text(procs: Sequence[ProcessRates], n: int, threads: int | None = None) -> str:
    """What already limits the pools of `procs`: "OMP_NUM_THREADS=1, OpenBLAS at 1 thread,
    read live"; a pool above `threads` that sits idle while its process works says so
    ("OpenBLAS at 2 threads, read live, idle"); "no native pool" when none maps one."""
    parts: dict[str, None] = {}
    for p in procs:
        for s in pool_sizes(p, n) or ():
            if s.variable is not None:
                parts[f"{s.variable}={s.value}"] = None
            if s.source == "live":
                noun = verb(s.threads, "thread", "threads")
                idle = threads is not None and s.threads > threads and all_idle(p, s.key)
                label = f"{POOLS_BY_KEY[s.key].label} at {s.threads} {noun}, read live"
                parts[label + (", idle" if idle else "")] = None
    return ", ".join(parts) if parts else "no native pool"


def limited(procs: Sequence[ProcessRates], n: int, threads: int) -> str:
    """ "already run at most 1 thread", or "run at most 1 thread or sit idle" when a pool of
    `procs` above `threads` is idle (`poolsize.all_idle`): never "at most 1" of a pool that
    the same words say runs 2."""
    at_most = f"at most {threads} {verb(threads, 'thread', 'threads')}"
    idle = any(
        s.threads > threads and all_idle(p, s.key) for p in procs for s in pool_sizes(p, n) or ()
    )
    return f"run {at_most} or sit idle" if idle else f"already run {at_most}"


def app_thread_fix(n: int, workers: int, busy: int) -> str:
    """Size the application's own threads: workers x threads per worker <= N, for `workers`
    processes that run several threads among `busy` busy ones. With more busy processes than
    CPUs, fewer processes come first: no thread count fixes that. The example is computed
    from the numbers, so it keeps its own rule."""
    if busy > n or workers > n:
        fix = (
            f"run at most {n} busy {verb(n, 'process', 'processes')} at a time, with 1 busy "
            f"thread each (workers x threads per worker <= {n}, e.g. {n} "
            f"{verb(n, 'worker', 'workers')} x 1 thread)"
        )
    else:
        per = n // max(1, workers)
        fix = (
            f"run at most {n} busy {verb(n, 'thread', 'threads')} in all, workers x threads "
            f"per worker <= {n}"
        )
        if workers > 1:
            fix += f" (e.g. {workers} workers x {per} {verb(per, 'thread', 'threads')})"
    return fix + (
        ": dask LocalCluster(threads_per_worker=...), ThreadPoolExecutor(max_workers=...), "
        "joblib's n_jobs with the threading backend, or the application's own thread count"
    )


def library_levers(owner: str, pids: Sequence[int], threads: int, n: int, busy: int) -> str:
    """The levers for `owner`, a library oversub has no row for (no knob of its own known),
    in the processes `pids`, at `threads` per process among `busy` busy processes on `n`
    CPUs: fewer processes, or a CPU affinity mask per process set before it starts its pool
    (most runtimes size their pools from their affinity: docs/pools.md); then the variables
    its binary names, as unverified candidates (`probe.libvars`), never as the fix."""
    label = runtime_label(owner)
    fewer = f"run at most {n} busy {verb(n, 'process', 'processes')} at a time"
    each = f"{threads} {verb(threads, 'CPU', 'CPUs')}"
    mask = (
        f"start each with an affinity mask of its own {each} of the job's, before it starts "
        f"its pool (most runtimes size their pools from it): `taskset -c CPUS CMD` with "
        f"another CPUS for each process, os.sched_setaffinity(0, CPUS) first thing in each "
        f"worker (before it imports {label}), or the launcher's binding (srun "
        "--cpu-bind=cores, mpirun --bind-to core)"
    )
    levers = f"{fewer}, then {mask}" if busy > n else f"{fewer}, or {mask}"
    named = candidates_of(owner)
    unverified = (
        f"; its binary names {join_and(named)}: {verb(len(named), 'a variable', 'variables')} "
        "it may read, unverified (oversub has not measured what "
        f"{verb(len(named), 'it sizes', 'they size')})"
        if named
        else ""
    )
    return (
        f"{label} in {who(pids)} has no row in oversub's catalogue, so no knob of its own "
        f"is known; levers that work for any runtime: {levers}{unverified}"
    )


def thread_fix(procs: Sequence[ProcessRates], threads: int, n: int) -> str:
    """Name each pool of `procs` that runs more than `threads`, its variable and the value
    to set, then the in-code alternative for exactly those pools.

    Processes with the same pools to fix share one clause, so the usual case reads
    "2 processes (pids 11, 12) map GNU OpenMP (libgomp) with OMP_NUM_THREADS unset -> ...".
    Unknown pools or environment (another user's process) give the generic advice; pools
    already at most `threads` everywhere give `app_thread_fix`.
    """
    unset: dict[tuple[str, ...], list[int]] = {}
    too_high: dict[tuple[str, str, str], list[int]] = {}
    in_code: dict[tuple[str, int], list[int]] = {}
    code_only: dict[str, list[int]] = {}
    """Pools no variable reaches (ONNX Runtime): their call is the fix."""
    to_fix: set[str] = set()
    unknown = False
    for p in procs:
        if pool_sizes(p, n) is None:
            unknown = True
            continue
        sizes = blamed(p, n, threads)
        to_fix.update(s.key for s in sizes)
        defaults = [s.key for s in sizes if s.variable is None and POOLS_BY_KEY[s.key].variables]
        if defaults:
            unset.setdefault(tuple(pool_order(defaults)), []).append(p.pid)
        for s in sizes:
            if not POOLS_BY_KEY[s.key].variables:
                code_only.setdefault(s.key, []).append(p.pid)
        for s in sizes:
            if s.variable is None:
                continue
            if s.source == "live" and (first_level(s.value or "") or n) <= threads:
                # The variable asks for few threads but code raised the pool above it.
                in_code.setdefault((s.key, s.threads), []).append(p.pid)
            else:
                too_high.setdefault((POOLS_BY_KEY[s.key].label, s.variable, s.value or ""), [])
                too_high[(POOLS_BY_KEY[s.key].label, s.variable, s.value or "")].append(p.pid)
    clauses: list[str] = []
    for keys, pids in unset.items():
        variables = list(dict.fromkeys(POOLS_BY_KEY[k].variables[0] for k in keys))
        assignments = " and ".join(f"{v}={threads}" for v in variables)
        clauses.append(
            f"{who(sorted(pids))} {verb(len(pids), 'maps', 'map')} {_labels(keys)} with "
            f"{join_and(variables)} unset -> set {assignments} in {verb(len(pids), 'it', 'them')}"
        )
    for (label, var, value), pids in sorted(too_high.items()):
        clauses.append(
            f"{who(sorted(pids))} {verb(len(pids), 'runs', 'run')} {label} with "
            f"{var}={value}, more than {threads} -> lower {var} to {threads}"
        )
    for (key, live), pids in sorted(in_code.items()):
        clauses.append(
            f"{who(sorted(pids))} {verb(len(pids), 'sets', 'set')} {POOLS_BY_KEY[key].label} "
            f"to {live} threads in code, above its variable -> limit it to {threads} there"
        )
    for key, pids in sorted(code_only.items()):
        template = POOLS_BY_KEY[key].code_fix or ""
        clauses.append(
            f"{who(sorted(pids))} {verb(len(pids), 'runs', 'run')} {POOLS_BY_KEY[key].label}, "
            f"which no environment variable reaches -> {template.format(t=threads)}"
        )
    if not clauses:
        if unknown:
            return (
                f"set OMP_NUM_THREADS={threads} (and MKL_NUM_THREADS, OPENBLAS_NUM_THREADS; "
                f"`oversub recommend` prints them all) before the processes start, or cap "
                f"their pools in code: torch.set_num_threads({threads}), "
                f"threadpoolctl.threadpool_limits({threads})"
            )
        multi = sum(1 for p in procs if p.active_threads >= 2)
        return (
            f"their native pools {limited(procs, n, threads)} "
            f"({limits_text(procs, n, threads)}), so the busy "
            f"threads are the application's own: " + app_thread_fix(n, multi, len(procs))
        )
    return "; ".join(clauses) + _code_alternative(to_fix - set(code_only), threads)


def _code_alternative(keys: set[str], threads: int) -> str:
    """ ", or in code in each: torch.set_num_threads(1) (PyTorch's pool) and
    threadpoolctl.threadpool_limits(1) (OpenBLAS)": one call per family of pools."""
    calls: dict[str, list[str]] = {}
    for key in pool_order(keys):
        template = POOLS_BY_KEY[key].code_fix
        if template is not None:
            calls.setdefault(template.format(t=threads), []).append(key)
    if not calls:
        return ""
    parts = [f"{call} for {_labels(keys)}" for call, keys in calls.items()]
    return ", or in code in each, before the work starts: " + ", plus ".join(parts)
