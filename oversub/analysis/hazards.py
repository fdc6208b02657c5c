"""Structural hazards: risks visible in the shape of the tree rather than in its waiting.

Default-sized native pools in several processes, children forked from a multi-threaded
parent (and the libgomp hang that follows an OpenMP region), and busy orphans. Each
function returns the findings of one rule of `rules.RUNTIME_RULES`; `verdict.assess` calls them.
"""

from __future__ import annotations

from collections.abc import Sequence

from oversub.analysis.fixes import thread_fix
from oversub.analysis.plans import threads_for
from oversub.analysis.poolsize import PoolSize, latent_pools
from oversub.analysis.rates import BUSY_DEMAND
from oversub.analysis.wording import (
    join_and,
    pid_list,
    pids_of,
    pool_order,
    rounded,
    verb,
    who,
)
from oversub.core.names import Severity, Verdict, WaitKind
from oversub.core.plural import count
from oversub.core.pools import POOLS_BY_KEY, is_openmp
from oversub.core.results import Finding, Interval, ProcessRates
from oversub.core.rules import Rule
from oversub.core.thresholds import Thresholds

IDLE_CPU_PERCENT = 1.0
"""A hung child uses about no CPU: below this percentage of one CPU."""


def pool_default_finding(interval: Interval, skip_pids: frozenset[int]) -> Finding | None:
    """pool-default: multi-thread pools that exist in >= 2 processes add up to more than N.

    Latent oversubscription, named before the work starts: two idle processes that imported
    NumPy each hold an OpenBLAS pool of N threads. Per process, only pools that exist count
    (`poolsize.latent_pools`: a live size read from memory, or threads that ran or exist),
    and only the processes that can run them at once (`at_once`). None when fewer than two
    count, when their pools fit N, or when oversubscribed-pools already names them all.
    """
    n = interval.vcpus
    # In one interval a process that exited is gone; over a whole run each one lived.
    present = [p for p in interval.processes if not (p.exited and p.seconds is None)]
    holders = [p for p in present if latent_pools(p, n)]
    sharing = at_once(holders, present, interval.totals.busy_processes)
    if len(sharing) < 2:
        return None
    sizes = {p.pid: latent_pools(p, n) for p in sharing}
    total = sum(found[0].threads for found in sizes.values())
    pids = pids_of(sharing)
    if total <= n or set(pids) <= skip_pids:
        return None
    keys = pool_order(s.key for found in sizes.values() for s in found)
    live = [
        f"pid {pid} {found[0].threads}"
        for pid, found in sorted(sizes.items())
        if found[0].source == "live"
    ]
    k = len(sharing)
    threads = threads_for(n, k)
    idle = not any(busy(p) for p in sharing)
    how = "idle now, but " if idle else ""
    message = (
        f"{who(pids)} hold multi-thread {join_and(POOLS_BY_KEY[key].label for key in keys)} "
        f"pools: {_sizes_text(sizes)}; {how}when they run at once, {total} threads compete "
        f"for {count(n, 'CPU')}."
    )
    return Finding(
        rule=Rule.POOL_DEFAULT,
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=message,
        pids=pids,
        evidence={
            "processes": k,
            "vcpus": n,
            "pools": ",".join(keys),
            "pool_threads": total,
            "threads": sum(p.threads for p in sharing),
            "live": "; ".join(live) or None,
            "active_threads_max": max(p.active_threads for p in sharing),
            "threads_per_process": threads,
        },
        fix=f"Size the pools to {threads} {verb(threads, 'thread', 'threads')} per process "
        f"({n} CPUs / {k}): {thread_fix(sharing, threads, n)}.",
    )


def _sizes_text(sizes: dict[int, list[PoolSize]]) -> str:
    """ "OpenBLAS 2 threads in pids 11, 12 (read live)": each process's largest pool, with
    what says its size, grouped by identical phrase."""
    groups: dict[tuple[str, str], list[int]] = {}
    for pid, found in sorted(sizes.items()):
        s = found[0]
        kind = POOLS_BY_KEY[s.key]
        if s.source == "live":
            how = "read live"
        elif s.source == "variable":
            how = f"{s.variable}={s.value}"
        elif kind.variables:
            how = f"{kind.variables[0]} unset"
        else:  # no variable reaches it (ONNX Runtime): its default, set in code only
            how = "its default"
        groups.setdefault((f"{kind.label} {s.threads} threads", how), []).append(pid)
    return ", ".join(f"{size} in {pid_list(pids)} ({how})" for (size, how), pids in groups.items())


def busy(p: ProcessRates) -> bool:
    """The process ran work in the interval (a share of a CPU), as opposed to sitting idle."""
    return p.demand >= BUSY_DEMAND or p.active_threads >= 1


def at_once(
    procs: Sequence[ProcessRates], tree: Sequence[ProcessRates], busy_processes: int
) -> list[ProcessRates]:
    """Those of `procs` that can run their pools at the same time: the busy ones when the
    tree does some work (an idle parent or resource tracker waiting while workers compute
    does not compete with them), all of them when the whole tree is idle (peers whose pools
    will start together when work arrives)."""
    working = [p for p in procs if busy(p)]
    if not any(busy(p) for p in tree):
        return list(procs)
    if busy_processes and len(working) > busy_processes:
        # Over a run, workers that came and went are not all busy at once.
        working = sorted(working, key=lambda p: -p.demand)[:busy_processes]
    return working


def _observed(p: ProcessRates, interval: Interval) -> float:
    return interval.seconds if p.seconds is None else min(p.seconds, interval.seconds)


def fork_findings(interval: Interval, th: Thresholds) -> list[Finding]:
    """fork-hang and fork-after-threads: children sharing the cmdline of a threaded parent.

    Plain fork keeps the parent's command line; spawn and forkserver children do not. A
    forked child that maps OpenMP, runs one thread, uses < 1% CPU over at least
    `th.idle_seconds` and waits in a private futex (`ProcessRates.wait`) is the libgomp hang
    (pytorch issue 41197), critical; with its wait unreadable it is a warning; one waiting
    in a read or a shared semaphore is an idle worker, reported as a hazard only.
    """
    # A reused pid appears twice (the exited process and the new one): the live one is the
    # parent of anything that runs now.
    by_pid = {p.pid: p for p in sorted(interval.processes, key=lambda p: not p.exited)}
    hung: list[ProcessRates] = []
    suspect: list[ProcessRates] = []
    forked: list[ProcessRates] = []
    for child in interval.processes:
        parent = by_pid.get(child.ppid)
        # Plain fork keeps the parent's command line; spawn and forkserver children do not.
        if parent is None or parent.pid == child.pid or _threads_at_fork(child, parent) < 2:
            continue
        if child.cmdline != parent.cmdline:
            continue
        idle_openmp = (
            not child.exited
            and child.pools is not None
            and is_openmp(child.pools)
            and child.threads == 1
            and child.cpu_percent < IDLE_CPU_PERCENT
            # Idle for as long as it was watched: a child forked near the end of a long run
            # has not yet sat idle for the whole run.
            and _observed(child, interval) >= th.idle_seconds
        )
        # An idle pool worker waits for work in a pipe read or a shared semaphore; the hang
        # waits in a private futex that no other thread of its one-thread process can wake.
        if idle_openmp and child.wait == WaitKind.FUTEX_PRIVATE:
            hung.append(child)
        elif idle_openmp and child.wait is None:
            suspect.append(child)
        else:
            forked.append(child)
    found: list[Finding] = []
    for group, certain in ((hung, True), (suspect, False)):
        if not group:
            continue
        pids = pids_of(group)
        idle = min(_observed(p, interval) for p in group)
        how = (
            "and wait on a private futex nothing can wake"
            if certain
            else "(their wait could not be read, so this may also be an idle worker)"
        )
        found.append(
            Finding(
                rule=Rule.FORK_HANG,
                severity=Severity.CRITICAL if certain else Severity.WARNING,
                verdict=Verdict.AT_RISK,
                message=f"{who(pids)} forked from a multi-threaded parent "
                f"{verb(len(pids), 'maps', 'map')} OpenMP and sat idle on one thread for "
                f"{idle:.0f} s {how}: the hang of forking after an OpenMP region "
                "(pytorch issue 41197).",
                pids=pids,
                evidence={
                    "children": len(group),
                    "seconds": rounded(idle, 1),
                    "cpu_percent_max": rounded(max(p.cpu_percent for p in group), 2),
                    "parent_threads": max(_threads_at_fork(p, by_pid[p.ppid]) for p in group),
                    "wait": group[0].wait,
                },
                fix="Start workers with spawn or forkserver (torch.multiprocessing."
                'set_start_method("spawn")), or keep the parent at one thread before forking '
                "(torch.set_num_threads(1) or OMP_NUM_THREADS=1).",
            )
        )
    if forked:
        pids = pids_of(forked)
        parents = sorted({p.ppid for p in forked})
        found.append(
            Finding(
                rule=Rule.FORK_AFTER_THREADS,
                severity=Severity.INFO,
                verdict=Verdict.OK,
                message=f"{who(pids)} {verb(len(pids), 'was', 'were')} forked from a "
                f"parent running several threads ({pid_list(parents)}); a fork copies one "
                "thread and any lock another held.",
                pids=pids,
                evidence={"children": len(forked), "parents": len(parents)},
                fix="Prefer the spawn or forkserver start method when the parent runs threads.",
            )
        )
    return found


def _threads_at_fork(child: ProcessRates, parent: ProcessRates) -> int:
    """The threads `parent` ran when it forked `child`: those started before the child (the
    sampler compares thread start times), else, unknown, the threads it runs now."""
    if child.parent_threads_at_start is not None:
        return child.parent_threads_at_start
    return parent.threads


def orphan_finding(interval: Interval, th: Thresholds) -> Finding | None:
    """orphan: a non-root process whose parent is not in the tree, using >= active_cpu.

    Exited processes are not skipped: in one interval they have no CPU anyway, and over a
    whole run (where everything has exited once the target did) a busy orphan still counts.
    """
    if interval.root_pid == 0:
        # A cgroup's processes have no root: those started from outside it (by slurmstepd,
        # containerd, systemd) all have a parent that is not a member, and none is orphaned.
        return None
    pids = {p.pid for p in interval.processes}
    orphans = [
        p
        for p in interval.processes
        if p.pid != interval.root_pid
        and p.ppid not in pids
        and p.cpu_percent >= th.active_cpu * 100.0
    ]
    if not orphans:
        return None
    found = pids_of(orphans)
    return Finding(
        rule=Rule.ORPHAN,
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"{who(found)} kept using CPU after "
        f"{verb(len(found), 'its', 'their')} parent exited.",
        pids=found,
        evidence={
            "processes": len(orphans),
            "cpu_percent": rounded(sum(p.cpu_percent for p in orphans), 1),
        },
        fix="Make the parent wait for its children (join/terminate workers on exit, "
        "a context manager around the pool), or kill the leftovers.",
    )
