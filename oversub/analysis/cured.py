"""`oversub run`'s verification: per runtime and process, sized, kept, escaped or not reached.

Pure. The inputs are what the hook wrote for each process (its record, read back as hostile
input: `parse_record`), and what sampling saw (`Watch`, fed each measured interval): each
process's busy threads per owner in the intervals where the tree was oversubscribed. A pool
escaped when its busy threads exceeded its process's planned threads while the tree had
more runnable threads than N; a setting the program made itself is kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from oversub.core.cures import HookRecord, Knob, Line
from oversub.core.names import Verdict
from oversub.core.results import Interval
from oversub.core.runtimes import RUNTIMES_BY_KEY, label

MAX_RECORD_BYTES = 65536
"""A hook record longer than this is no record the hook wrote: ignored."""

STATES = ("sized", "kept", "failed")

KNOB_OWNERS: Mapping[str, tuple[str, ...]] = {
    "torch": ("libgomp", "libomp", "libiomp5", "mkl"),
    "torch-interop": ("torch",),
    "blas": ("openblas", "mkl", "blis", "libgomp", "libomp", "libiomp5"),
    "onnxruntime": ("onnxruntime",),
    "pyarrow": ("pyarrow",),
    "numba": ("numba",),
    "numexpr": ("numexpr",),
}
"""A hook record's runtime -> the thread owners (`core.runtimes` keys) whose threads it sizes."""

_LABELS: Mapping[str, str] = {
    "torch": "PyTorch intra-op pool",
    "torch-interop": "PyTorch inter-op pool",
    "blas": "BLAS/OpenMP pools (threadpoolctl)",
    "opencv": "OpenCV",
    "variables": "thread variables",
    "duckdb": "DuckDB connections",
}


def knob_label(runtime: str) -> str:
    """The human name of a hook record's runtime."""
    return _LABELS.get(runtime) or label(runtime)


def _count(value: object, low: int = 0) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**31:
        return None
    return value


def _text(value: object, limit: int = 300) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def parse_record(data: bytes) -> HookRecord | None:
    """A record the hook wrote, field by field; None when it is not one (a process of the
    tree controls the file: every field is checked and bounded)."""
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    pid, ppid = _count(raw.get("pid"), 1), _count(raw.get("ppid"), 0)
    role = _text(raw.get("role"), 16)
    if pid is None or ppid is None or role not in ("root", "rank", "worker", "helper"):
        return None
    knobs: dict[str, Knob] = {}
    records = raw.get("records")
    for name, entry in records.items() if isinstance(records, dict) else ():
        if not isinstance(entry, dict) or len(knobs) >= 32 or len(name) > 32:
            continue
        state, knob = _text(entry.get("state"), 16), _text(entry.get("knob"), 80)
        if state in STATES and knob is not None:
            value, sessions = _count(entry.get("value"), 1), _count(entry.get("sessions"), 1)
            knobs[name] = Knob(knob, value, state, sessions)
    user = raw.get("user_vars")
    user_vars = {
        k[:64]: v[:64]
        for k, v in (user.items() if isinstance(user, dict) else ())
        if isinstance(k, str) and isinstance(v, str)
    }
    faults = raw.get("faults")
    return HookRecord(
        pid=pid,
        ppid=ppid,
        start=_count(raw.get("start")),
        role=role,
        threads=_count(raw.get("threads"), 1),
        siblings=_count(raw.get("siblings"), 1),
        user_vars=dict(list(user_vars.items())[:32]),
        knobs=knobs,
        faults=tuple(f for f in (faults if isinstance(faults, list) else [])[:20] if _text(f))[:20],
    )


class Seen(NamedTuple):
    """A process as sampling saw it over the run."""

    pid: int
    ppid: int
    name: str
    cmdline: str
    start_ticks: int | None
    thread_env: Mapping[str, str] | None
    busy: Mapping[str, int]
    """Owner -> most busy threads in one interval where the tree was oversubscribed."""
    peak: Mapping[str, int]
    """Owner -> most busy threads in one interval."""
    active: int = 0
    """Most active threads of the process in one interval where the tree was oversubscribed."""


class Watch:
    """Folds the measured intervals into what `verdicts` needs."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int | None], Seen] = {}

    def add(self, iv: Interval, verdict: Verdict) -> None:
        over = verdict is Verdict.OVERSUBSCRIBED
        for p in iv.processes:
            key = (p.pid, p.start_ticks)
            before = self.seen.get(key)
            busy = dict(before.busy) if before is not None else {}
            peak = dict(before.peak) if before is not None else {}
            for c in p.owner_counts or ():
                peak[c.owner] = max(peak.get(c.owner, 0), c.busy)
                if over:
                    busy[c.owner] = max(busy.get(c.owner, 0), c.busy)
            env = p.thread_env if p.thread_env is not None or before is None else before.thread_env
            active = before.active if before is not None else 0
            if over:
                active = max(active, p.active_threads)
            self.seen[key] = Seen(
                p.pid, p.ppid, p.name, p.cmdline, p.start_ticks, env, busy, peak, active
            )


_ABOUT_PROCESSES = ("not-reached", "variables-only")


def _short(seen: Seen) -> str:
    """A process's command line cut to its first three words (or its name)."""
    words = seen.cmdline.split(" ")[:3]
    return " ".join(words)[:60] if seen.cmdline else seen.name[:16]


def _python(seen: Seen) -> bool:
    first = seen.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]
    return first.startswith(("python", "pypy")) or seen.name.startswith(("python", "pypy"))


def why_unreached(cmdline: str) -> str:
    """Why the hook did not run in a Python process, from its command line."""
    for word in cmdline.split(" ")[1:8]:
        if not word.startswith("-") or word.startswith("--") or word == "-":
            break
        if word in ("-c", "-m"):
            break
        flags = word[1:]
        for flag, reason in (("I", "-I"), ("E", "-E"), ("S", "-S")):
            if flag in flags:
                return f"started with {reason}, which ignores PYTHONPATH or site"
    return "the hook did not report (PYTHONPATH changed on the way, or a Python older than 3.7)"


def _planned(record: HookRecord | None, seen: Seen, fallback: int) -> int:
    if record is not None and record.threads is not None:
        return record.threads
    env = seen.thread_env or {}
    value = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) >= 1 else fallback


def _kept_owner(record: HookRecord | None, owner: str, kept_vars: Mapping[str, str]) -> str | None:
    """The program's own setting that explains `owner`'s size, or None."""
    runtime = RUNTIMES_BY_KEY.get(owner)
    names = runtime.variables if runtime is not None else ()
    for name in names:
        if name in kept_vars or (record is not None and name in record.user_vars):
            return name
    if record is None:
        return None
    for key, knob in record.knobs.items():
        if knob.state == "kept" and owner in KNOB_OWNERS.get(key, ()):
            return f"{knob.knob} = {knob.value}" if knob.value else knob.knob
    return None


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def _fix(owner: str, planned: int) -> str:
    runtime = RUNTIMES_BY_KEY.get(owner)
    if runtime is None:
        return ""
    if runtime.variables:
        return f"set {runtime.variables[0]}={planned} for it"
    if runtime.code:
        return runtime.code.format(t=planned) + " in the program"
    return ""


def verdicts(
    records: Iterable[HookRecord],
    watch: Watch,
    *,
    fallback: int,
    kept_vars: Mapping[str, str],
) -> list[Line]:
    """The verification's lines, grouped: one per state, runtime and value, listing pids."""
    by_pid: dict[int, HookRecord] = {}
    for r in records:
        by_pid[r.pid] = r
    groups: dict[tuple[str, str, str, str], dict[int, str]] = {}

    def add(state: str, runtime: str, pid: int, detail: str, fix: str = "", name: str = "") -> None:
        groups.setdefault((state, runtime, detail, fix), {})[pid] = name

    matched: set[int] = set()
    for seen in sorted(watch.seen.values(), key=lambda s: s.pid):
        record = by_pid.get(seen.pid)
        if record is not None and None not in (record.start, seen.start_ticks):
            record = record if record.start == seen.start_ticks else None
        if record is not None:
            matched.add(record.pid)
        elif _python(seen):
            add("not-reached", "", seen.pid, why_unreached(seen.cmdline), name=_short(seen))
        else:
            add("variables-only", "", seen.pid, "not Python", name=_short(seen))
        planned = _planned(record, seen, fallback)
        # A pool that counts its caller (an OpenMP team, OpenBLAS, ORT's intra-op pool) runs
        # T - 1 threads of its own; the caller's thread may be attributed to the pool or not,
        # so the stricter bound applies only when the whole process ran more than T at once.
        over = seen.active > planned
        for owner, most in sorted(seen.peak.items()):
            runtime = RUNTIMES_BY_KEY.get(owner)
            if runtime is None or runtime.waits == "none" or most == 0:
                continue
            busy = seen.busy.get(owner, 0)
            allowed = planned - 1 if over and runtime.caller else planned
            if busy > allowed:
                kept = _kept_owner(record, owner, kept_vars)
                beside = " beside the calling thread" if allowed < planned else ""
                threads = (
                    f"{_threads(busy)} busy{beside} while the tree was oversubscribed, "
                    f"the plan {planned}"
                )
                if kept is not None:
                    add("kept", label(owner), seen.pid, f"{threads}: the program's {kept}")
                else:
                    add("escaped", label(owner), seen.pid, threads, _fix(owner, planned))
            else:
                add(
                    "sized",
                    label(owner),
                    seen.pid,
                    f"{_threads(most)} busy at most, the plan {planned}",
                )
    for record in by_pid.values():
        for key, knob in sorted(record.knobs.items()):
            value = "" if knob.value is None else f" {knob.value}"
            sessions = f" ({knob.sessions} sessions)" if knob.sessions and knob.sessions > 1 else ""
            add(knob.state, knob_label(key), record.pid, f"{knob.knob}{value}{sessions}")
    order = {s: i for i, s in enumerate(("escaped", "kept", "failed", "sized"))}
    lines: list[Line] = []
    for (state, name, detail, fix), members in groups.items():
        pids = tuple(sorted(members))
        names = tuple(members[p] for p in pids) if state in _ABOUT_PROCESSES else ()
        lines.append(Line(state, name, pids, detail, fix, names))
    return sorted(lines, key=lambda x: (order.get(x.state, 9), x.runtime, x.detail, x.pids))
