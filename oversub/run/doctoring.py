"""`oversub doctor`: each installed runtime started in a fresh child under each budget.

For each check of `core.checkups.CHECKUPS` whose package the interpreter has (one first
child lists them: `probe.poolstart` "inventory"), and for each budget (`plan_runs`), a
child runs `probe.poolstart` under that budget (`run.confine`) and stops at each step; at
each stop this side reads the child's threads from `/proc` (`probe.census`): those before
the import, after it and after the operation, whose they are (`probe.owners`, read again
a few times while any is unattributed), the budget the child really had (`probe.budget`),
and, under the asked budget, which threads worked while the operation ran in a loop.
A child has `timeout` seconds in all; one that fails to import, raises, crashes or hangs
is a measurement that says so, never a failure of doctor. Children run one at a time (a
count does not depend on load, but the busy threads' CPU would be shared).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from oversub.analysis.selfsizing import absent_row, busy_threads, plan_threads, row
from oversub.core import settings
from oversub.core.checkups import (
    CHECKUPS,
    Checkup,
    Confined,
    DoctorReport,
    DoctorRow,
    Measurement,
    RunKind,
    RunSpec,
    SeenBudget,
    Status,
)
from oversub.core.errors import CommandError, OversubError
from oversub.core.pools import is_thread_var
from oversub.core.runtimes import UNATTRIBUTED
from oversub.probe.budget import read_budget
from oversub.probe.census import read_threads, task_ids
from oversub.probe.owners import OwnerReader
from oversub.run import stopsignals
from oversub.run.confine import Cell, open_cell
from oversub.run.poolchild import PoolChild

OWNER_WAIT_S = 5.0
"""How long a child's new threads are read again while some have no owner yet: a thread just
created has no stack to read, and one still spinning after its work no blocked PC. On a
loaded machine ONNX Runtime's pool threads spin for more than the 0.3 s this once was, and a
thread left unowned was not counted as its pool's."""
OWNER_PAUSE_S = 0.05
INVENTORY_TIMEOUT_S = 30.0
BUSY_S = 0.5
"""Seconds the operation runs in a loop under the asked budget, to see its threads work."""

Progress = Callable[[Checkup, RunKind, Measurement], None]


def plan_runs(
    affinity: tuple[int, ...], cpus: float | None, cpuset: tuple[int, ...] | None
) -> tuple[RunSpec, ...]:
    """The asked budget first, then the host and the comparisons that tell what a runtime
    follows: half the CPUs of affinity, and a quota of as many CPUs with all of them. A
    comparison equal to the asked budget is not run twice; with one CPU there is nothing to
    compare."""
    asked = RunSpec(RunKind.BUDGET, cpuset, cpus) if cpus is not None or cpuset else None
    half = max(1, len(affinity) // 2)
    refs = [RunSpec(RunKind.HOST, None, None)]
    if len(affinity) > 1:
        refs.append(RunSpec(RunKind.AFFINITY, affinity[:half], None))
        refs.append(RunSpec(RunKind.QUOTA, None, float(half)))
    if asked is None:
        return tuple(refs)
    same = [r for r in refs if (r.affinity, r.quota) == (asked.affinity, asked.quota)]
    return (asked, *(r for r in refs if r not in same))


def _seen(pid: int) -> SeenBudget | None:
    try:
        budget = read_budget(pid)
    except OversubError:
        return None
    quota = budget.quota.cpus if budget.quota is not None else None
    return SeenBudget(budget.logical, len(budget.affinity), quota, budget.vcpus)


def _owners(pid: int, start: int | None, new: frozenset[int]) -> dict[str, int]:
    """Owner -> how many of the `new` threads it owns, read until each has one or
    `OWNER_WAIT_S` has passed."""
    reader = OwnerReader()
    owners: dict[int, str] = {}
    give_up = time.monotonic() + OWNER_WAIT_S
    while True:
        threads = read_threads(pid)
        if start is None:
            break
        owners = reader.read(pid, start, threads)
        reader.end_sample()
        if all(owners.get(t.tid, UNATTRIBUTED) != UNATTRIBUTED for t in threads if t.tid in new):
            break
        if time.monotonic() >= give_up:
            break
        time.sleep(OWNER_PAUSE_S)
    counts: dict[str, int] = {}
    for tid in new:
        if tid in owners or start is None:
            owner = owners.get(tid, UNATTRIBUTED)
            counts[owner] = counts.get(owner, 0) + 1
    return counts


def _text(value: object, limit: int) -> str | None:
    """A string the child sent, cut to `limit` characters (everything it sends is its own
    to choose: bounded here, escaped where it is shown); None for anything else."""
    return value[:limit] if isinstance(value, str) else None


def _expect(child: PoolChild, deadline: float, stage: str) -> dict[str, object]:
    """The next stop, which must be `stage`; an "error" stop or anything else raises."""
    message = child.message(deadline)
    if message is None:
        raise _Ended
    if message.get("stage") == "error":
        where = _text(message.get("where"), 20) or "?"
        raise _Failed(f"{where}: {_text(message.get('error'), 300) or '?'}")
    if message.get("stage") != stage:
        raise _Ended
    return message


class _Ended(Exception):
    """The child stopped talking (it died, or said something else)."""


class _Failed(Exception):
    """The child said its import or operation raised."""


def measure(
    python: str,
    checkup: Checkup,
    kind: RunKind,
    cell: Cell,
    env: Mapping[str, str],
    *,
    timeout: float,
    busy: float,
) -> Measurement:
    """One child of `checkup` under `cell`'s budget."""
    spec = {
        "op": checkup.key,
        "module": checkup.module,
        "needs": list(checkup.needs),
        "dists": list(checkup.dists),
        "busy": busy,
    }
    began = time.monotonic()
    deadline = began + timeout
    child = PoolChild(python, spec, env, cell)
    pid = child.pid
    result: dict[str, object] = {}
    outcome: tuple[Status, str | None] = (Status.MEASURED, None)
    try:
        _expect(child, deadline, "base")
        result["budget"] = _seen(pid)
        base = task_ids(pid) or frozenset()
        child.go()
        result["version"] = _text(_expect(child, deadline, "imported").get("version"), 100)
        imported = task_ids(pid) or frozenset()
        result["at_import"] = len(imported - base)
        child.go()
        said = _expect(child, deadline, "ran").get("reported")
        result["reported"] = _reported(said)
        now = task_ids(pid) or frozenset()
        result["started"] = _owners(pid, child.start, now - base)
        child.go()
        if busy > 0:
            _expect(child, deadline, "busy")
            before, then = read_threads(pid), time.monotonic()
            child.go()
            _expect(child, deadline, "idle")
            after, elapsed = read_threads(pid), time.monotonic() - then
            result["busy"] = busy_threads(before, after, elapsed, _ACTIVE)
            child.go()
    except TimeoutError:
        child.kill()
        outcome = (Status.TIMED_OUT, f"not done within {timeout:g} s")
    except _Failed as failed:
        outcome = (Status.FAILED, str(failed))
    except _Ended:
        outcome = (Status.CRASHED, "stopped before it was done")
    finally:
        ending = child.end()
    if outcome[0] is Status.CRASHED and ending is not None:
        outcome = (Status.CRASHED, ending)
    return Measurement(
        kind,
        outcome[0],
        error=outcome[1],
        seconds=round(time.monotonic() - began, 3),
        **result,  # type: ignore[arg-type]
    )


_ACTIVE = float(settings.default("active_cpu"))


def _reported(said: object) -> dict[str, str]:
    if not isinstance(said, dict):
        return {}
    return {str(k)[:80]: str(v)[:80] for k, v in list(said.items())[:16]}


# --------------------------------------------------------------------------- the whole run


def inventory(
    python: str, env: Mapping[str, str]
) -> tuple[dict[str, str | None], dict[str, str | bool | None]]:
    """(what the interpreter says of itself, check key -> version or False when absent).
    Raises CommandError when the interpreter cannot run the inventory."""
    spec = {
        "op": "inventory",
        "checks": [{"key": c.key, "module": c.module, "dists": list(c.dists)} for c in CHECKUPS],
    }
    try:
        child = PoolChild(python, spec, env, Cell(RunSpec(RunKind.HOST, None, None)))
    except OSError as error:
        raise CommandError(f"cannot run {python}: {error.strerror or error}") from None
    try:
        message = child.message(time.monotonic() + INVENTORY_TIMEOUT_S)
    except TimeoutError:
        child.kill()
        message = None
    child.go()
    ending = child.end()
    if message is None or message.get("stage") != "inventory":
        why = ending or "it did not answer (is it Python 3.8 or newer?)"
        raise CommandError(f"{python} could not list its packages: {why}")
    found = message.get("found")
    about = {k: _text(message.get(k), 4096) for k in ("python", "executable", "prefix")}
    versions: dict[str, str | bool | None] = {
        c.key: False if found[c.key] is False else _text(found[c.key], 100)
        for c in CHECKUPS
        if isinstance(found, dict) and c.key in found
    }
    return about, versions


@contextlib.contextmanager
def cells(specs: Sequence[RunSpec]) -> Iterator[list[tuple[Cell, Confined]]]:
    """A cell per budget, removed at the end whatever happens."""
    made: list[tuple[Cell, Confined]] = []
    try:
        for spec in specs:
            made.append(open_cell(spec, spec.kind.value))
        yield made
    finally:
        with stopsignals.deferred():
            for cell, _ in made:
                cell.close()


def children_env(clean: bool) -> dict[str, str]:
    """The children's environment: doctor's own, without the thread variables if `clean`."""
    return {k: v for k, v in os.environ.items() if not (clean and is_thread_var(k))}


def run_doctor(
    python: str,
    checkups: Sequence[Checkup],
    specs: Sequence[RunSpec],
    *,
    procs: int | None,
    timeout: float,
    clean_env: bool,
    progress: Progress | None = None,
) -> DoctorReport:
    """Measure every installed check under every budget of `specs` (the first is the one
    asked about); M = `procs`, or the asked budget's N when None."""
    env = children_env(clean_env)
    about, found = inventory(python, env)
    rows: list[DoctorRow] = []
    notes: list[str] = []
    with stopsignals.interrupt(), cells(specs) as made:
        runnable = [(cell, confined) for cell, confined in made if confined.applied]
        asked = made[0][1].spec.kind
        measured: dict[str, list[Measurement]] = {}
        for checkup in checkups:
            if found.get(checkup.key) is False:
                continue
            runs = measured.setdefault(checkup.key, [])
            for cell, confined in made:
                if not confined.applied:
                    runs.append(
                        Measurement(confined.spec.kind, Status.NOT_RUN, error=confined.note)
                    )
                    continue
                m = measure(
                    python,
                    checkup,
                    confined.spec.kind,
                    cell,
                    env,
                    timeout=timeout,
                    busy=BUSY_S if confined.spec.kind is asked else 0.0,
                )
                runs.append(m)
                if progress is not None:
                    progress(checkup, confined.spec.kind, m)
        vcpus = _asked_vcpus(measured, asked, runnable)
        m_procs = procs if procs is not None else vcpus
        for checkup in checkups:
            version = found.get(checkup.key)
            if version is False:
                rows.append(absent_row(checkup, vcpus, m_procs))
                continue
            runs = measured[checkup.key]
            seen = next((m.version for m in runs if m.version), None)
            rows.append(
                row(
                    checkup,
                    seen or (version if isinstance(version, str) else None),
                    runs,
                    asked,
                    vcpus=vcpus,
                    procs=m_procs,
                    env=env,
                )
            )
        confined_runs = tuple(confined for _, confined in made)
    if len(specs) == 1:
        notes.append(
            "one CPU: no budget to compare, so what each runtime sizes itself from is not told"
        )
    return DoctorReport(
        python=str(about.get("executable") or python),
        python_version=str(about.get("python") or "?")[:40],
        prefix=str(about.get("prefix") or "?"),
        runs=confined_runs,
        vcpus=vcpus,
        procs=m_procs,
        threads=plan_threads(vcpus, m_procs),
        rows=tuple(rows),
        thread_env={k: v for k, v in env.items() if is_thread_var(k)},
        notes=tuple(notes),
    )


def _asked_vcpus(
    measured: Mapping[str, Sequence[Measurement]],
    asked: RunKind,
    runnable: Sequence[tuple[Cell, Confined]],
) -> int:
    """N under the asked budget, as its children had it (else doctor's own, narrowed by
    what was asked)."""
    for runs in measured.values():
        for m in runs:
            if m.kind is asked and m.budget is not None and m.status is Status.MEASURED:
                return m.budget.vcpus
    own = read_budget()
    n = own.vcpus
    for _, confined in runnable:
        if confined.spec.kind is asked:
            if confined.spec.affinity is not None:
                n = min(n, len(confined.spec.affinity))
            if confined.spec.quota is not None:
                n = min(n, max(1, int(confined.spec.quota + 1e-6)))
    return n
