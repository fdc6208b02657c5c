"""The verdict: which rules an interval (or a whole run) breaks, with evidence and a fix.

Two measured quantities decide most of it (docs/signals.md), with N = `interval.vcpus`:

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

from oversub.analysis.causes import Group, gil_bound, groups
from oversub.analysis.cost import cost_evidence, cost_of, cost_said
from oversub.analysis.fixes import app_thread_fix, limited, limits_text, thread_fix
from oversub.analysis.hazards import fork_findings, orphan_finding, pool_default_finding
from oversub.analysis.ownerfindings import (
    COSTED,
    Part,
    cheap_said,
    costed,
    owned_part,
    spin_cost,
    target_finding,
    unattributed_note,
)
from oversub.analysis.plans import threads_for
from oversub.analysis.poolsize import blamed, pool_sizes
from oversub.analysis.rates import BUSY_DEMAND
from oversub.analysis.starved import starved_findings
from oversub.analysis.wording import (
    count_processes,
    join_and,
    pids_of,
    pool_order,
    rounded,
    sentence,
    share,
    verb,
    who,
)
from oversub.core.names import Severity, Signal, Verdict
from oversub.core.plural import count, noun
from oversub.core.pools import POOLS_BY_KEY
from oversub.core.results import Assessment, Finding, Interval, ProcessRates
from oversub.core.rules import REPORT_ORDER, Rule
from oversub.core.runtimes import waits
from oversub.core.thresholds import Thresholds

Evidence = dict[str, float | int | str | None]

ONE_THREAD_DEMAND = 1.5
"""Above what one thread can show (CPU + delay <= the interval): several threads at once."""


def _base_evidence(interval: Interval) -> Evidence:
    t = interval.totals
    n = interval.vcpus
    return {
        "demand": rounded(t.demand),
        "vcpus": n,
        "demand_per_vcpu": rounded(t.demand / n),
        "run_delay_ratio": rounded(t.run_delay_ratio),
        "involuntary_ctx_per_cpu_s": rounded(t.involuntary_ctx_per_cpu_s, 1),
        "active_threads": t.active_threads,
    }


def _oversubscribed(interval: Interval, th: Thresholds) -> Finding:
    n = interval.vcpus
    t = interval.totals
    contending = [p for p in interval.processes if p.demand >= BUSY_DEMAND]
    if not contending:  # many small processes: all of them share the CPUs
        contending = [p for p in interval.processes if p.demand > 0]
    # Several threads at once: two active ones, or more runnable than one thread can be; or
    # interpreter threads taking turns on the GIL, each runnable too briefly to count.
    multi = [
        p
        for p in contending
        if p.active_threads >= 2 or p.demand > ONE_THREAD_DEMAND or gil_bound(p)
    ]
    # M = processes busy *at the same time*: over a whole run, workers that came and went
    # (a DataLoader per epoch, Pool(maxtasksperchild)) must not all count at once.
    m = max(1, min(len(contending), t.busy_processes or len(contending)))
    threads = threads_for(n, m)
    evidence = _base_evidence(interval) | {
        "processes": m,
        "multi_thread_processes": len(multi),
        "throttled_ratio": rounded(interval.host.throttled_ratio),
    }
    head = (
        f"The tree keeps {t.demand:.1f} threads runnable on {count(n, 'CPU')} "
        f"({t.demand / n:.1f}x); "
    )
    # Each busy process is judged on its own threads; the finding holds them all.
    found = groups(contending, multi, threads, n)
    parts = [_part(g, m, n, threads) for g in found]
    if not parts:  # totals without a process line (an edited recording): no cause to name
        return Finding(
            Rule.OVERSUBSCRIBED_PROCESSES,
            Severity.WARNING,
            Verdict.OVERSUBSCRIBED,
            head + "no process of the tree was measured, so no cause can be named.",
            (),
            evidence | {"causes": ""},
            f"Run at most {count(n, 'busy thread')} at a time.",
        )
    causes = ",".join(f"{pid}:{kind}" for pid, kind in sorted(k for g in found for k in g.kinds))
    return target_finding(parts, contending, head, evidence | {"causes": causes}, m, n, threads)


def _part(g: Group, m: int, n: int, threads: int) -> Part:
    """The part of the group `g` of busy processes in the target's finding."""
    if g.cause is not None:
        part = owned_part(g.cause, g.procs, m, n, threads)
        return costed(part, g.procs) if g.cause.kind in COSTED else part
    if g.kind == "mapped":
        return _mapped_part(g.procs, m, n, threads)
    if g.kind == "threads":
        return costed(_threads_part(g.procs, m, n, threads), g.procs)
    return _single_part(g.procs, m, n)


def _mapped_part(procs: tuple[ProcessRates, ...], m: int, n: int, threads: int) -> Part:
    """Busy processes whose owners are unknown or unattributed, judged by the pools they map
    sized above T (`poolsize`): critical unless every one of those pools sleeps."""
    pids = pids_of(procs)
    pools = pool_order(s.key for p in procs for s in blamed(p, n, threads))
    evidence: Evidence = {"threads_per_process": threads, "pools": ",".join(pools) or None}
    who_ = f"each of the {m} busy processes" if m > 1 else "the busy process"
    knobs = thread_fix(procs, threads, n)
    fix = f"Give {who_} {count(threads, 'thread')} ({share(n, m)}): {knobs}"
    if m > n:
        fix += f"; and run at most {count(n, 'busy process')} at a time"
    fix += "."
    # The clauses of `thread_fix` name their processes; its generic advice does not.
    named = any(pool_sizes(p, n) is not None and blamed(p, n, threads) for p in procs)
    scoped_fix = f"{sentence(knobs)}." if named else f"In {who(pids)}: {knobs}."
    sized = named or any(pool_sizes(p, n) is None for p in procs)  # else: app threads' advice
    subject, runs = who(pids), verb(len(procs), "runs", "run")
    cost = cost_of(procs)
    evidence |= cost_evidence(cost)
    costs = cost_said(cost)
    if cost.kind == "unmeasured" and pools and all(waits(k) == "sleep" for k in pools):
        small = "The gain is small; to take it: "
        return Part(
            Rule.OVERSUBSCRIBED_THREADS,
            Severity.WARNING,
            f"{cheap_said(pools, procs, 'the busy processes', 'run')} {costs}",
            small + fix[0].lower() + fix[1:],
            f"{cheap_said(pools, procs, subject, runs)} {costs}",
            small + scoped_fix[0].lower() + scoped_fix[1:],
            evidence,
            sized=sized,
        )
    what = (
        f"multi-thread {join_and(POOLS_BY_KEY[k].label for k in pools)} "
        + noun(len(pools) * len(procs), "pool")
        if pools
        else "several busy threads each"
    )
    # Measured here, where their CPU went decides; else a pool that spins, sized above the
    # target and not seen idle; else (none known to run them) no cost is claimed.
    spin = cost.kind == "spin" or (cost.kind == "unmeasured" and bool(pools))
    if cost.kind != "unmeasured":
        said = f"; {costs[0].lower()}{costs[1:]}"
    else:
        said = (spin_cost(pools, procs)[:-1] if pools else "") + f". {costs}"
    said += unattributed_note(procs, named=bool(pools))
    rule = Rule.OVERSUBSCRIBED_POOLS if spin else Rule.OVERSUBSCRIBED_THREADS
    return Part(
        rule,
        Severity.CRITICAL if spin else Severity.WARNING,
        f"{count_processes(len(procs))} {runs} {what}{said}",
        fix,
        f"{subject} {runs} {what}{said}",
        scoped_fix,
        evidence,
        sized=sized,
    )


def _threads_part(procs: tuple[ProcessRates, ...], m: int, n: int, threads: int) -> Part:
    """Busy processes whose owners are unknown or unattributed and whose pools all run at
    most T: their busy threads are the application's own."""
    pids = pids_of(procs)
    evidence: Evidence = {"threads_per_process": threads, "pools": None}
    each = " each" if len(procs) > 1 else ""
    what = f"several busy threads{each}"
    if any(p.active_threads < 2 for p in procs):
        top = max(procs, key=lambda p: p.demand)
        evidence |= {"busiest_process_demand": rounded(top.demand)}
        evidence |= {"busiest_process_threads": top.threads}
        it = "the busiest" if each else "it"
        what = f"threads{each} that are each busy only briefly ({it} keeps {top.demand:.1f}"
        what += f" runnable at once on average, with {count(top.threads, 'thread')} in it)"
    # Nothing proves whose they are (owners not read, or no evidence named them): the
    # application's own threads, or a library's that attribution could not read; never
    # said to be the application's alone (issue 41).
    read = all(p.owner_counts is not None for p in procs)
    unknown = "no evidence names their code" if read else "their owners were not read"
    said = (
        f"{verb(len(procs), 'runs', 'run')} {what} and {_pools_state(list(procs), n, threads)}; "
        f"{unknown}: these are the application's own threads (task threads, executors) or a "
        "native library's that oversub could not attribute, not a pool of its catalogue."
    )
    fix = (
        f"{app_thread_fix(n, len(procs), m)}; if they are a native library's, the levers of "
        f"any runtime: at most {count(n, 'busy process')} at a time, or each process its own "
        "CPUs, set before it starts its pool (`taskset -c CPUS CMD`, "
        "os.sched_setaffinity(0, CPUS))"
    )
    return Part(
        Rule.OVERSUBSCRIBED_THREADS,
        Severity.WARNING,
        f"{count_processes(len(procs))} {said}",
        sentence(fix) + ".",
        f"{who(pids)} {said}",
        f"In {who(pids)}: {fix}.",
        evidence,
    )


def _single_part(procs: tuple[ProcessRates, ...], m: int, n: int) -> Part:
    """Busy processes that run one thread at a time: only fewer of them at once helps."""
    pids = pids_of(procs)
    each = " each" if len(procs) > 1 else ""
    return Part(
        Rule.OVERSUBSCRIBED_PROCESSES,
        Severity.WARNING,
        f"they are {m} single-thread {noun(m, 'process')} sharing {count(n, 'CPU')}, "
        "which costs little (1.0-1.2x measured); on a machine shared with other load, "
        "fewer processes win fairness and latency, not throughput (the job's share of "
        "the CPUs shrinks).",
        f"Run at most {count(n, 'busy process')} at a time "
        f"(e.g. Pool(processes={n})); "
        "fewer threads per process will not help, they already run one each.",
        f"{who(pids)} {verb(len(procs), 'runs', 'run')} one busy thread{each} at a time.",
        f"In {who(pids)}: no thread to cap, {verb(len(procs), 'it runs', 'they run')} one "
        f"busy thread{each}.",
        {},
    )


def _pools_state(procs: list[ProcessRates], n: int, threads: int) -> str:
    """ "map no native pool" or "their native pools already run at most 1 thread
    (OMP_NUM_THREADS=1, OpenBLAS at 1 thread, read live)" (`fixes.limited`)."""
    limits = limits_text(procs, n, threads)
    if limits == "no native pool":
        return f"{verb(len(procs), 'maps', 'map')} no native pool"
    whose = verb(len(procs), "its", "their")
    return f"{whose} native pools {limited(procs, n, threads)} ({limits})"


def _busy_threads(interval: Interval) -> Finding:
    n = interval.vcpus
    t = interval.totals
    busy = [p for p in interval.processes if p.active_threads > 0]
    m = max(1, len(busy))
    threads = threads_for(n, m)
    return Finding(
        rule=Rule.BUSY_THREADS_EXCEED,
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"{t.active_threads} threads were busy on {count(n, 'CPU')}; they have not "
        "waited yet, "
        "but when they run at once they will contend.",
        pids=pids_of(busy),
        evidence=_base_evidence(interval)
        | {"processes": len(busy), "threads_per_process": threads},
        fix=f"Keep busy threads at most {n}: {count(threads, 'thread')} in "
        + (f"each of the {m} busy processes; " if m > 1 else "the busy process; ")
        + thread_fix(busy, threads, n)
        + ".",
    )


def _over_unexplained(interval: Interval) -> Finding:
    n = interval.vcpus
    t = interval.totals
    busy = sorted(interval.processes, key=lambda p: -p.demand)[:3]
    return Finding(
        rule=Rule.DEMAND_EXCEEDS_BUDGET,
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message=f"The tree keeps {t.demand:.1f} threads runnable on {count(n, 'CPU')}, yet they "
        f"hardly wait ({(t.run_delay_ratio or 0.0):.0%}): some of its processes run on CPUs "
        "outside the root's budget (their own affinity, cpuset or cgroup).",
        pids=pids_of(busy),
        evidence=_base_evidence(interval),
        fix="Compare `oversub cpus --pid PID` of the busiest processes with the root's: size "
        "each process's threads to its own budget, or give the job one consistent budget.",
    )


def _root(interval: Interval) -> tuple[int, ...]:
    """The pid a finding about the whole tree names: its root; none for a cgroup."""
    return (interval.root_pid,) if interval.root_pid else ()


def _no_schedstat() -> Finding:
    return Finding(
        rule=Rule.NO_SCHEDSTAT,
        severity=Severity.INFO,
        verdict=Verdict.OK,
        message="Run delay (/proc/PID/task/TID/schedstat) is unavailable, so demand "
        "and waiting cannot be measured; only structural rules were checked.",
        pids=(),
        evidence={},
        fix="Use a kernel with CONFIG_SCHED_INFO (or schedstats enabled) to measure contention.",
    )


def _sort_key(f: Finding) -> tuple[int, int, int]:
    return (-f.verdict.rank, -f.severity.rank, REPORT_ORDER[f.rule])


def assess(interval: Interval, thresholds: Thresholds) -> Assessment:
    """Apply every rule of `rules.RUNTIME_RULES` to an interval (or a whole-run interval).

    With N = interval.vcpus, D = totals.demand, r = totals.run_delay_ratio:

    - over = D > N * (1 + thresholds.margin); waiting = r > thresholds.delay_ratio,
      D * r (CPU-seconds waited per second) >= thresholds.min_wait and D >=
      thresholds.active_cpu (an idle tree's wake-ups are not starvation).
    - T = floor(N / M) threads per busy process (`threads_for`); a pool's size is its live
      value, else its variable, else N (`poolsize`).
    - oversubscribed-pools (critical): over and waiting, and a contending process (demand
      >= 0.5) ran >= 2 active threads with a pool sized above T (or unknown pools). When
      the threads' owners were read (`causes.cause`), only a pool whose threads ran and show
      more than T counts, and only one whose waiting threads spin makes it critical. Each
      busy process is judged on its own threads (`causes.groups`: a thread's owner is
      evidence for its own process only); the one finding names every busy process and
      takes the worst rule and severity of theirs (`ownerfindings.target_finding`).
    - oversubscribed-threads (warning): over and waiting, contending processes ran >= 2
      active threads, but every pool they map is already at most T: application threads;
      or, by the owners, pools whose threads sleep (cheap), Python threads taking turns on
      the GIL, or gloo's communication threads (no thread cap for those two).
    - oversubscribed-processes (warning): over and waiting, every contending process ran
      at most one active thread.
    - demand-exceeds-budget (warning, at-risk): over but not waiting: processes run beyond
      the root's budget (their own affinity or cgroup).
    - starved-quota (warning): not over, host.throttled_ratio >= thresholds.throttle_ratio.
    - starved-outside (warning): waiting, not over, outside CPUs or steal >= min(outside_cpu,
      max(min_wait, half the waiting not explained by the tree's own excess D - N)).
    - starved-unattributed (info): waiting, not over, no such load, steal or throttling.
    - busy-threads-exceed (warning): not over, not waiting, totals.active_threads > N.
    - pool-default (warning): multi-thread pools that exist (`poolsize.latent_pools`) in >= 2
      processes that can run them at once add up to more than N threads, even idle; skipped
      when oversubscribed-pools names the same pids.
    - fork-hang (critical, at-risk): a plain-forked child (same cmdline) of a parent with
      >= 2 threads maps OpenMP, runs 1 thread, < 1% CPU, over >= thresholds.idle_seconds.
    - fork-after-threads (info, ok): other plain-forked children of multi-threaded parents.
    - orphan (warning): a non-root process whose parent is gone uses >= active_cpu*100 % CPU.
    - no-schedstat (info, ok): run delay unavailable; over and waiting are then False.

    The verdict is the worst finding's verdict by `Verdict.rank` ("ok" when none fired);
    findings come worst first (verdict rank, then severity, then catalogue order).
    """
    n = interval.vcpus
    totals = interval.totals
    measured = Signal.SCHEDSTAT not in interval.unavailable
    ratio = totals.run_delay_ratio
    over = measured and totals.demand > n * (1.0 + thresholds.margin)
    # Waiting needs a share of the runnable time *and* some absolute waiting: an idle tree's
    # few wake-ups can wait 80% of almost nothing.
    # It also needs meaningful demand: an idle pool's wake-ups under other load can wait
    # past min-wait while the tree keeps a tenth of a CPU runnable; nobody is starved there.
    waiting = (
        measured
        and ratio is not None
        and ratio > thresholds.delay_ratio
        and totals.demand * ratio >= thresholds.min_wait
        and totals.demand >= thresholds.active_cpu
    )

    findings: list[Finding] = []
    skip_pids: frozenset[int] = frozenset()
    if over and waiting:
        finding = _oversubscribed(interval, thresholds)
        findings.append(finding)
        if finding.rule is Rule.OVERSUBSCRIBED_POOLS:
            skip_pids = frozenset(finding.pids)
    elif over:
        findings.append(_over_unexplained(interval))
    if not over:
        base = _base_evidence(interval)
        findings.extend(starved_findings(interval, thresholds, waiting, base, _root(interval)))
        if not waiting and totals.active_threads > n:
            findings.append(_busy_threads(interval))
    pool = pool_default_finding(interval, skip_pids)
    if pool is not None:
        findings.append(pool)
    findings.extend(fork_findings(interval, thresholds))
    orphan = orphan_finding(interval, thresholds)
    if orphan is not None:
        findings.append(orphan)
    if not measured:
        findings.append(_no_schedstat())

    findings.sort(key=_sort_key)
    verdict = max((f.verdict for f in findings), key=lambda v: v.rank, default=Verdict.OK)
    return Assessment(verdict=verdict, findings=tuple(findings))
