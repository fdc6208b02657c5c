"""JSON-ready dicts of a run: the public schema of every `--format json` / `ndjson` output
of what was measured (the budget and a plan: `render.plan_formats`).

The keys are a contract with scripts, documented one by one (docs/cli.md; an interval
record's here), so keys are only ever added. Floats that come from measurements are rounded
to 3 decimals and non-finite values become null (JSON has no NaN). This module must not
import rich: the CLI's JSON paths import it alone to stay fast.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oversub.core.libraries import object_of
from oversub.render.plan_formats import budget_dict

if TYPE_CHECKING:  # annotations only: `recommend --format env` must not build these classes
    from oversub.core.origin import NodeIdentity
    from oversub.core.results import (
        Ancestor,
        Assessment,
        Episode,
        EpisodeTotal,
        Finding,
        HostRates,
        Interval,
        OwnerCount,
        ProcessRates,
        ProcessSummary,
        Summary,
        Totals,
    )


def json_number(value: float | None) -> float | None:
    """A measured float for JSON: 3 decimals, None for None/NaN/inf."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, 3)


def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if env is None else dict(env)


def _live(live: Mapping[str, int] | None) -> dict[str, int] | None:
    return None if live is None else dict(live)


def _list(values: tuple[str, ...] | None) -> list[str] | None:
    return None if values is None else list(values)


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as a JSON object.

    Keys: `rule` (stable id), `severity` ("critical"/"warning"/"info"), `verdict` (the
    verdict it argues for), `message` (one sentence), `pids` (list[int]), `evidence`
    (object: name -> number/string/null, floats rounded to 3 decimals), `fix` (str).
    """
    evidence: dict[str, float | int | str | None] = {}
    for key, value in f.evidence.items():
        evidence[key] = json_number(value) if isinstance(value, float) else value
    return {
        "rule": f.rule,
        "severity": f.severity.value,
        "verdict": f.verdict.value,
        "message": f.message,
        "pids": list(f.pids),
        "evidence": evidence,
        "fix": f.fix,
    }


def totals_dict(t: Totals) -> dict[str, Any]:
    """Totals: `processes`, `threads`, `active_threads`, `busy_processes`, `pool_threads`,
    `pool_processes` (ints), `cpu_percent`, `demand`, `run_delay_ratio`,
    `involuntary_ctx_per_s`, `voluntary_ctx_per_s`, `involuntary_ctx_per_cpu_s` (floats or
    null)."""
    return {
        "processes": t.processes,
        "threads": t.threads,
        "active_threads": t.active_threads,
        "busy_processes": t.busy_processes,
        "cpu_percent": json_number(t.cpu_percent),
        "demand": json_number(t.demand),
        "run_delay_ratio": json_number(t.run_delay_ratio),
        "involuntary_ctx_per_s": json_number(t.involuntary_ctx_per_s),
        "voluntary_ctx_per_s": json_number(t.voluntary_ctx_per_s),
        "involuntary_ctx_per_cpu_s": json_number(t.involuntary_ctx_per_cpu_s),
        "pool_threads": t.pool_threads,
        "pool_processes": t.pool_processes,
    }


def host_dict(h: HostRates) -> dict[str, float | None]:
    """Host context: every `HostRates` field (`outside_cpus`, `steal_cpus`, `psi_some`,
    `throttled_ratio`, `throttled_s`), float or null when unknown."""
    return {name: json_number(getattr(h, name)) for name in h._fields}


def _process_rates_dict(r: ProcessRates) -> dict[str, Any]:
    return {
        "pid": r.pid,
        "ppid": r.ppid,
        "name": r.name,
        "threads": r.threads,
        "active_threads": r.active_threads,
        "cpu_percent": json_number(r.cpu_percent),
        "demand": json_number(r.demand),
        "run_delay_ratio": json_number(r.run_delay_ratio),
        "involuntary_ctx_per_s": json_number(r.involuntary_ctx_per_s),
        "voluntary_ctx_per_s": json_number(r.voluntary_ctx_per_s),
        "pools": _list(r.pools),
        "thread_env": _env(r.thread_env),
        "exited": r.exited,
        "live_pools": _live(r.live_pools),
        "owners": _owners(r.owner_counts),
    }


def _owners(counts: tuple[OwnerCount, ...] | None) -> list[dict[str, Any]] | None:
    """Threads by owner: `owner` (a runtime key of docs/pools.md; `libgomp@PACKAGE` for an
    OpenMP runtime vendored by a package without a row; `lib:` and the percent-encoded
    object path for a library without a row; or "unattributed"), `threads`, `busy`
    (active), `ran` (ran or waited at all), `runnable_s`; for a library without a row also
    `library` (its name, from the path) and `object` (the path its threads' code is in);
    null = not read."""
    if counts is None:
        return None
    from oversub.core.runtimes import label

    out = []
    for c in counts:
        entry = c._asdict() | {"runnable_s": json_number(c.runnable_s)}
        path = object_of(c.owner)
        if path is not None:
            entry |= {"library": label(c.owner), "object": path}
        out.append(entry)
    return out


def interval_dict(i: Interval, a: Assessment) -> dict[str, Any]:
    """One interval and its assessment: one line of `--format ndjson`.

    Keys:
      - `t` (float): end of the interval on the monotonic clock (CLOCK_MONOTONIC: seconds
        since boot on Linux, not counting suspend); only differences between records mean
        anything. The NDJSON record adds `timestamp`, the wall clock (UTC, ISO 8601).
      - `seconds` (float): length of the interval.
      - `root_pid` (int), `vcpus` (int): the watched tree and its budget N.
      - `verdict` (str): "ok", "at-risk", "starved" or "oversubscribed".
      - `findings` (list): `finding_dict` objects, worst first.
      - `processes` (list): per process `pid`, `ppid`, `name`, `threads`, `active_threads`,
        `cpu_percent` (100 = one vCPU), `demand` (average runnable threads),
        `run_delay_ratio`, `involuntary_ctx_per_s`, `voluntary_ctx_per_s` (null when
        unknown), `pools` (list or null = unknown), `thread_env` (object or null),
        `live_pools` (object: pool -> threads it is set to now, read from the process's
        memory; null = not readable), `exited` (bool), `owners` (list or null: threads by
        the runtime that owns them, each `owner`, `threads`, `busy`, `ran`, `runnable_s`;
        docs/pools.md); sorted by CPU use, highest first.
      - `totals` (object): the tree: `processes`, `threads`, `active_threads`,
        `busy_processes`, `pool_threads` (threads the multi-thread native pools that exist
        run at once, summed over processes), `pool_processes` (processes holding one),
        `cpu_percent`, `demand`, `run_delay_ratio`, `involuntary_ctx_per_s`,
        `voluntary_ctx_per_s`, `involuntary_ctx_per_cpu_s`.
      - `host` (object): `outside_cpus`, `steal_cpus`, `psi_some`, `throttled_ratio`,
        `throttled_s` (null when unknown).
      - `unavailable` (list[str]): signals not measured here: `schedstat`, `psi` (kernel
        lacks them), `pools`, `thread_env` (another user's process: permission denied),
        `live_pools` (a process's memory may not be read: not root, not its ancestor).
    All measured floats are rounded to 3 decimals.
    """
    return _interval_fields(i, a, [_process_rates_dict(r) for r in i.processes])


def _interval_fields(i: Interval, a: Assessment, processes: object) -> dict[str, Any]:
    return {
        "t": json_number(i.t1),
        "seconds": json_number(i.seconds),
        "root_pid": i.root_pid,
        "vcpus": i.vcpus,
        "verdict": a.verdict.value,
        "findings": [finding_dict(f) for f in a.findings],
        "processes": processes,
        "totals": totals_dict(i.totals),
        "host": host_dict(i.host),
        "unavailable": list(i.unavailable),
    }


class ProcessTexts:
    """The JSON text of each process of an NDJSON interval record, kept from one record to
    the next: a process whose reading the probe kept has the very same `ProcessRates`
    interval after interval (`rates.KeptRates`), and so the same text, encoded once. One per
    stream of records; a text not used in a record is dropped."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[int, tuple[ProcessRates, str]] = {}

    def texts(self, processes: tuple[ProcessRates, ...]) -> list[str]:
        # Keyed by identity; the entry holds its object, so the id is not reused meanwhile.
        last, kept = self._last, {}
        out = []
        for r in processes:
            hit = last.get(id(r))
            if hit is None or hit[0] is not r:
                hit = (r, to_json(_process_rates_dict(r), indent=None))
            kept[id(r)] = hit
            out.append(hit[1])
        self._last = kept
        return out


def interval_line(
    i: Interval, a: Assessment, timestamp: str | None, texts: ProcessTexts | None = None
) -> str:
    """One `--format ndjson` interval record, without its newline: exactly
    `to_json({"type": "interval", "timestamp": timestamp, **interval_dict(i, a)})`, with the
    processes' texts from `texts` (their encoding is most of the record's cost)."""
    if texts is None:
        record = {"type": "interval", "timestamp": timestamp, **interval_dict(i, a)}
        return to_json(record, indent=None)
    record = {"type": "interval", "timestamp": timestamp, **_interval_fields(i, a, None)}
    keys = list(record)
    at = keys.index("processes")
    head = to_json({k: record[k] for k in keys[:at]}, indent=None)
    tail = to_json({k: record[k] for k in keys[at + 1 :]}, indent=None)
    joined = ", ".join(texts.texts(i.processes))
    return f'{head[:-1]}, "processes": [{joined}], {tail[1:]}'


def _process_summary_dict(p: ProcessSummary) -> dict[str, Any]:
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "name": p.name,
        "cmdline": p.cmdline,
        "threads": p.threads,
        "cpu_percent": json_number(p.cpu_percent),
        "cpu_percent_peak": json_number(p.cpu_percent_peak),
        "demand": json_number(p.demand),
        "demand_peak": json_number(p.demand_peak),
        "run_delay_ratio": json_number(p.run_delay_ratio),
        "run_delay_ratio_peak": json_number(p.run_delay_ratio_peak),
        "involuntary_ctx_per_s": json_number(p.involuntary_ctx_per_s),
        "involuntary_ctx_per_s_peak": json_number(p.involuntary_ctx_per_s_peak),
        "voluntary_ctx_per_s": json_number(p.voluntary_ctx_per_s),
        "voluntary_ctx_per_s_peak": json_number(p.voluntary_ctx_per_s_peak),
        "active_threads_peak": p.active_threads_peak,
        "pools": _list(p.pools),
        "thread_env": _env(p.thread_env),
        "exited": p.exited,
        "seconds": json_number(p.seconds),
        "live_pools": _live(p.live_pools),
        "owners": _owners(p.owners),
    }


def _ancestor_dict(a: Ancestor) -> dict[str, Any]:
    return {"pid": a.pid, "name": a.name, "cmdline": a.cmdline, "role": a.role}


def episode_dict(e: Episode) -> dict[str, Any]:
    """One episode of a run (docs/rules.md, "Episodes"): an entry of the summary's
    `episodes`, whose keys docs/cli.md documents ("Summary JSON")."""
    n = e.nesting
    return {
        "verdict": e.verdict.value,
        "start_s": json_number(e.start_s),
        "end_s": json_number(e.end_s),
        "seconds": json_number(e.seconds),
        "intervals": e.intervals,
        "counts": e.counts,
        "demand": json_number(e.demand),
        "demand_peak": json_number(e.demand_peak),
        "run_delay_ratio": json_number(e.run_delay_ratio),
        "run_delay_ratio_peak": json_number(e.run_delay_ratio_peak),
        "waited_s": json_number(e.waited_s),
        "finding": finding_dict(e.finding),
        "busy": e.busy,
        "processes": [
            {
                "pid": p.pid,
                "name": p.name,
                "cmdline": p.cmdline,
                "demand": json_number(p.demand),
                "active_threads": p.active_threads,
                "role": p.role,
                "parents": [_ancestor_dict(a) for a in p.parents],
            }
            for p in e.processes
        ],
        "nesting": None
        if n is None
        else {
            "role": n.role,
            "parent": n.parent,
            "workers": n.workers,
            "inner": n.inner,
            "inner_role": n.inner_role,
            "message": n.message,
            "fix": n.fix,
        },
    }


def episode_total_dict(t: EpisodeTotal) -> dict[str, Any]:
    """Every episode of one verdict: `verdict`, `episodes` (int, kept in full or not),
    `seconds`, `share` (of the time measured), `longest_s`, `waited_s` (float | null:
    CPU-seconds the tree waited in them), `counts` (bool: they make the run's verdict)."""
    return {
        "verdict": t.verdict.value,
        "episodes": t.episodes,
        "seconds": json_number(t.seconds),
        "share": json_number(t.share),
        "longest_s": json_number(t.longest_s),
        "waited_s": json_number(t.waited_s),
        "counts": t.counts,
    }


def summary_dict(s: Summary) -> dict[str, Any]:
    """A whole run: the `--format json` object of `watch` and `check`, each key documented in
    docs/cli.md ("Summary JSON")."""
    return {
        "root_pid": s.root_pid,
        "vcpus": s.budget.vcpus,
        "budget": budget_dict(s.budget),
        "verdict": None if s.verdict is None else s.verdict.value,
        "judged": s.judged,
        "not_judged_reason": s.not_judged,
        "findings": [finding_dict(f) for f in s.findings],
        "processes": [_process_summary_dict(p) for p in s.processes],
        "totals": totals_dict(s.totals),
        "totals_peak": totals_dict(s.totals_peak),
        "host": host_dict(s.host),
        "samples": s.samples,
        "duration_s": json_number(s.duration_s),
        "target_exited": s.target_exited,
        "unavailable": list(s.unavailable),
        "notes": list(s.notes),
        "episodes": [episode_dict(e) for e in s.episodes],
        "episode_totals": [episode_total_dict(t) for t in s.episode_totals],
    }


def identity_dict(identity: NodeIdentity) -> dict[str, Any]:
    """Where a report was written, added to every report-level JSON object (`watch --format
    json`, the `summary` record of `--format ndjson`, `check --json`): `node` and
    `launcher_env` (`analysis.launcher.IDENTITY_VARS`), documented in docs/cli.md."""
    return {"node": identity.node, "launcher_env": dict(identity.launcher_env)}


def to_json(obj: Mapping[str, Any], *, indent: int | None) -> str:
    """Serialise one of the dicts above, keys in schema order.

    `indent=None` gives a single line (ndjson). No trailing newline. NaN/inf are refused
    (the dicts above never hold them) so invalid JSON can never be emitted. Characters
    beyond ASCII are kept as they are, unless stdout cannot encode every character (a
    Latin-1 or ASCII locale): then they are `\\u` escapes, since the stand-ins such a
    stream gets for text (`oversub.launch`: `\\U0001f600`, a `"` for a curly quote) would
    make the JSON invalid. The escaped text is valid JSON in any encoding, and in a file.
    """
    import json  # only the JSON formats pay for it; `--format env` does not

    return json.dumps(
        obj, indent=indent, ensure_ascii=_stdout_is_narrow(), sort_keys=False, allow_nan=False
    )


def _stdout_is_narrow() -> bool:
    """Whether stdout's encoding cannot encode every character (not a UTF codec)."""
    import sys

    encoding = getattr(sys.stdout, "encoding", None)
    return isinstance(encoding, str) and not _is_utf(encoding)


@functools.lru_cache(maxsize=8)
def _is_utf(encoding: str) -> bool:
    import codecs

    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False
