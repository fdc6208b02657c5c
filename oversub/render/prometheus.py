"""The exporter's metrics (docs/metrics.md) as plain data: one `Family` per metric, built
from what `serve` holds at a scrape (`targets.Exported`). Pure: the CLI turns the families
into prometheus-client metric families, so this module never imports the client.

Absent where unmeasured (never 0 or NaN for an unknown), every label on every series of its
family, targets cut to `--top` (worst state first, then demand: the round's order), label
values bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from oversub.core.names import Signal
from oversub.core.rules import RUNTIME_RULES
from oversub.core.targets import Counters, Exported, TargetResult
from oversub.core.workload import bounded, workload_of

STATES = ("oversubscribed", "starved", "at-risk", "ok", "not-judged")
"""`oversub_verdict`'s states, worst first (docs/metrics.md)."""

INFO_LABELS = (
    "target",
    "kind",
    "cgroup",
    "limited_by",
    "slurm_job_id",
    "pod_uid",
    "container_id",
    "systemd_unit",
)


class Family(NamedTuple):
    name: str
    """Without `_total` for a counter (the client adds it)."""
    kind: str
    """"gauge" or "counter" (an info metric is a gauge of value 1)."""
    help: str
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def label(text: str) -> str:
    """A label value from a path: bytes that were not UTF-8 as `\\xNN`, at most
    `workload.LABEL_MAX` characters (the end kept)."""
    raw = text.encode("utf-8", "surrogateescape")
    return bounded(raw.decode("utf-8", "backslashreplace"))


_Value = Callable[[TargetResult, Counters], float | None]

# (name, kind, help, value): the per-target numeric families, in docs/metrics.md's order.
_NUMERIC: tuple[tuple[str, str, str, _Value], ...] = (
    (
        "oversub_budget_cpus",
        "gauge",
        "CPU budget N of the target: the tightest of affinity, cpuset, quota and launcher share.",
        lambda t, c: float(t.budget.vcpus),
    ),
    (
        "oversub_quota_cpus",
        "gauge",
        "Exact cgroup CPU quota of the target, in CPUs.",
        lambda t, c: t.budget.quota.cpus if t.budget.quota is not None else None,
    ),
    (
        "oversub_demand_cpus",
        "gauge",
        "Threads runnable on average over the last interval: (CPU + run delay) / seconds.",
        lambda t, c: t.interval.totals.demand,
    ),
    (
        "oversub_run_delay_ratio",
        "gauge",
        "Share of runnable time spent waiting for a CPU in the last interval.",
        lambda t, c: t.interval.totals.run_delay_ratio,
    ),
    (
        "oversub_outside_cpus",
        "gauge",
        "CPUs used on the host outside the target in the last interval.",
        lambda t, c: None if t.kind == "node" else t.interval.host.outside_cpus,
    ),
    (
        "oversub_throttled_ratio",
        "gauge",
        "Share of the quota's periods throttled in the last interval.",
        lambda t, c: t.interval.host.throttled_ratio if t.budget.quota is not None else None,
    ),
    (
        "oversub_processes",
        "gauge",
        "Processes of the target at the end of the last interval.",
        lambda t, c: float(t.interval.totals.processes),
    ),
    (
        "oversub_busy_processes",
        "gauge",
        "Processes that kept at least half a thread runnable at the same time (M).",
        lambda t, c: float(t.interval.totals.busy_processes),
    ),
    (
        "oversub_threads",
        "gauge",
        "Threads of the target at the end of the last interval.",
        lambda t, c: float(t.interval.totals.threads),
    ),
    (
        "oversub_active_threads",
        "gauge",
        "Threads runnable at least the active-cpu share of the last interval.",
        lambda t, c: float(t.interval.totals.active_threads),
    ),
    (
        "oversub_pool_threads",
        "gauge",
        "Threads the multi-thread native pools run at once, summed over processes.",
        lambda t, c: float(t.interval.totals.pool_threads),
    ),
    (
        "oversub_pool_processes",
        "gauge",
        "Processes that hold a multi-thread native pool.",
        lambda t, c: float(t.interval.totals.pool_processes),
    ),
    (
        "oversub_cpu_seconds",
        "counter",
        "CPU time used by the target's threads.",
        lambda t, c: c.cpu_s,
    ),
    (
        "oversub_run_delay_seconds",
        "counter",
        "Time the target's threads were runnable but waited for a CPU.",
        lambda t, c: c.delay_s,
    ),
    (
        "oversub_involuntary_context_switches",
        "counter",
        "Involuntary context switches of the target's threads.",
        lambda t, c: None if c.involuntary is None else float(c.involuntary),
    ),
    (
        "oversub_voluntary_context_switches",
        "counter",
        "Voluntary context switches of the target's threads.",
        lambda t, c: None if c.voluntary is None else float(c.voluntary),
    ),
    (
        "oversub_throttled_seconds",
        "counter",
        "Throttled time of the cgroup that holds the target's quota, summed over CPUs.",
        lambda t, c: c.throttled_s if t.budget.quota is not None else None,
    ),
)


def exported_targets(state: Exported) -> list[tuple[str, TargetResult]]:
    """(label, target) of what is exported: the first `top` targets of the round (already
    worst first), a label that collides after the cut left out like a lower rank, then the
    node."""
    if state.round is None:
        return []
    chosen: list[tuple[str, TargetResult]] = []
    seen: set[str] = set()
    for target in state.round.targets:
        if len(chosen) >= state.top:
            break
        name = label(target.target)
        if name in seen:
            continue
        seen.add(name)
        chosen.append((name, target))
    if state.round.node is not None:
        chosen.append(("/", state.round.node))
    return chosen


def families(state: Exported) -> list[Family]:
    """Every family of docs/metrics.md, in its order, for the state at a scrape."""
    targets = exported_targets(state)
    counters = {name: state.counters.get(t.target, Counters()) for name, t in targets}
    out: list[Family] = []
    for name, kind, text, value in _NUMERIC:
        samples = []
        for label_value, t in targets:
            v = value(t, counters[label_value])
            if v is not None:
                samples.append(((label_value,), float(v)))
        out.append(Family(name, kind, text, ("target",), tuple(samples)))
    judged = [(n, t) for n, t in targets if t.kind != "node"]
    out.append(
        Family(
            "oversub_verdict",
            "gauge",
            "Verdict of the last interval: 1 for its state, 0 for the others.",
            ("target", "verdict"),
            tuple(((n, s), 1.0 if t.state == s else 0.0) for n, t in judged for s in STATES),
        )
    )
    rules = list(RUNTIME_RULES)
    out.append(
        Family(
            "oversub_findings",
            "gauge",
            "Findings of each rule in the last interval.",
            ("target", "rule"),
            tuple(
                ((n, r.value), float(sum(1 for f in t.assessment.findings if f.rule is r)))
                for n, t in judged
                for r in rules
            ),
        )
    )
    out.append(
        Family(
            "oversub_signal_unavailable",
            "gauge",
            "1 when the signal could not be measured in the last interval.",
            ("target", "signal"),
            tuple(
                ((n, s.value), 1.0 if s in t.interval.unavailable else 0.0)
                for n, t in targets
                for s in Signal
            ),
        )
    )
    out.append(
        Family(
            "oversub_target_info",
            "gauge",
            "What the target is: its kind, cgroup, limit and workload ids.",
            INFO_LABELS,
            tuple((_info(n, t), 1.0) for n, t in targets),
        )
    )
    out += _own(state)
    return out


def _info(name: str, t: TargetResult) -> tuple[str, ...]:
    work = workload_of(t.cgroup)
    return (
        name,
        t.kind,
        label(t.cgroup),
        t.budget.limited_by,
        work.slurm_job_id,
        work.pod_uid,
        work.container_id,
        label(work.systemd_unit),
    )


def _own(state: Exported) -> list[Family]:
    r = state.round
    own: list[Family] = [
        Family(
            "oversub_build_info",
            "gauge",
            "oversub's version and the Python it runs on.",
            ("version", "python"),
            (((state.version, state.python), 1.0),),
        ),
        Family(
            "oversub_up",
            "gauge",
            "1 when the last sample read its target, else 0.",
            (),
            (((), 1.0 if state.up and r is not None else 0.0),),
        ),
    ]
    if state.last_sample_unix is not None:
        own.append(
            Family(
                "oversub_last_sample_timestamp_seconds",
                "gauge",
                "When the last sample completed, in Unix seconds.",
                (),
                (((), state.last_sample_unix),),
            )
        )
    if r is not None:
        own.append(
            Family(
                "oversub_sample_duration_seconds",
                "gauge",
                "Wall time the last sample and its analysis took.",
                (),
                (((), r.sample_s),),
            )
        )
    own.append(
        Family(
            "oversub_sample_interval_seconds",
            "gauge",
            "The sampling interval asked for.",
            (),
            (((), state.interval_s),),
        )
    )
    own.append(
        Family(
            "oversub_targets",
            "gauge",
            "Targets found in the last sample, before --top.",
            (),
            (((), float(r.found if r is not None else 0)),),
        )
    )
    return own
