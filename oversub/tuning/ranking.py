"""`oversub tune`'s ranking: the candidates ordered by their timed trials, the cheapest of
those within noise of the best picked, and the `--fail-if-slower` gate.

Pure; the statistics of each candidate are `tuning.stats`'s: two candidates are
indistinguishable when their 95 % intervals overlap, and then the cheaper setting is picked.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from oversub.tuning.stats import describe, overlap, runs_to_separate, throughput_ratio
from oversub.tuning.trials import Candidate, Ranking, Standing, Stats, Trial


def cost(candidate: Candidate, vcpus: int) -> tuple[int, int, str]:
    """Cheaper first: fewer CPUs claimed (M x T, inherited pools take N each), then fewer
    variables changed, then the label."""
    threads = vcpus if candidate.threads is None else candidate.threads
    return ((candidate.procs or 1) * threads, len(candidate.extra), candidate.label)


def rank(
    candidates: Sequence[Candidate],
    trials: Sequence[Trial],
    *,
    higher_is_better: bool,
    vcpus: int,
) -> Ranking:
    """Order the candidates by their timed trials' mean; say which are within noise of the
    best and pick the cheapest of those (`cost`)."""
    stats: dict[int, Stats] = {}
    standings: dict[int, Standing] = {}
    for index in range(len(candidates)):
        timed = [t for t in trials if t.candidate == index and not t.warmup]
        figures = [t.value for t in timed if t.value is not None]
        described = describe(figures)
        if described is not None:
            stats[index] = described
        verdicts = [t.verdict for t in timed if t.verdict is not None]
        delays = [t.delay_ratio for t in timed if t.delay_ratio is not None]
        standings[index] = Standing(
            candidate=index,
            stats=described,
            speedup=None,
            speedup_half=None,
            verdict=max(verdicts, key=lambda v: v.rank) if verdicts else None,
            delay_ratio=statistics.fmean(delays) if delays else None,
            failed=sum(1 for t in timed if t.value is None),
        )
    default = next((i for i, c in enumerate(candidates) if c.is_default), None)
    base = stats.get(default) if default is not None else None
    for index, s in stats.items():
        if index == default:
            standings[index] = _with_speedup(standings[index], 1.0, None)  # the reference
        elif base is not None:
            ratio, half = throughput_ratio(s, base, higher_is_better)
            standings[index] = _with_speedup(standings[index], ratio, half)
    sign = -1.0 if higher_is_better else 1.0
    measured = sorted(stats, key=lambda i: (sign * stats[i].mean, cost(candidates[i], vcpus)))
    unmeasured = [i for i in range(len(candidates)) if i not in stats]
    order = tuple(standings[i] for i in (*measured, *unmeasured))
    if not measured:
        return Ranking(order, None, None, (), None, None, None, False)
    best = measured[0]
    tied = tuple(i for i in measured if overlap(stats[i], stats[best]))
    pick = min(tied, key=lambda i: cost(candidates[i], vcpus))
    runner_up = measured[1] if len(measured) > 1 else None
    separate = None
    if runner_up is not None and overlap(stats[best], stats[runner_up]):
        separate = runs_to_separate(stats[best], stats[runner_up])
    slower = None
    distinguishable = False
    if base is not None:
        ratio, _ = throughput_ratio(stats[best], base, higher_is_better)
        slower = None if ratio is None else ratio - 1.0
        distinguishable = not overlap(stats[best], base)
    return Ranking(order, best, pick, tied, runner_up, separate, slower, distinguishable)


def _with_speedup(s: Standing, ratio: float | None, half: float | None) -> Standing:
    return Standing(s.candidate, s.stats, ratio, half, s.verdict, s.delay_ratio, s.failed)


def fails_gate(ranking: Ranking, percent: float) -> bool:
    """`--fail-if-slower PCT`: the default is more than PCT % slower than the best, and the
    difference is more than noise (their intervals do not overlap)."""
    return (
        ranking.default_slower is not None
        and ranking.default_distinguishable
        and ranking.default_slower * 100.0 > percent
    )
