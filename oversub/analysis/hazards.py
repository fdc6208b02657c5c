"""Structural hazards: risks visible in the shape of the tree rather than in its waiting.

Default-sized native pools in several processes, children forked from a multi-threaded
parent (and the libgomp hang that follows an OpenMP region), and busy orphans. Each
function returns the findings of one rule of `verdict.RULES`; `verdict.assess` calls them.
"""

from __future__ import annotations

from oversub.analysis.recommend import threads_for
from oversub.analysis.wording import (
    join_and,
    pid_list,
    pids_of,
    pool_order,
    rounded,
    thread_fix,
    uncontrolled_pools,
    verb,
    who,
)
from oversub.model import Severity, Thresholds, Verdict
from oversub.pools import POOLS_BY_KEY, is_openmp
from oversub.results import Finding, Interval, ProcessRates

__all__ = ["fork_findings", "orphan_finding", "pool_default_finding"]

IDLE_CPU_PERCENT = 1.0
"""A hung child uses about no CPU: below this percentage of one CPU."""


def pool_default_finding(interval: Interval, skip_pids: frozenset[int]) -> Finding | None:
    """pool-default: >= 2 processes map a pool no known variable sizes, one ran >= 2 threads.

    In-process settings (torch.set_num_threads, threadpoolctl) are invisible from outside, so
    only a process seen running two active threads at once proves the default is live.
    None when the processes are all in `skip_pids` (oversubscribed-pools already names them).
    """
    n = interval.vcpus
    mapped = [p for p in interval.processes if uncontrolled_pools(p)]
    if len(mapped) < 2 or not any(p.active_threads >= 2 for p in mapped):
        return None
    pids = pids_of(mapped)
    if set(pids) <= skip_pids:
        return None
    keys = pool_order(k for p in mapped for k in uncontrolled_pools(p))
    labels = join_and(POOLS_BY_KEY[k].label for k in keys)
    variables = join_and(dict.fromkeys(POOLS_BY_KEY[k].variables[0] for k in keys))
    k = len(mapped)
    threads = threads_for(n, k)
    return Finding(
        rule="pool-default",
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"{k} processes ({pid_list(pids)}) map {labels} with {variables} unset; each "
        f"sizes its pool to all {n} CPUs, so {k * n} threads can compete for {n}.",
        pids=pids,
        evidence={
            "processes": k,
            "vcpus": n,
            "pools": ",".join(keys),
            "active_threads_max": max(p.active_threads for p in mapped),
            "threads_per_process": threads,
        },
        fix=f"Size the pools before the processes start: {thread_fix(mapped, threads)}.",
    )


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
        if parent is None or parent.pid == child.pid or parent.threads < 2:
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
        if idle_openmp and child.wait == "futex-private":
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
                rule="fork-hang",
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
                    "parent_threads": max(by_pid[p.ppid].threads for p in group),
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
                rule="fork-after-threads",
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


def orphan_finding(interval: Interval, th: Thresholds) -> Finding | None:
    """orphan: a non-root process whose parent is not in the tree, using >= active_cpu.

    Exited processes are not skipped: in one interval they have no CPU anyway, and over a
    whole run (where everything has exited once the target did) a busy orphan still counts.
    """
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
        rule="orphan",
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
