"""`oversub doctor` as text (a table and what it says) and as JSON (every key in
docs/cli.md, `oversub doctor`).

Pure: strings and dicts from a `core.checkups.DoctorReport`. Versions, errors, paths and
what a library says of itself come from the environment under test: every one is escaped
for the terminal (`escape.terminal`) and bounded by the side that read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oversub.core.checkups import (
    Confined,
    DoctorReport,
    DoctorRow,
    Measurement,
    RunKind,
    SeenBudget,
    SizedFrom,
    Sizing,
    Status,
)
from oversub.core.cpulist import format_cpulist
from oversub.core.plural import count, noun
from oversub.core.runtimes import waits
from oversub.render.escape import terminal

GAP = "  "

_SOURCE_WORDS = {
    SizedFrom.BUDGET: "its N (affinity and quota)",
    SizedFrom.AFFINITY: "affinity",
    SizedFrom.QUOTA: "the quota",
    SizedFrom.CORES: "the machine's CPUs",
    SizedFrom.NO_THREADS: "starts no thread",
    SizedFrom.UNCLEAR: "not told apart",
}

_STATUS_WORDS = {
    Status.FAILED: "failed",
    Status.CRASHED: "crashed",
    Status.TIMED_OUT: "timed out",
    Status.NOT_RUN: "not run",
}


def sized_words(s: Sizing | None) -> str:
    """ "affinity, ignores the quota" and the like: what the counts say, no more."""
    if s is None:
        return "not measured"
    words = _SOURCE_WORDS[s.source]
    if s.source is SizedFrom.AFFINITY:
        return words + (", ignores the quota" if s.ignores_quota else ", quota not told")
    if s.source is SizedFrom.QUOTA:
        return words + (", ignores affinity" if s.ignores_affinity else ", affinity not told")
    if s.source is SizedFrom.CORES:
        return words + ": ignores affinity and quota"
    if s.source is SizedFrom.UNCLEAR and s.ignores_quota is not None:
        return words + (", ignores the quota" if s.ignores_quota else ", follows the quota")
    return words


def _run(row: DoctorRow, kind: RunKind) -> Measurement | None:
    return next((m for m in row.measurements if m.kind is kind), None)


def _threads_cell(m: Measurement | None, owners: bool = True) -> str:
    """ "3 (pyarrow)", "2 (numba 1, openblas 1)": the compute threads and their owners."""
    if m is None:
        return "-"
    if m.status is not Status.MEASURED:
        return _STATUS_WORDS[m.status]
    total = _compute(m)
    pools = sorted((o, n) for o, n in m.started.items() if n and waits(o) != "none")
    if not owners or not pools:
        return str(total)
    if len(pools) == 1:
        return f"{total} ({pools[0][0]})"
    return f"{total} ({', '.join(f'{o} {n}' for o, n in pools)})"


def _compute(m: Measurement) -> int:
    return sum(n for owner, n in m.started.items() if waits(owner) != "none")


def _verdict_cell(row: DoctorRow, procs: int, vcpus: int) -> str:
    if row.oversubscribes is None or row.width is None:
        return "-"
    sign = ">" if row.oversubscribes else "<="
    what = f"{procs} x {row.width} {sign} {vcpus}"
    return f"{'yes' if row.oversubscribes else 'no'}: {what}{'' if row.width_measured else '?'}"


def _knob_cell(row: DoctorRow) -> str:
    """Its variable at T, and its own call where it has one ("or torch.set_num_threads(1)");
    the generic threadpoolctl call of a BLAS is in the JSON."""
    k = row.knob
    parts = [f"{k.variable}={k.threads}"] if k.variable is not None else []
    if k.code is not None and (row.checkup.code is not None or not parts):
        parts.append(k.code)
    return " or ".join(parts) or "-"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        GAP.join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def _budget_phrase(c: Confined) -> str:
    parts = []
    if c.spec.quota is not None:
        where = f" (cgroup v{c.version} {c.cgroup})" if c.cgroup else ""
        applied = "" if c.applied else " NOT APPLIED"
        parts.append(f"a CPU quota of {c.spec.quota:g} {noun(c.spec.quota, 'CPU')}{where}{applied}")
    if c.spec.affinity is not None:
        cpus = c.spec.affinity
        parts.append(f"affinity to {noun(len(cpus), 'CPU')} {format_cpulist(cpus)}")
    return terminal(", ".join(parts) if parts else "nothing added")


def _inherited(report: DoctorReport) -> SeenBudget | None:
    """The budget doctor's own children had with nothing added (a container's, here)."""
    return next(
        (
            m.budget
            for r in report.rows
            for m in r.measurements
            if m.kind is RunKind.HOST and m.budget is not None
        ),
        None,
    )


def _seen_phrase(b: SeenBudget) -> str:
    """ "2 CPUs of affinity, a CPU quota of 1.5 CPUs": what a child had."""
    quota = f", a CPU quota of {b.quota:g} {noun(b.quota, 'CPU')}" if b.quota is not None else ""
    return f"{count(b.affinity, 'CPU')} of affinity{quota}"


def doctor_text(report: DoctorReport) -> str:
    """The table, the budgets it compared, what ignores a quota, what oversubscribes."""
    asked = report.runs[0]
    inherited = _inherited(report)
    host_n = inherited.vcpus if inherited is not None else None
    phrase = _budget_phrase(asked)
    if asked.spec.kind is RunKind.HOST and inherited is not None:
        phrase = f"as oversub runs here ({_seen_phrase(inherited)})"
    lines = [
        f"oversub doctor: Python {terminal(report.python_version)} at {terminal(report.python)}",
        f"budget: {phrase}: N = {report.vcpus}; "
        f"M = {count(report.procs, 'process')}, T = {count(report.threads, 'thread')} each",
        "",
    ]
    separate_host = asked.spec.kind is not RunKind.HOST
    head = ["runtime", "version", "threads"]
    if separate_host:
        head.append(f"host N={host_n}" if host_n is not None else "host")
    head += ["sized from", f"at M={report.procs} on N={report.vcpus}", "knob"]
    cells = [head]
    absent: list[str] = []
    problems: list[str] = []
    for row in report.rows:
        if not row.installed:
            absent.append(row.checkup.key)
            continue
        cell = [
            row.checkup.key,
            terminal(row.version or "?"),
            _threads_cell(_run(row, asked.spec.kind)),
        ]
        if separate_host:
            cell.append(_threads_cell(_run(row, RunKind.HOST), owners=False))
        cell += [
            sized_words(row.sizing),
            _verdict_cell(row, report.procs, report.vcpus),
            terminal(_knob_cell(row)),
        ]
        cells.append(cell)
        for m in row.measurements:
            if m.status is not Status.MEASURED and m.status is not Status.NOT_RUN:
                problems.append(
                    f"  {row.checkup.key} ({m.kind}): {_STATUS_WORDS[m.status]}: "
                    f"{terminal(m.error or '?')}"
                )
    if len(cells) > 1:
        lines += _table(cells)
    else:
        lines.append("none of the runtimes doctor knows is installed in this environment")
    lines += ["", *_explain(report, separate_host, host_n)]
    if problems:
        lines += ["what failed (a row, not doctor):", *problems]
    if absent:
        lines.append(f"not installed: {', '.join(absent)}")
    return "\n".join(lines) + "\n"


def _explain(report: DoctorReport, separate_host: bool, host_n: int | None) -> list[str]:
    out = [
        "threads: of its pools (their owner), started by its import and one operation, "
        "each runtime alone in a fresh process"
        + (f"; host: the same with nothing added (N = {host_n})" if separate_host else ""),
        "at M: M x the threads that ran at once in its operation, against N "
        "(?: not seen running: every thread it started and the caller)",
        "budgets compared: "
        + "; ".join(f"{c.spec.kind}: {_budget_phrase(c)}" for c in report.runs),
    ]
    for c in report.runs:
        if not c.applied and c.note:
            out.append(f"not applied: {c.spec.kind}: {terminal(c.note)}")
    if any(not c.applied and c.spec.quota is not None for c in report.runs):
        inherited = _inherited(report)
        if inherited is not None and inherited.quota is not None:
            out.append(
                f"  no quota of doctor's own: whether a runtime reads one is told from the "
                f"{inherited.quota:g}-CPU quota it runs under (a count that still moves with "
                "affinity ignores it), not measured for the others"
            )
        else:
            out.append(
                "  without a quota to compare, whether a runtime reads one is not measured; "
                "run doctor as root where the cgroup cpu controller may be written"
            )
    measured = [r for r in report.rows if r.installed and r.sizing is not None]
    ignoring = [r.checkup.key for r in measured if r.sizing and r.sizing.ignores_quota]
    following = [r.checkup.key for r in measured if r.sizing and r.sizing.ignores_quota is False]
    if ignoring:
        out.append(f"ignore a CPU quota (measured): {', '.join(ignoring)}")
    if following:
        out.append(f"follow a CPU quota (measured): {', '.join(following)}")
    over = [r for r in report.rows if r.oversubscribes]
    if over:
        if report.procs > report.vcpus:
            out.append(
                f"M = {report.procs} processes on N = {report.vcpus}: "
                "even one thread each oversubscribes"
            )
        else:
            out.append(
                f"oversubscribe at M = {report.procs}: {', '.join(r.checkup.key for r in over)}: "
                f"set the knob of each to T = {report.threads}"
            )
    elif measured:
        out.append(f"none oversubscribes at M = {report.procs} on N = {report.vcpus}")
    if report.thread_env:
        named = ", ".join(f"{k}={v}" for k, v in sorted(report.thread_env.items()))
        out.append(
            f"the children inherited {terminal(named)} (--without-thread-vars: measure without)"
        )
    out.extend(terminal(n) for n in report.notes)
    return out


# --------------------------------------------------------------------------- JSON


def _run_dict(c: Confined) -> dict[str, Any]:
    return {
        "kind": c.spec.kind.value,
        "affinity": list(c.spec.affinity) if c.spec.affinity is not None else None,
        "quota_cpus": c.spec.quota,
        "applied": c.applied,
        "cgroup": c.cgroup,
        "cgroup_version": c.version,
        "note": c.note,
    }


def _measurement_dict(m: Measurement) -> dict[str, Any]:
    b = m.budget
    return {
        "kind": m.kind.value,
        "status": m.status.value,
        "error": m.error,
        "seconds": m.seconds,
        "online": b.online if b else None,
        "affinity_cpus": b.affinity if b else None,
        "quota_cpus": b.quota if b else None,
        "vcpus": b.vcpus if b else None,
        "threads": _compute(m) if m.status is Status.MEASURED else None,
        "started": dict(sorted(m.started.items())),
        "at_import": m.at_import,
        "busy": m.busy,
        "reported": dict(m.reported),
        "version": m.version,
    }


def _row_dict(row: DoctorRow) -> dict[str, Any]:
    s = row.sizing
    return {
        "runtime": row.checkup.key,
        "module": row.checkup.module,
        "operation": row.checkup.operation,
        "installed": row.installed,
        "version": row.version,
        "threads": row.started,
        "width": row.width,
        "width_measured": row.width_measured,
        "oversubscribes": row.oversubscribes,
        "sized_from": s.source.value if s else None,
        "ignores_quota": s.ignores_quota if s else None,
        "ignores_affinity": s.ignores_affinity if s else None,
        "knob": {"variable": row.knob.variable, "code": row.knob.code, "threads": row.knob.threads},
        "variables": dict(row.variables),
        "measurements": [_measurement_dict(m) for m in row.measurements],
    }


def doctor_dict(report: DoctorReport) -> dict[str, Any]:
    """The report as JSON-ready data (docs/cli.md names every key)."""
    return {
        "python": {
            "executable": report.python,
            "version": report.python_version,
            "prefix": report.prefix,
        },
        "vcpus": report.vcpus,
        "procs": report.procs,
        "threads_per_process": report.threads,
        "thread_env": dict(sorted(report.thread_env.items())),
        "runs": [_run_dict(c) for c in report.runs],
        "runtimes": [_row_dict(r) for r in report.rows],
        "notes": list(report.notes),
    }
