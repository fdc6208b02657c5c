"""`oversub check --procs M --threads T [--workers W]`: judge a configuration before running it.

Pure arithmetic on the budget: M processes of T threads, each with W single-thread workers,
need M*(T+W) CPUs. Nothing is sampled, so the findings say what *will* happen, using the
measured costs: single-thread processes sharing CPUs cost 1.0-1.2x, OpenMP teams of 2 or
more threads that must share CPUs cost 2-23x (waiting team threads spin).
"""

from __future__ import annotations

from collections.abc import Mapping

from oversub.analysis.plans import threads_for
from oversub.core.model import Budget
from oversub.core.names import Severity, Verdict
from oversub.core.plural import count, noun
from oversub.core.results import Assessment, Finding
from oversub.core.rules import Rule


def _evidence(
    budget: Budget, procs: int, threads: int, workers: int
) -> Mapping[str, float | int | str | None]:
    total = procs * (threads + workers)
    return {
        "vcpus": budget.vcpus,
        "procs": procs,
        "threads": threads,
        "workers": workers,
        "total_threads": total,
        "ratio": round(total / budget.vcpus, 2),
    }


def _set_threads(threads: int) -> str:
    return (
        f"OMP_NUM_THREADS={threads} (and MKL_/OPENBLAS_NUM_THREADS) in each process's "
        f"environment, or torch.set_num_threads({threads}) at its start"
    )


def _plan(procs: int, threads: int, workers: int) -> str:
    """ "2 processes of 2 threads and 1 worker each" (a plan: no process exists yet)."""
    each = count(threads, "thread") + (f" and {count(workers, 'worker')}" if workers else "")
    return f"{count(procs, 'process')} of {each}" + (" each" if procs > 1 else "")


def _fitting_advice(n: int, procs: int, threads: int, workers: int) -> str:
    """The nearest plan that fits N: fewer threads, then fewer workers, then fewer processes.

    Never a count of 0: without room for one worker, the advice is to drop the workers.
    """
    suggested = threads_for(n, procs, workers)
    if procs * (suggested + workers) <= n:
        advice = f"use {count(suggested, 'thread')} per process: {_set_threads(suggested)}"
        if workers:
            advice += "; set the workers' variables to 1 (worker_init_fn)"
        return advice
    if procs <= n:
        most = n // procs - 1  # workers that leave each main process one CPU
        main = threads_for(n, procs, most)
        if most >= 1:
            return (
                f"use at most {count(most, 'worker')} per process, with 1 thread each "
                f"(worker_init_fn), and {count(main, 'thread')} per process: "
                f"{_set_threads(main)}"
            )
        return (
            f"drop the workers (do their work in the main processes) and use "
            f"{count(main, 'thread')} per process: {_set_threads(main)}"
        )
    each = " each" if n > 1 else ""
    extra = " and no workers" if workers else ""
    return f"run at most {count(n, 'process')}, with 1 thread{each}{extra}: {_set_threads(1)}"


def _over(budget: Budget, procs: int, threads: int, workers: int) -> Finding:
    """preflight-oversubscribed when the main threads alone exceed N, else preflight-workers:
    the workers bring the plan over N."""
    n = budget.vcpus
    total = procs * (threads + workers)
    if procs * threads > n:
        rule = Rule.PREFLIGHT_OVERSUBSCRIBED
        message = (
            f"The plan runs {_plan(procs, threads, workers)} = {count(total, 'thread')} on "
            f"{count(n, 'vCPU')}"
        )
    else:
        rule = Rule.PREFLIGHT_WORKERS
        message = (
            f"The plan's main threads fit ({procs} x {count(threads, 'thread')} on "
            f"{count(n, 'vCPU')}), but {count(workers, 'worker')} per process "
            f"{noun(workers, 'brings', 'bring')} it to {count(total, 'thread')}"
        )
    return Finding(
        rule=rule,
        # Multi-thread teams that share CPUs cost multiples; single threads cost ~1.1x.
        severity=Severity.CRITICAL if threads >= 2 else Severity.WARNING,
        verdict=Verdict.OVERSUBSCRIBED,
        message=f"{message} ({total / n:.1f}x)",
        pids=(),
        evidence=_evidence(budget, procs, threads, workers),
        fix=_fitting_advice(n, procs, threads, workers),
    )


def _idle(budget: Budget, procs: int, threads: int, workers: int, suggested: int) -> Finding:
    n = budget.vcpus
    total = procs * (threads + workers)
    return Finding(
        rule=Rule.PREFLIGHT_IDLE,
        severity=Severity.INFO,
        verdict=Verdict.OK,
        message=(
            f"The plan runs {count(total, 'thread')} on {count(n, 'vCPU')}, "
            f"leaving {count(n - total, 'vCPU')} idle"
        ),
        pids=(),
        evidence=_evidence(budget, procs, threads, workers),
        fix=f"use {count(suggested, 'thread')} per process: {_set_threads(suggested)}",
    )


def preflight(budget: Budget, procs: int, threads: int, workers: int = 0) -> Assessment:
    """Judge M processes of T threads with W workers each against the budget N.

    At most one finding: preflight-oversubscribed when M*T > N, preflight-workers when
    M*T <= N < M*(T+W), preflight-idle when a larger T = threads_for(N, M, W) would still
    fit. An exact fit, or idle CPUs that no even split could use, is ok with no finding.
    """
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    n = budget.vcpus
    total = procs * (threads + workers)
    findings: list[Finding] = []
    if total > n:
        findings.append(_over(budget, procs, threads, workers))
    else:
        suggested = threads_for(n, procs, workers)
        if suggested > threads:
            findings.append(_idle(budget, procs, threads, workers, suggested))
    verdict = max((f.verdict for f in findings), key=lambda v: v.rank, default=Verdict.OK)
    return Assessment(verdict=verdict, findings=tuple(findings))
