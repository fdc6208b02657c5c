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

UNDECIDED = "its hook saw no library it sizes imported"
"""Why a hooked process has no plan of its own: under `--procs auto` a process decides its
share at its first library import, a fork or its multiprocessing target's start."""
PROCS_FIX = "give --procs M, the processes that run at once: each then takes T as it starts"
"""The fix for a pool in a process with no share of its own: with `--procs M` every hooked
process decides its share when it starts, and the root exports T to the others."""


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


class _Bound(NamedTuple):
    """What a process's pool is judged against: its share, or without one what it had."""

    threads: int
    words: str
    """How the line says it: "the plan 2", or "judged against its OMP_NUM_THREADS=2"."""
    own: bool
    """The hook decided this process's share (its plan)."""


def _bound(record: HookRecord | None, seen: Seen, owner: str, fallback: int) -> _Bound:
    """A process's plan when the hook decided its share. Without one (the hook saw no
    library it sizes imported there, or did not run there) the process has no plan of its
    own: its pool is judged against the variable that sized it, the owner's own or
    OMP_NUM_THREADS, as sampling read them (else `fallback`), and the line says so."""
    if record is not None and record.threads is not None:
        return _Bound(record.threads, f"the plan {record.threads}", True)
    runtime = RUNTIMES_BY_KEY.get(owner)
    env = seen.thread_env or {}
    for name in dict.fromkeys((*(runtime.variables if runtime else ()), "OMP_NUM_THREADS")):
        value = env.get(name, "").split(",")[0].strip()
        if value.isascii() and value.isdigit() and 1 <= int(value) < 2**31:
            return _Bound(int(value), f"judged against its {name}={int(value)}", False)
    return _Bound(fallback, f"judged against {_threads(fallback)} (no thread variable)", False)


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
    tree: bool = True,
) -> list[Line]:
    """The verification's lines, grouped: one per state, runtime and value, listing pids.

    `fallback`: the threads a pool is judged against in a process with neither a plan nor
    a thread variable; `tree`: the shares are the tree's own count (`--procs auto`), where
    a process the hook decided no share for gets one with `--procs M`."""
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
        # Without a share decided by the hook, the process has no plan: its pools are
        # judged against what sized them, and their lines say so (never "the plan").
        unplanned = "" if record is None else f" ({UNDECIDED})"
        for owner, most in sorted(seen.peak.items()):
            runtime = RUNTIMES_BY_KEY.get(owner)
            if runtime is None or runtime.waits == "none" or most == 0:
                continue
            bound = _bound(record, seen, owner, fallback)
            planned = bound.threads
            # A pool that counts its caller (an OpenMP team, OpenBLAS, ORT's intra-op pool)
            # runs T - 1 threads of its own; the caller's thread may be attributed to the
            # pool or not, so the stricter bound applies only when the whole process ran
            # more than T at once.
            over = seen.active > planned
            busy = seen.busy.get(owner, 0)
            allowed = planned - 1 if over and runtime.caller else planned
            if busy > allowed:
                kept = _kept_owner(record, owner, kept_vars)
                beside = " beside the calling thread" if allowed < planned else ""
                threads = (
                    f"{_threads(busy)} busy{beside} while the tree was oversubscribed, "
                    f"{bound.words}"
                )
                if kept is not None:
                    add("kept", label(owner), seen.pid, f"{threads}: the program's {kept}")
                elif bound.own:
                    add("escaped", label(owner), seen.pid, threads, _fix(owner, planned))
                else:
                    fix = PROCS_FIX if tree else ""
                    add("escaped", label(owner), seen.pid, threads + unplanned, fix)
            elif bound.own:
                add(
                    "sized", label(owner), seen.pid, f"{_threads(most)} busy at most, {bound.words}"
                )
            else:
                # Busy beside others while the tree was oversubscribed, on no share of its
                # own: the share it would have had is the cure.
                fix = PROCS_FIX if tree and busy > 1 else ""
                detail = f"{_threads(most)} busy at most, {bound.words}{unplanned}"
                add("unplanned", label(owner), seen.pid, detail, fix)
    for record in by_pid.values():
        for key, knob in sorted(record.knobs.items()):
            value = "" if knob.value is None else f" {knob.value}"
            sessions = f" ({knob.sessions} sessions)" if knob.sessions and knob.sessions > 1 else ""
            add(knob.state, knob_label(key), record.pid, f"{knob.knob}{value}{sessions}")
    order = {s: i for i, s in enumerate(("escaped", "kept", "failed", "unplanned", "sized"))}
    lines: list[Line] = []
    for (state, name, detail, fix), members in groups.items():
        pids = tuple(sorted(members))
        names = tuple(members[p] for p in pids) if state in _ABOUT_PROCESSES else ()
        lines.append(Line(state, name, pids, detail, fix, names))
    return sorted(lines, key=lambda x: (order.get(x.state, 9), x.runtime, x.detail, x.pids))
