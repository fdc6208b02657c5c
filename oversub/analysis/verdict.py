"""The verdict: which rules an interval (or a whole run) breaks, with evidence and a fix.

Two measured quantities decide most of it (see SIGNALS.md), with N = `interval.vcpus`:

- over: the tree's demand D (average runnable threads) exceeds N by more than `margin`
  (D > N * (1 + margin)); demand exactly N is within budget;
- waiting: the tree's threads spent more than `delay_ratio` of their runnable time
  waiting for a CPU (run delay ratio > delay_ratio).

D > N means the tree asks for more CPUs than it may use (self-inflicted); waiting with D <= N
means something outside the tree takes the CPUs. The other rules are hazards seen in the
structure of the tree (pools at their default size, fork after threads, orphans).

Every number comes from `Thresholds`. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from oversub.analysis.recommend import threads_for
from oversub.model import (
    Assessment,
    Finding,
    Interval,
    ProcessRates,
    Severity,
    Thresholds,
    Verdict,
)
from oversub.pools import POOL_KINDS, POOLS_BY_KEY, controlling_value, is_openmp

__all__ = ["RULES", "assess"]

RULES: Mapping[str, str] = {
    "oversubscribed-pools": "Demand exceeds the CPUs and processes run multi-thread native pools",
    "oversubscribed-processes": "More single-thread processes than CPUs keep demand above them",
    "starved-quota": "The cgroup CPU quota throttles the tree",
    "starved-outside": "Other processes or hypervisor steal take the CPUs the tree waits for",
    "starved-unattributed": "The tree's threads wait for CPUs and no cause is visible",
    "busy-threads-exceed": "More threads are busy than there are CPUs",
    "pool-default": "Several processes map a native pool sized by default to all CPUs",
    "fork-hang": "A child forked after an OpenMP region sits idle: the libgomp fork hang",
    "fork-after-threads": "Processes forked from a multi-threaded parent",
    "orphan": "A busy process whose parent has exited",
    "no-schedstat": "Run delay is unavailable, so oversubscription cannot be measured",
}
"""Rule id -> one-line description, in report order. Renderers emit one testcase per rule."""

_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
_RULE_ORDER = {rule: i for i, rule in enumerate(RULES)}
_CONTENDING_DEMAND = 0.5
"""A process keeping at least half a thread runnable on average counts as one of the M
processes that share the CPUs."""
_IDLE_CPU_PERCENT = 1.0
"""A hung child uses about no CPU: below this percentage of one CPU."""

Evidence = dict[str, float | int | str | None]


def _pids(procs: Iterable[ProcessRates]) -> tuple[int, ...]:
    return tuple(sorted(p.pid for p in procs))


def _pid_list(pids: Sequence[int]) -> str:
    word = "pid" if len(pids) == 1 else "pids"
    return f"{word} {', '.join(str(p) for p in pids)}"


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _base_evidence(interval: Interval) -> Evidence:
    t = interval.totals
    n = interval.vcpus
    return {
        "demand": _round(t.demand),
        "vcpus": n,
        "demand_per_vcpu": _round(t.demand / n),
        "run_delay_ratio": _round(t.run_delay_ratio),
        "involuntary_ctx_per_cpu_s": _round(t.involuntary_ctx_per_cpu_s, 1),
        "active_threads": t.active_threads,
    }


def _uncontrolled_pools(p: ProcessRates) -> tuple[str, ...]:
    """Pools `p` maps that no variable sizes (they use all CPUs); () when unknown."""
    if not p.pools or p.thread_env is None:
        return ()
    env = p.thread_env
    return tuple(
        k
        for k in p.pools
        if k in POOLS_BY_KEY and POOLS_BY_KEY[k].variables and controlling_value(k, env) is None
    )


def _pool_order(keys: Iterable[str]) -> list[str]:
    """Pool keys in the order of POOL_KINDS (OpenMP runtimes first), without duplicates."""
    wanted = set(keys)
    return [k.key for k in POOL_KINDS if k.key in wanted]


def _who(pids: Sequence[int]) -> str:
    """ "2 processes (pids 11, 12)" or "1 process (pid 11)"."""
    return f"{_processes(len(pids))} ({_pid_list(pids)})"


def _verb(count: int, singular: str, plural: str) -> str:
    return singular if count == 1 else plural


def _thread_fix(procs: Sequence[ProcessRates], threads: int) -> str:
    """Name each mapped pool, its variable and the value to set, for `procs`.

    Processes with the same unsized pools share one clause, so the usual case reads
    "2 processes (pids 11, 12) map GNU OpenMP (libgomp) with OMP_NUM_THREADS unset -> ...".
    """
    unset: dict[int, tuple[str, ...]] = {}
    too_high: dict[tuple[str, str, str], list[int]] = {}
    for p in procs:
        if _uncontrolled_pools(p):
            unset[p.pid] = tuple(_pool_order(_uncontrolled_pools(p)))
        if p.pools and p.thread_env is not None:
            for key in p.pools:
                ctl = controlling_value(key, p.thread_env)
                if ctl is not None and not _at_most(ctl[1], threads):
                    too_high.setdefault((POOLS_BY_KEY[key].label, *ctl), []).append(p.pid)
    by_pools: dict[tuple[str, ...], list[int]] = {}
    for pid, pools in unset.items():
        by_pools.setdefault(pools, []).append(pid)
    clauses: list[str] = []
    for keys, pids in by_pools.items():
        labels = _and(POOLS_BY_KEY[k].label for k in keys)
        variables = list(dict.fromkeys(POOLS_BY_KEY[k].variables[0] for k in keys))
        assignments = " and ".join(f"{v}={threads}" for v in variables)
        clauses.append(
            f"{_who(sorted(pids))} {_verb(len(pids), 'maps', 'map')} {labels} with "
            f"{_and(variables)} unset -> set {assignments} in {_verb(len(pids), 'it', 'them')}"
        )
    for (label, var, value), pids in sorted(too_high.items()):
        clauses.append(
            f"{_who(sorted(pids))} {_verb(len(pids), 'runs', 'run')} {label} with "
            f"{var}={value}, more than {threads} -> lower {var} to {threads}"
        )
    if not clauses:
        return (
            f"give each process at most {threads} thread(s): set OMP_NUM_THREADS={threads} "
            f"(and MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) before it starts, or cap its pools "
            f"in code (torch.set_num_threads({threads}), threadpoolctl)"
        )
    fix = "; ".join(clauses)
    if any(p.pools and "torch" in p.pools for p in procs):
        fix += f", or call torch.set_num_threads({threads}) in each"
    return fix


def _and(items: Iterable[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    words = list(items)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _at_most(value: str, limit: int) -> bool:
    """True when a thread variable's value asks for at most `limit` threads.

    OMP_NUM_THREADS may be a nested list ("4,2"): the first level sizes the team.
    """
    try:
        return int(value.split(",")[0].strip()) <= limit
    except ValueError:
        return False


def _oversubscribed(interval: Interval, th: Thresholds) -> Finding:
    n = interval.vcpus
    t = interval.totals
    contending = [p for p in interval.processes if p.demand >= _CONTENDING_DEMAND]
    if not contending:  # many small processes: all of them share the CPUs
        contending = [p for p in interval.processes if p.demand > 0]
    multi = [p for p in contending if p.active_threads >= 2]
    m = max(1, len(contending))
    evidence = _base_evidence(interval) | {
        "processes": len(contending),
        "multi_thread_processes": len(multi),
        "throttled_ratio": _round(interval.host.throttled_ratio),
    }
    head = f"The tree keeps {t.demand:.1f} threads runnable on {n} CPUs ({t.demand / n:.1f}x); "
    if multi:
        threads = threads_for(n, m)
        pools = _pool_order(k for p in contending for k in (p.pools or ()))
        evidence |= {"threads_per_process": threads, "pools": ",".join(pools) or None}
        who = f"each of the {m} busy processes" if m > 1 else "the busy process"
        fix = f"Give {who} {threads} thread(s) ({n} CPUs / {m}): "
        fix += _thread_fix(contending, threads)
        if m > n:
            fix += f"; and run at most {n} busy process{'es' if n > 1 else ''} at a time"
        return Finding(
            rule="oversubscribed-pools",
            severity=Severity.CRITICAL,
            verdict=Verdict.OVERSUBSCRIBED,
            message=head + f"{_processes(len(multi))} {_verb(len(multi), 'runs', 'run')} "
            "multi-thread native pools whose "
            "waiting threads spin, which costs multiples (2-23x measured).",
            pids=_pids(contending),
            evidence=evidence,
            fix=fix + ".",
        )
    return Finding(
        rule="oversubscribed-processes",
        severity=Severity.WARNING,
        verdict=Verdict.OVERSUBSCRIBED,
        message=head + f"they are {len(contending)} single-thread processes sharing {n} CPUs, "
        "which costs little (1.0-1.2x measured).",
        pids=_pids(contending),
        evidence=evidence,
        fix=f"Run at most {n} busy process{'es' if n > 1 else ''} at a time "
        f"(e.g. Pool(processes={n})); "
        "fewer threads per process will not help, they already run one each.",
    )


def _starved(interval: Interval, th: Thresholds, waiting: bool) -> list[Finding]:
    n = interval.vcpus
    t = interval.totals
    h = interval.host
    found: list[Finding] = []
    throttled_ratio = h.throttled_ratio
    quota = throttled_ratio is not None and throttled_ratio >= th.throttle_ratio
    if throttled_ratio is not None and quota:
        throttled = "" if h.throttled_s is None else f" ({h.throttled_s:.1f} s throttled)"
        found.append(
            Finding(
                rule="starved-quota",
                severity=Severity.WARNING,
                verdict=Verdict.STARVED,
                message=f"The cgroup CPU quota throttled the tree in {throttled_ratio:.0%} of "
                f"its periods{throttled} while it kept {t.demand:.1f} threads runnable.",
                pids=(interval.root_pid,),
                evidence=_base_evidence(interval)
                | {"throttled_ratio": _round(throttled_ratio), "throttled_s": h.throttled_s},
                fix="Raise the cgroup CPU quota, or keep the tree's busy threads within it: at "
                f"most {n} (the quota rounded down; a quota under one CPU throttles even one "
                "busy thread).",
            )
        )
    if not waiting:
        return found
    ratio = t.run_delay_ratio or 0.0
    outside = h.outside_cpus is not None and h.outside_cpus >= th.outside_cpu
    steal = h.steal_cpus is not None and h.steal_cpus >= th.outside_cpu
    evidence = _base_evidence(interval) | {
        "outside_cpus": _round(h.outside_cpus),
        "steal_cpus": _round(h.steal_cpus),
        "psi_some": _round(h.psi_some),
    }
    if outside or steal:
        causes = []
        if outside:
            causes.append(f"other processes used {h.outside_cpus:.1f} CPUs")
        if steal:
            causes.append(f"the hypervisor stole {h.steal_cpus:.1f} CPUs (hypervisor steal)")
        found.append(
            Finding(
                rule="starved-outside",
                severity=Severity.WARNING,
                verdict=Verdict.STARVED,
                message=f"{_sentence(' and '.join(causes))}; the tree's threads waited "
                f"{ratio:.0%} of their runnable time.",
                pids=(interval.root_pid,),
                evidence=evidence,
                fix="Move the other load elsewhere, or pin the job and the other load to "
                "separate CPUs (taskset -c), or accept the slowdown"
                + ("; steal comes from the host, ask for dedicated vCPUs." if steal else "."),
            )
        )
    elif not quota:
        found.append(
            Finding(
                rule="starved-unattributed",
                severity=Severity.INFO,
                verdict=Verdict.STARVED,
                message=f"The tree's threads waited {ratio:.0%} of their runnable time with "
                f"{t.demand:.1f} runnable on {n} CPUs, and no other load, steal or throttling "
                "was measured.",
                pids=(interval.root_pid,),
                evidence=evidence,
                fix="Check what else shares these CPUs (other containers, real-time or niced "
                "tasks, interrupts) and whether the CPU budget N is right.",
            )
        )
    return found


def _busy_threads(interval: Interval) -> Finding:
    n = interval.vcpus
    t = interval.totals
    busy = [p for p in interval.processes if p.active_threads > 0]
    m = max(1, len(busy))
    threads = threads_for(n, m)
    return Finding(
        rule="busy-threads-exceed",
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"{t.active_threads} threads were busy on {n} CPUs; they have not waited yet, "
        "but when they run at once they will contend.",
        pids=_pids(busy),
        evidence=_base_evidence(interval)
        | {"processes": len(busy), "threads_per_process": threads},
        fix=f"Keep busy threads at most {n}: {threads} thread(s) in "
        + (f"each of the {m} busy processes; " if m > 1 else "the busy process; ")
        + _thread_fix(busy, threads)
        + ".",
    )


def _pool_default(interval: Interval, skip_pids: frozenset[int]) -> Finding | None:
    n = interval.vcpus
    mapped = [p for p in interval.processes if _uncontrolled_pools(p)]
    if len(mapped) < 2 or not any(p.active_threads >= 2 for p in mapped):
        return None
    pids = _pids(mapped)
    if set(pids) <= skip_pids:
        return None
    keys = _pool_order(k for p in mapped for k in _uncontrolled_pools(p))
    labels = _and(POOLS_BY_KEY[k].label for k in keys)
    variables = _and(dict.fromkeys(POOLS_BY_KEY[k].variables[0] for k in keys))
    k = len(mapped)
    threads = threads_for(n, k)
    return Finding(
        rule="pool-default",
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"{k} processes ({_pid_list(pids)}) map {labels} with {variables} unset; each "
        f"sizes its pool to all {n} CPUs, so {k * n} threads can compete for {n}.",
        pids=pids,
        evidence={
            "processes": k,
            "vcpus": n,
            "pools": ",".join(keys),
            "active_threads_max": max(p.active_threads for p in mapped),
            "threads_per_process": threads,
        },
        fix=f"Size the pools before the processes start: {_thread_fix(mapped, threads)}.",
    )


def _forks(interval: Interval, th: Thresholds) -> list[Finding]:
    by_pid = {p.pid: p for p in interval.processes}
    hung: list[ProcessRates] = []
    forked: list[ProcessRates] = []
    for child in interval.processes:
        parent = by_pid.get(child.ppid)
        # Plain fork keeps the parent's command line; spawn and forkserver children do not.
        if parent is None or parent.pid == child.pid or parent.threads < 2:
            continue
        if child.cmdline != parent.cmdline:
            continue
        if (
            not child.exited
            and child.pools is not None
            and is_openmp(child.pools)
            and child.threads == 1
            and child.cpu_percent < _IDLE_CPU_PERCENT
            and interval.seconds >= th.idle_seconds
        ):
            hung.append(child)
        else:
            forked.append(child)
    found: list[Finding] = []
    if hung:
        pids = _pids(hung)
        found.append(
            Finding(
                rule="fork-hang",
                severity=Severity.CRITICAL,
                verdict=Verdict.AT_RISK,
                message=f"{_who(pids)} forked from a multi-threaded parent "
                f"{_verb(len(pids), 'maps', 'map')} OpenMP and sat idle on one thread for "
                f"{interval.seconds:.0f} s: the hang of forking after an OpenMP region "
                "(pytorch issue 41197).",
                pids=pids,
                evidence={
                    "children": len(hung),
                    "seconds": _round(interval.seconds, 1),
                    "cpu_percent_max": _round(max(p.cpu_percent for p in hung), 2),
                    "parent_threads": max(by_pid[p.ppid].threads for p in hung),
                },
                fix="Start workers with spawn or forkserver (torch.multiprocessing."
                'set_start_method("spawn")), or keep the parent at one thread before forking '
                "(torch.set_num_threads(1) or OMP_NUM_THREADS=1).",
            )
        )
    if forked:
        pids = _pids(forked)
        parents = sorted({p.ppid for p in forked})
        found.append(
            Finding(
                rule="fork-after-threads",
                severity=Severity.INFO,
                verdict=Verdict.OK,
                message=f"{_who(pids)} {_verb(len(pids), 'was', 'were')} forked from a "
                f"parent running several threads ({_pid_list(parents)}); a fork copies one "
                "thread and any lock another held.",
                pids=pids,
                evidence={"children": len(forked), "parents": len(parents)},
                fix="Prefer the spawn or forkserver start method when the parent runs threads.",
            )
        )
    return found


def _orphans(interval: Interval, th: Thresholds) -> Finding | None:
    pids = {p.pid for p in interval.processes}
    orphans = [
        p
        for p in interval.processes
        if p.pid != interval.root_pid
        and p.ppid not in pids
        and not p.exited
        and p.cpu_percent >= th.active_cpu * 100.0
    ]
    if not orphans:
        return None
    found = _pids(orphans)
    return Finding(
        rule="orphan",
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"{_who(found)} kept using CPU after "
        f"{_verb(len(found), 'its', 'their')} parent exited.",
        pids=found,
        evidence={
            "processes": len(orphans),
            "cpu_percent": _round(sum(p.cpu_percent for p in orphans), 1),
        },
        fix="Make the parent wait for its children (join/terminate workers on exit, "
        "a context manager around the pool), or kill the leftovers.",
    )


def _no_schedstat() -> Finding:
    return Finding(
        rule="no-schedstat",
        severity=Severity.INFO,
        verdict=Verdict.OK,
        message="Run delay (/proc/PID/task/TID/schedstat) is unavailable, so demand "
        "and waiting cannot be measured; only structural rules were checked.",
        pids=(),
        evidence={},
        fix="Use a kernel with CONFIG_SCHED_INFO (or schedstats enabled) to measure contention.",
    )


def _sort_key(f: Finding) -> tuple[int, int, int]:
    return (-f.verdict.rank, -_SEVERITY_RANK[f.severity], _RULE_ORDER[f.rule])


def assess(interval: Interval, thresholds: Thresholds) -> Assessment:
    """Apply every rule of `RULES` to an interval (or a whole-run interval).

    With N = interval.vcpus, D = totals.demand, r = totals.run_delay_ratio:

    - over = D > N * (1 + thresholds.margin); waiting = r > thresholds.delay_ratio.
    - oversubscribed-pools (critical): over and waiting, and a contending process (demand
      >= 0.5) ran >= 2 active threads (each >= thresholds.active_cpu of a CPU).
    - oversubscribed-processes (warning): over and waiting, every contending process ran
      at most one active thread.
    - starved-quota (warning): not over, host.throttled_ratio >= thresholds.throttle_ratio.
    - starved-outside (warning): waiting, not over, host.outside_cpus or host.steal_cpus
      >= thresholds.outside_cpu.
    - starved-unattributed (info): waiting, not over, no outside load, steal or throttling.
    - busy-threads-exceed (warning): not over, not waiting, totals.active_threads > N.
    - pool-default (warning): >= 2 processes map a sizable pool no variable controls, one of
      them ran >= 2 active threads; skipped when oversubscribed-pools names the same pids.
    - fork-hang (critical, at-risk): a plain-forked child (same cmdline) of a parent with
      >= 2 threads maps OpenMP, runs 1 thread, < 1% CPU, over >= thresholds.idle_seconds.
    - fork-after-threads (info, ok): other plain-forked children of multi-threaded parents.
    - orphan (warning): a non-root process whose parent is gone uses >= active_cpu*100 % CPU.
    - no-schedstat (info, ok): run delay unavailable; over and waiting are then False.

    The verdict is the worst finding's verdict by `Verdict.rank` ("ok" when none fired);
    findings come worst first (verdict rank, then severity, then `RULES` order).
    """
    n = interval.vcpus
    totals = interval.totals
    measured = "schedstat" not in interval.unavailable
    ratio = totals.run_delay_ratio
    over = measured and totals.demand > n * (1.0 + thresholds.margin)
    waiting = measured and ratio is not None and ratio > thresholds.delay_ratio

    findings: list[Finding] = []
    skip_pids: frozenset[int] = frozenset()
    if over and waiting:
        finding = _oversubscribed(interval, thresholds)
        findings.append(finding)
        if finding.rule == "oversubscribed-pools":
            skip_pids = frozenset(finding.pids)
    if not over:
        findings.extend(_starved(interval, thresholds, waiting))
        if not waiting and totals.active_threads > n:
            findings.append(_busy_threads(interval))
    pool = _pool_default(interval, skip_pids)
    if pool is not None:
        findings.append(pool)
    findings.extend(_forks(interval, thresholds))
    orphan = _orphans(interval, thresholds)
    if orphan is not None:
        findings.append(orphan)
    if not measured:
        findings.append(_no_schedstat())

    findings.sort(key=_sort_key)
    verdict = max((f.verdict for f in findings), key=lambda v: v.rank, default=Verdict.OK)
    return Assessment(verdict=verdict, findings=tuple(findings))
