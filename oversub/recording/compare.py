"""`oversub diff`: two replayed runs side by side and the CI rule "the fix did not make it
worse". Pure.

AFTER is *worse* than BEFORE when any of these holds (each is a reason, in words):

- its verdict ranks worse (ok < at-risk < starved < oversubscribed);
- its delay ratio (the share of runnable time spent waiting for a CPU) is higher by more
  than `DELAY_SLACK` (an absolute 0.10: run-to-run noise on a shared machine stays well
  under it);
- with `--metric NAME` (a throughput: higher is better), its value is lower by more than
  `tolerance` of BEFORE's (default 5 %), or AFTER did not record it while BEFORE did.

Every other figure both runs recorded (`check --metric`) is shown beside the gated one
without being judged: when it is lower by more than `tolerance`, the comparison says so
(`Comparison.noted`) and that `--metric NAME` would gate on it.

A run without a verdict (nothing measured, the command failed) cannot be compared: the
comparison says so, and the command exits 3.
"""

from __future__ import annotations

from oversub.core.names import Verdict
from oversub.recording.types import Comparison, Figures, Replay

DELAY_SLACK = 0.10
"""How much higher AFTER's delay ratio may be before it counts as worse (absolute)."""
TOLERANCE = 0.05
"""How much lower AFTER's metric may be (a share of BEFORE's) before it counts as worse."""


def figures(replay: Replay, metric: str | None = None) -> Figures:
    s = replay.summary
    values = dict(replay.metrics)
    return Figures(
        verdict=None if s.verdict is None else s.verdict.value,
        vcpus=s.budget.vcpus,
        demand=s.totals.demand,
        run_delay_ratio=s.totals.run_delay_ratio,
        active_threads=s.totals.active_threads,
        involuntary_ctx_per_cpu_s=s.totals.involuntary_ctx_per_cpu_s,
        cpu_percent=s.totals.cpu_percent,
        seconds=s.duration_s,
        metric=None if metric is None else values.get(metric),
        metrics=replay.metrics,
    )


def shown_metrics(before: Figures, after: Figures, metric: str | None) -> tuple[str, ...]:
    """The throughputs a comparison shows: the gated `metric`, then every figure both runs
    recorded, in BEFORE's order."""
    held = {name for name, _ in after.metrics}
    shared = [name for name, _ in before.metrics if name in held and name != metric]
    return tuple([metric, *shared] if metric is not None else shared)


def _ungated_drops(
    before: Figures, after: Figures, names: tuple[str, ...], tolerance: float
) -> tuple[str, ...]:
    b, a = dict(before.metrics), dict(after.metrics)
    return tuple(
        f"{name} {b[name]:g} -> {a[name]:g}, {_lower(b[name], a[name])}"
        for name in names
        if b[name] > 0 and a[name] < b[name] * (1 - tolerance)
    )


def _lower(b: float, a: float) -> str:
    """How much lower AFTER's `a` is than BEFORE's positive `b`, never inf: the share of `b`
    (1 - a/b, at most 100 % while `a` is not negative; `b - a` itself may overflow)."""
    return f"{1 - a / b:.0%} lower" if a >= 0 else "below zero, more than 100% lower"


def compare(
    before: Replay, after: Replay, metric: str | None = None, tolerance: float = TOLERANCE
) -> Comparison:
    b, a = figures(before, metric), figures(after, metric)
    unjudged = tuple(name for name, f in (("before", b), ("after", a)) if f.verdict is None)
    worse: list[str] = []
    better: list[str] = []
    if not unjudged:
        assert b.verdict is not None and a.verdict is not None
        rank_b, rank_a = Verdict(b.verdict).rank, Verdict(a.verdict).rank
        if rank_a > rank_b:
            worse.append(f"verdict {b.verdict} -> {a.verdict}")
        elif rank_a < rank_b:
            better.append(f"verdict {b.verdict} -> {a.verdict}")
    if b.run_delay_ratio is not None and a.run_delay_ratio is not None:
        change = a.run_delay_ratio - b.run_delay_ratio
        if change > DELAY_SLACK:
            worse.append(
                f"delay ratio {b.run_delay_ratio:.0%} -> {a.run_delay_ratio:.0%} "
                f"(up more than {DELAY_SLACK * 100:.0f} points)"
            )
        elif change < -DELAY_SLACK:
            better.append(f"delay ratio {b.run_delay_ratio:.0%} -> {a.run_delay_ratio:.0%}")
    if metric is not None:
        if b.metric is not None and a.metric is None:
            worse.append(f"{metric} was not recorded in AFTER")
        elif b.metric is not None and a.metric is not None:
            if a.metric < b.metric * (1 - tolerance):
                worse.append(
                    f"{metric} {b.metric:g} -> {a.metric:g} (more than {tolerance:.0%} lower)"
                )
            elif a.metric > b.metric * (1 + tolerance):
                better.append(f"{metric} {b.metric:g} -> {a.metric:g}")
    shown = shown_metrics(b, a, metric)
    noted = _ungated_drops(b, a, tuple(n for n in shown if n != metric), tolerance)
    return Comparison(b, a, metric, tuple(worse), tuple(better), unjudged, shown, noted)
