"""`oversub doctor`'s reading of its measurements: what each runtime sized itself from,
how many of its threads run at once, whether M processes of it oversubscribe, and its knob.

A runtime's pool is some function of one input: the CPUs of its affinity, its N (affinity
and the CPU quota: the budget), the quota alone, or neither (the machine's CPUs, or a fixed
size). Each hypothesis is tried against the counts measured under the budgets
(`core.checkups.RunKind`): it stands when equal inputs gave equal counts and different
inputs different counts. What stands says what the runtime follows and what it ignores;
when the budgets tried cannot tell two hypotheses apart, that is said, not guessed.
Pure functions of the records of `core.checkups`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from oversub.core import runtimes
from oversub.core.checkups import (
    Checkup,
    DoctorRow,
    Knob,
    Measurement,
    RunKind,
    SeenBudget,
    SizedFrom,
    Sizing,
    Status,
)
from oversub.core.samples import ThreadSample


def compute_threads(started: Mapping[str, int]) -> int:
    """Threads of compute pools among `started`: every owner but those that are not one
    (the interpreter, gloo, jemalloc's background threads); an unattributed thread counts."""
    return sum(n for owner, n in started.items() if runtimes.waits(owner) != "none")


_Key = Callable[[SeenBudget], float]

_HYPOTHESES: dict[str, _Key] = {
    "budget": lambda b: b.vcpus,
    "affinity": lambda b: b.affinity,
    "quota": lambda b: math.inf if b.quota is None else b.quota,
    "cores": lambda b: 0,
}
"""Each input a pool may be sized from, as a function of the budget a child had."""


def _stands(points: Sequence[tuple[float, int]]) -> bool:
    """The counts are a one-to-one function of the input: equal inputs, equal counts;
    different inputs, different counts (a pool sized from 1 or 2 CPUs differs)."""
    seen: dict[float, int] = {}
    for key, count in points:
        if seen.setdefault(key, count) != count:
            return False
    return len(set(seen.values())) == len(seen)


def sizing(measured: Sequence[tuple[SeenBudget, int]]) -> Sizing:
    """What a runtime sized its pool from, given (budget, compute threads) per run."""
    if not measured:
        return Sizing(SizedFrom.UNCLEAR, None, None)
    if all(count == 0 for _, count in measured):
        return Sizing(SizedFrom.NO_THREADS, None, None)
    standing = {
        name: _stands([(key(budget), count) for budget, count in measured])
        for name, key in _HYPOTHESES.items()
    }
    alive = {name for name, ok in standing.items() if ok}
    if not alive or len({b for b, _ in measured}) < 2:
        return Sizing(SizedFrom.UNCLEAR, None, None)
    follows_affinity = alive <= {"budget", "affinity"}
    ignores_affinity = alive <= {"quota", "cores"}
    follows_quota = alive <= {"budget", "quota"}
    ignores_quota = alive <= {"affinity", "cores"}
    affinity = False if follows_affinity else True if ignores_affinity else None
    quota = False if follows_quota else True if ignores_quota else None
    if follows_affinity and follows_quota:
        source = SizedFrom.BUDGET
    elif follows_affinity:
        source = SizedFrom.AFFINITY
    elif follows_quota:
        source = SizedFrom.QUOTA
    elif ignores_affinity and ignores_quota:
        source = SizedFrom.CORES
    else:
        source = SizedFrom.UNCLEAR
    return Sizing(source, quota, affinity)


def busy_threads(
    before: Sequence[ThreadSample], after: Sequence[ThreadSample], seconds: float, active: float
) -> int:
    """Threads runnable (running or waiting for a CPU) for at least `active` of `seconds`
    between two readings; a thread absent from either is not counted."""
    if seconds <= 0:
        return 0
    then = {t.tid: t for t in before}
    floor = active * seconds * 1e9
    count = 0
    for now in after:
        was = then.get(now.tid)
        if was is None:
            continue
        runnable = now.cpu_ns - was.cpu_ns
        if now.run_delay_ns is not None and was.run_delay_ns is not None:
            runnable += now.run_delay_ns - was.run_delay_ns
        if runnable >= floor:
            count += 1
    return count


def knob(checkup: Checkup, started: Mapping[str, int], threads: int) -> Knob:
    """The knob of the check's owner when its threads are among those started (or none
    of a known owner are), else of the known owner that started most (NumPy built on MKL
    starts MKL's pool, not OpenBLAS's)."""
    owners = sorted(
        (
            (n, owner)
            for owner, n in started.items()
            if owner in runtimes.RUNTIMES_BY_KEY and runtimes.waits(owner) != "none"
        ),
        key=lambda pair: (-pair[0], pair[1]),
    )
    owner = checkup.owner
    if owners and (owner is None or owner not in started):
        owner = owners[0][1]
    runtime = runtimes.RUNTIMES_BY_KEY.get(owner) if owner is not None else None
    variable = checkup.variable or (
        runtime.variables[0] if runtime is not None and runtime.variables else None
    )
    code = checkup.code or (runtime.code if runtime is not None else None)
    return Knob(variable, code.format(t=threads) if code else None, threads)


def sizing_variables(checkup: Checkup, env: Mapping[str, str]) -> dict[str, str]:
    """The variables that size this check's pool, as set in the children's environment."""
    names = [checkup.variable] if checkup.variable else []
    runtime = runtimes.RUNTIMES_BY_KEY.get(checkup.owner) if checkup.owner else None
    if runtime is not None:
        names.extend(runtime.variables)
    return {name: env[name] for name in names if name in env}


def plan_threads(vcpus: int, procs: int) -> int:
    """T = max(1, floor(N / M)), as `recommend` plans it."""
    return max(1, vcpus // procs)


def row(
    checkup: Checkup,
    version: str | None,
    measurements: Sequence[Measurement],
    asked: RunKind,
    *,
    vcpus: int,
    procs: int,
    env: Mapping[str, str],
) -> DoctorRow:
    """One check's row: its measurements, what it followed, its width under the budget
    `asked` was measured under, whether M processes of it oversubscribe N, its knob."""
    measured = [m for m in measurements if m.status is Status.MEASURED and m.budget is not None]
    budget_run = next((m for m in measured if m.kind is asked), None)
    host = next((m for m in measured if m.kind is RunKind.HOST), budget_run)
    found = sizing([(m.budget, compute_threads(m.started)) for m in measured if m.budget])
    started = compute_threads(budget_run.started) if budget_run is not None else None
    width: int | None = None
    width_measured = False
    if budget_run is not None and budget_run.busy is not None:
        width, width_measured = max(1, budget_run.busy), True
    elif started is not None:
        width = started + 1  # every thread it started, and the calling one
    over = None if width is None else procs * width > vcpus
    return DoctorRow(
        checkup=checkup,
        installed=True,
        version=version,
        measurements=tuple(measurements),
        sizing=found if measured else None,
        started=started,
        width=width,
        width_measured=width_measured,
        oversubscribes=over,
        knob=knob(checkup, host.started if host is not None else {}, plan_threads(vcpus, procs)),
        variables=sizing_variables(checkup, env),
    )


def absent_row(checkup: Checkup, vcpus: int, procs: int) -> DoctorRow:
    """The row of a check whose package is not installed."""
    return DoctorRow(
        checkup, False, None, (), None, None, None, False, None,
        knob(checkup, {}, plan_threads(vcpus, procs)), {},
    )  # fmt: skip
