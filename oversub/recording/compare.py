"""`oversub diff`: two replayed runs side by side and the CI rule "the fix did not make it
worse". Pure.

AFTER is *worse* than BEFORE when any of these holds (each is a reason, in words):

- its verdict ranks worse (ok < at-risk < starved < oversubscribed);
- its delay ratio (the share of runnable time spent waiting for a CPU) is higher by more
  than `DELAY_SLACK` (an absolute 0.10: run-to-run noise on a shared machine stays well
  under it);
- with `--metric NAME` (a throughput: higher is better), its value is lower by more than
  `tolerance` of BEFORE's (default 5 %), or AFTER did not record it while BEFORE did.

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
    )


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
    return Comparison(b, a, metric, tuple(worse), tuple(better), unjudged)
