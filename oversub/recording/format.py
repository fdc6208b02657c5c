"""The recording format (`--record FILE`): NDJSON records to and from results, pure.

One JSON object per line, in this order:

- `header`: `"format": "oversub-recording"`, `"version": 1`, the oversub version, host, start
  time (UTC), what was watched (`mode`, `pid`, `command`), the interval asked for, the
  budget and the thresholds of the run;
- `interval`, one per measured interval (possibly two or more merged, see
  `recording.replay.merge`): its wall-clock end (`timestamp`, UTC), monotonic `t0`/`t1`,
  the raw deltas of each process and of the tree, host context and unavailable signals.
  Rates are not stored: they are recomputed by `rates.measures` from the raw deltas, the
  formula of a live run, so they come back bit for bit. What a process *is* (name, command
  line, pools, thread variables) is written when first seen and again only when it changes
  (`d`), which keeps an interval small;
- `summary` last: the run's summary as `watch --format ndjson` prints it, and for `check`
  how it ended (`command_status`, `timed_out`, `interrupted`).

Reading is strict (the file is untrusted input): every field is type-checked and bounded,
and anything else raises `NotARecording` naming the line. `Decoder` reads a prefix: a run
killed mid-write leaves a file whose last line may be cut, which the caller drops.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from oversub.analysis.fields import (
    MAX_NUMBER,
    BadRecord,
    array,
    budget_of,
    field,
    number,
    obj,
    opt_number,
    opt_per_second,
    opt_whole,
    per_second,
    text,
    text_map,
    thresholds_of,
    whole,
    whole_map,
)
from oversub.analysis.rates import Measures, measures, tree_totals
from oversub.analysis.spin import NOT_READ, SPIN_CODE, SPIN_HINT
from oversub.core.errors import NotARecording
from oversub.core.model import MAX_VCPUS, Budget
from oversub.core.names import Signal, WaitKind
from oversub.core.pcprofile import NotMeasured, WaitShare
from oversub.core.pools import POOLS_BY_KEY
from oversub.core.results import HostRates, Interval, ProcessRates
from oversub.core.runtimes import RUNTIMES_BY_KEY, UNATTRIBUTED
from oversub.recording.types import Ending, Header

FORMAT = "oversub-recording"
VERSION = 1
_NS = 1_000_000_000


# --------------------------------------------------------------------------- writing


def _budget_json(b: Budget) -> dict[str, Any]:
    return {
        "pid": b.pid,
        "vcpus": b.vcpus,
        "logical": b.logical,
        "physical": b.physical,
        "affinity": list(b.affinity),
        "quota": None if b.quota is None else b.quota._asdict(),
        "cpuset": None
        if b.cpuset is None
        else {"cpus": list(b.cpuset.cpus), "cgroup": b.cpuset.cgroup, "version": b.cpuset.version},
        "numa": {str(k): list(v) for k, v in b.numa.items()},
        "cores": [list(c) for c in b.cores],
        "limited_by": b.limited_by,
        "notes": list(b.notes),
        "launcher": b.launcher,
        "cgroup": b.cgroup,
    }


def header_record(h: Header) -> dict[str, Any]:
    return {
        "type": "header",
        "format": FORMAT,
        "version": VERSION,
        "oversub": h.version,
        "host": h.host,
        "started": h.started,
        "mode": h.mode,
        "pid": h.pid,
        "command": None if h.command is None else list(h.command),
        "interval": h.interval,
        "budget": _budget_json(h.budget),
        "thresholds": h.thresholds._asdict(),
    }


def _describe(p: ProcessRates) -> dict[str, Any]:
    """What a process is (not what it did): written when it first appears or changes."""
    return {
        "ppid": p.ppid,
        "name": p.name,
        "cmdline": p.cmdline,
        "pools": None if p.pools is None else list(p.pools),
        "thread_env": None if p.thread_env is None else dict(p.thread_env),
        "live_pools": None if p.live_pools is None else dict(p.live_pools),
        "live_threads": None if p.live_threads is None else dict(p.live_threads),
        "owners": None if p.owners is None else [[t, o] for t, o in sorted(p.owners.items())],
    }


class Encoder:
    """Interval records of one recording; remembers what each process was last described as."""

    def __init__(self) -> None:
        self._described: dict[tuple[int, int | None], dict[str, Any]] = {}

    def interval(self, iv: Interval, timestamp: str) -> dict[str, Any]:
        t = iv.totals
        return {
            "type": "interval",
            "timestamp": timestamp,
            "t0": iv.t0,
            "t1": iv.t1,
            "root": iv.root_pid,
            "vcpus": iv.vcpus,
            "totals": {
                "processes": t.processes,
                "threads": t.threads,
                "cpu_s": t.cpu_s,
                "delay_s": t.delay_s,
                "ictx": t.involuntary_ctx,
                "vctx": t.voluntary_ctx,
            },
            "host": iv.host._asdict(),
            "unavailable": [s.value for s in iv.unavailable],
            "p": [self._process(p) for p in iv.processes],
        }

    def _process(self, p: ProcessRates) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pid": p.pid,
            "start": p.start_ticks,
            "threads": p.threads,
            "cpu_s": p.cpu_s,
            "delay_s": p.delay_s,
            "ictx": p.involuntary_ctx,
            "vctx": p.voluntary_ctx,
        }
        # Per thread, runnable nanoseconds (what `active_cpu` is compared with), idle ones left
        # out: they are never active whatever the threshold (it is > 0).
        kept = [i for i, r in enumerate(p.thread_runnable_s) if round(r * _NS) > 0]
        if kept:
            out["run"] = [[p.thread_ids[i], round(p.thread_runnable_s[i] * _NS)] for i in kept]
            if p.thread_switches:
                out["sw"] = [list(p.thread_switches[i]) for i in kept]
        if p.exited:
            out["exited"] = True
        if p.wait is not None:
            out["wait"] = p.wait.value
        if p.parent_threads_at_start is not None:
            out["pf"] = p.parent_threads_at_start
        if p.wait_share is not None:
            out["ws"] = _share_json(p.wait_share)
        described = _describe(p)
        key = (p.pid, p.start_ticks)
        if self._described.get(key) != described:
            self._described[key] = described
            out["d"] = described
        return out


def dumps(record: Mapping[str, Any]) -> str:
    """One record as one line (no newline): compact, UTF-8 kept, NaN refused."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# --------------------------------------------------------------------------- reading


def header_of(d: Mapping[str, Any]) -> Header:
    """The header record; NotARecording-worthy BadRecord when it is not one this oversub reads."""
    if d.get("type") != "header" or d.get("format") != FORMAT:
        raise BadRecord("not an oversub recording (no header)")
    version = d.get("version")
    if version != VERSION:
        raise BadRecord(f"format version {version!r}: this oversub reads version {VERSION}")
    command = field(d, "command")
    pid = field(d, "pid")
    return Header(
        version=text(field(d, "oversub"), "oversub"),
        host=text(field(d, "host"), "host"),
        started=text(field(d, "started"), "started"),
        mode=text(field(d, "mode"), "mode"),
        pid=None if pid is None else whole(pid, "pid", 1),
        command=None
        if command is None
        else tuple(text(a, "command") for a in array(command, "command")),
        interval=number(field(d, "interval"), "interval"),
        budget=budget_of(field(d, "budget")),
        thresholds=thresholds_of(field(d, "thresholds")),
        episodes="episode_share" in obj(field(d, "thresholds"), "thresholds"),
    )


class Decoder:
    """Interval records back into `Interval`s (rates recomputed from the raw deltas; active
    threads left at 0, as `rates.interval` leaves them: `rates.counted` counts them)."""

    def __init__(self) -> None:
        self._described: dict[tuple[int, int | None], dict[str, Any]] = {}

    def interval(self, d: Mapping[str, Any]) -> tuple[Interval, str]:
        """(the interval, its UTC timestamp)."""
        t0 = number(field(d, "t0"), "t0")
        t1 = number(field(d, "t1"), "t1")  # at most MAX_NUMBER: t1 - t0 is finite
        if t1 <= t0:
            raise BadRecord("t1 is not after t0")
        seconds = t1 - t0
        vcpus = whole(field(d, "vcpus"), "vcpus", 1, MAX_VCPUS)
        processes = tuple(self._process(p, seconds) for p in array(field(d, "p"), "p"))
        live = [p for p in processes if not p.exited]
        tot = obj(field(d, "totals"), "totals")
        totals = tree_totals(
            _raw_measures(tot, seconds),
            live,
            vcpus,
            processes=whole(field(tot, "processes"), "processes"),
            threads=whole(field(tot, "threads"), "threads"),
            active=0,
        )
        host = obj(field(d, "host"), "host")
        unavailable = []
        for name in array(field(d, "unavailable"), "unavailable"):
            try:
                unavailable.append(Signal(name))
            except ValueError:
                raise BadRecord(f"unknown signal {name!r}") from None
        iv = Interval(
            t0=t0,
            t1=t1,
            root_pid=whole(field(d, "root"), "root"),
            vcpus=vcpus,
            processes=tuple(sorted(processes, key=lambda r: (-r.cpu_percent, r.exited, r.pid))),
            totals=totals,
            host=HostRates(
                **{name: opt_number(field(host, name), name) for name in HostRates._fields}
            ),
            unavailable=tuple(unavailable),
        )
        return iv, text(field(d, "timestamp"), "timestamp")

    def _process(self, raw: Any, seconds: float) -> ProcessRates:
        d = obj(raw, "process")
        pid = whole(field(d, "pid"), "pid", 1)
        start = opt_whole(field(d, "start"), "start")
        if "d" in d:
            self._described[(pid, start)] = obj(d["d"], "d")
        desc = self._described.get((pid, start))
        if desc is None:
            raise BadRecord(f"process {pid} is not described")
        runs = [array(r, "run") for r in array(d.get("run", []), "run")]
        if any(len(r) != 2 for r in runs):
            raise BadRecord("run is not a list of [tid, nanoseconds]")
        switches = [array(r, "sw") for r in array(d.get("sw", []), "sw")]
        if switches and (len(switches) != len(runs) or any(len(r) != 2 for r in switches)):
            raise BadRecord("sw is not a list of [voluntary, involuntary] per run entry")
        wait = d.get("wait")
        pools = desc.get("pools")
        m = _raw_measures(d, seconds)
        try:
            kind = None if wait is None else WaitKind(wait)
        except ValueError:
            raise BadRecord(f"unknown wait {wait!r}") from None
        return ProcessRates(
            pid=pid,
            ppid=whole(field(desc, "ppid"), "ppid"),
            name=text(field(desc, "name"), "name"),
            cmdline=text(field(desc, "cmdline"), "cmdline"),
            threads=whole(field(d, "threads"), "threads"),
            active_threads=0,
            pools=None if pools is None else tuple(_pool(x) for x in array(pools, "pools")),
            thread_env=text_map(desc.get("thread_env"), "thread_env"),
            exited=d.get("exited") is True,
            wait=kind,
            start_ticks=start,
            live_pools=_pool_map(desc.get("live_pools"), "live_pools"),
            live_threads=_pool_map(desc.get("live_threads"), "live_threads"),
            owners=_owners_of(desc.get("owners")),
            thread_ids=tuple(whole(r[0], "tid") for r in runs),
            parent_threads_at_start=opt_whole(d.get("pf"), "pf"),
            wait_share=_share_of(d.get("ws")),
            thread_runnable_s=tuple(
                per_second(whole(r[1], "runnable") / _NS, "runnable", seconds) for r in runs
            ),
            thread_switches=tuple(
                (whole(r[0], "voluntary"), whole(r[1], "involuntary")) for r in switches
            ),
            **m._asdict(),
        )


def _pool(v: Any) -> str:
    """A pool key of the catalogue (`core.pools`); anything else is not oversub's."""
    key = text(v, "pool")
    if key not in POOLS_BY_KEY:
        raise BadRecord(f"unknown pool {key[:40]!r}")
    return key


def _pool_map(v: Any, what: str) -> dict[str, int] | None:
    """Live sizes by pool key: keys of the catalogue only."""
    sizes = whole_map(v, what)
    for key in sizes or ():
        _pool(key)
    return sizes


def _owners_of(v: Any) -> dict[int, str] | None:
    """A description's `owners` ([[tid, owner], ...]): owners of the catalogue only."""
    if v is None:
        return None
    out: dict[int, str] = {}
    for pair in array(v, "owners"):
        entry = array(pair, "owners")
        if len(entry) != 2:
            raise BadRecord("owners is not a list of [tid, owner]")
        owner = text(entry[1], "owner")
        if owner != UNATTRIBUTED and owner not in RUNTIMES_BY_KEY:
            raise BadRecord(f"unknown owner {owner[:40]!r}")
        out[whole(entry[0], "tid")] = owner
    return out


_UNMEASURED = frozenset({k.value for k in NotMeasured} | set(NOT_READ))
_SPIN_KEYS = frozenset({e.key for e in SPIN_CODE} | {SPIN_HINT})


def _share_json(w: WaitShare) -> dict[str, Any]:
    """A process's `WaitShare`, as the interval that carries it records it."""
    return {
        "n": w.samples,
        "w": w.waiting,
        "rt": w.runtime,
        "at": w.at,
        "k": w.windows,
        "no": w.unmeasured,
        "why": w.why,
    }


def _share_of(v: Any) -> WaitShare | None:
    """A recorded `ws`: counts that agree, a runtime and a reason oversub knows."""
    if v is None:
        return None
    d = obj(v, "ws")
    samples, waiting = whole(field(d, "n"), "ws.n"), whole(field(d, "w"), "ws.w")
    if waiting > samples:
        raise BadRecord("ws.w is more than ws.n")
    runtime, unmeasured = d.get("rt"), d.get("no")
    if runtime is not None and text(runtime, "ws.rt") not in _SPIN_KEYS:
        raise BadRecord(f"unknown wait runtime {str(runtime)[:40]!r}")
    if unmeasured is not None and text(unmeasured, "ws.no") not in _UNMEASURED:
        raise BadRecord(f"unknown reason not measured {str(unmeasured)[:40]!r}")
    return WaitShare(
        samples,
        waiting,
        runtime,
        number(field(d, "at"), "ws.at", -MAX_NUMBER),
        whole(field(d, "k"), "ws.k", 1),
        unmeasured,
        text(d.get("why", ""), "ws.why"),
    )


def _raw_measures(d: Mapping[str, Any], seconds: float) -> Measures:
    """The rates of a process's or the tree's recorded raw deltas, by the live run's formula."""
    return measures(
        seconds,
        per_second(field(d, "cpu_s"), "cpu_s", seconds),
        opt_per_second(field(d, "delay_s"), "delay_s", seconds),
        opt_whole(field(d, "ictx"), "ictx"),
        opt_whole(field(d, "vctx"), "vctx"),
    )


def ending_of(d: Mapping[str, Any]) -> Ending:
    """The summary record (only what a replay needs and what it is compared with)."""
    verdict = field(d, "verdict")
    status = d.get("command_status")
    metrics = obj(d.get("metrics") or {}, "metrics")
    if len(metrics) > 64:
        raise BadRecord("metrics: more than 64")
    return Ending(
        verdict=None if verdict is None else text(verdict, "verdict"),
        findings=tuple(
            text(field(obj(f, "finding"), "rule"), "rule")
            for f in array(field(d, "findings"), "findings")
        ),
        target_exited=field(d, "target_exited") is True,
        notes=tuple(text(n, "note") for n in array(field(d, "notes"), "notes")),
        command_status=None if status is None else whole(status, "command_status", -(2**31)),
        timed_out=d.get("timed_out") is True,
        interrupted=d.get("interrupted") is True,
        metrics=tuple(
            (text(k, "metric"), number(v, "metric", -math.inf, math.inf))
            for k, v in metrics.items()
        ),
    )


def bad(line: int, problem: Exception) -> NotARecording:
    """The error for a wrong record at `line` (1-based)."""
    return NotARecording(f"line {line}: {problem}")
