"""`oversub tune`'s pure half: the candidates, the plan that fits the budget, the interleaved
schedule and the ranking.

No I/O, no clock: `cli.tune.loop` runs the trials and passes what they gave. The statistics of
each candidate are `tuning.stats`'s; two candidates are indistinguishable when their 95 %
intervals overlap, and then the cheaper setting is picked.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence

from oversub.core.errors import UsageError
from oversub.tuning.stats import describe, overlap, runs_to_separate, throughput_ratio
from oversub.tuning.trials import Candidate, Ranking, Standing, Stats, Trial, TunePlan

PROCS_VAR = "OVERSUB_TUNE_PROCS"
THREADS_VAR = "OVERSUB_TUNE_THREADS"
"""Exported to every trial for programs that read the candidate's figures themselves."""

MIN_AUTO_RUNS = 2
"""Timed runs per candidate below which no interval exists: the plan drops candidates first."""
MAX_AUTO_RUNS = 10
"""Without --runs, at most this many timed runs per candidate however large the budget."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_VALUE = re.compile(r"[A-Za-z0-9_.:+-]{1,64}\Z")


# --------------------------------------------------------------------------- the options


def parse_env_dimension(text: str) -> tuple[str, tuple[str, ...]]:
    """`--env NAME=V1,V2,...` -> (NAME, (V1, V2, ...)); UsageError naming what is wrong."""
    name, sep, values = text.partition("=")
    if not sep or not _NAME.match(name):
        raise UsageError(f"--env {text!r}: expected NAME=V1,V2,... with NAME a variable name")
    parts = tuple(dict.fromkeys(v.strip() for v in values.split(",")))
    if not parts or any(not _VALUE.match(v) for v in parts):
        raise UsageError(
            f"--env {text!r}: each value is 1 to 64 letters, digits or _ . : + - (comma-separated)"
        )
    return name, parts


def parse_procs_values(text: str) -> tuple[int, ...]:
    """`--procs-values 1,2,4` -> (1, 2, 4); UsageError unless positive whole numbers."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit() or not 1 <= int(part) <= 65536:
            raise UsageError(
                f"--procs-values {text!r}: expected process counts such as 1,2,4 "
                "(whole numbers from 1 to 65536)"
            )
        values.append(int(part))
    return tuple(dict.fromkeys(values))


def substitute(argv: Sequence[str], procs: int, threads: int) -> list[str]:
    """CMD's arguments with `{procs}` and `{threads}` replaced (nothing else: other braces
    stay as they are)."""
    return [arg.replace("{procs}", str(procs)).replace("{threads}", str(threads)) for arg in argv]


# --------------------------------------------------------------------------- candidates


def thread_values(vcpus: int, recommended: int) -> list[int]:
    """Threads per process to try on N = `vcpus`: 1, the powers of two up to N, the
    recommendation and its neighbours, in the order they are worth trying (the
    recommendation, 1, its neighbours, then the powers of two from the nearest)."""
    n = max(1, vcpus)
    rec = min(max(1, recommended), n)
    powers = []
    p = 1
    while p <= n:
        powers.append(p)
        p *= 2
    neighbours = [t for t in (rec - 1, rec + 1) if 1 <= t <= n]
    ordered = [rec, 1, *neighbours, *sorted(powers, key=lambda t: (abs(t - rec), t))]
    return list(dict.fromkeys(ordered))


def make_candidates(
    vcpus: int,
    procs: int,
    thread_env: Callable[[int], Mapping[str, str]],
    recommended: Callable[[int], int],
    *,
    procs_values: Sequence[int] = (),
    env_dims: Sequence[tuple[str, Sequence[str]]] = (),
    max_candidates: int = 8,
    unset: Sequence[str] = (),
) -> tuple[Candidate, ...]:
    """The candidates, most important first, at most `max_candidates` of them.

    The default (variables as inherited, at M = `procs` or the first of `procs_values`)
    comes first, then per process count its recommendation (`recommended(M)`), 1 thread,
    the recommendation's neighbours and the powers of two up to N; the defaults of the
    other process counts after those. `thread_env(T)` gives the variables of every pool
    oversub knows (`analysis.plans.thread_env`, and the inherited thread-count variables
    it sets too); the non-default candidates also remove the inherited variables `unset`.
    Each `--env` dimension multiplies the non-default candidates; its first value is tried
    first.
    """
    counts = list(procs_values) or [procs]
    reference = procs if procs in counts else counts[0]
    varied = bool(procs_values)
    # No custom variable first (the plain thread setting), then every combination of the
    # --env values, each dimension's first value first.
    combos: list[tuple[tuple[str, str], ...]] = [()]
    for name, values in env_dims:
        combos = [(*e, (name, v)) for e in combos for v in values]
    extras = [(), *combos] if env_dims else [()]

    def procs_env(m: int) -> dict[str, str]:
        return {PROCS_VAR: str(m)} if varied else {}

    def default(m: int) -> Candidate:
        label = f"default M={m}" if varied else "default"
        return Candidate(label, None, m if varied else None, (), procs_env(m), ("default",))

    by_procs: list[list[Candidate]] = []
    for m in [reference, *(c for c in counts if c != reference)]:
        rec = recommended(m)
        row = []
        for t in thread_values(vcpus, rec):
            for extra in extras:
                roles = tuple(
                    role
                    for role, holds in (("recommended", t == rec), ("one thread", t == 1))
                    if holds and not extra
                )
                env = {**thread_env(t), **dict(extra), **procs_env(m), THREADS_VAR: str(t)}
                parts = ([f"M={m}"] if varied else []) + [f"T={t}"] + [f"{n}={v}" for n, v in extra]
                label = " ".join(parts)
                procs_of = m if varied else None
                row.append(Candidate(label, t, procs_of, extra, env, roles, tuple(unset)))
        by_procs.append(row)
    ordered: list[Candidate] = [default(reference)]
    # Round-robin over the process counts so that each count keeps its recommendation.
    for i in range(max(len(row) for row in by_procs)):
        ordered.extend(row[i] for row in by_procs if i < len(row))
        if i == 1:  # after each count's recommendation and 1 thread: the other defaults
            ordered.extend(default(m) for m in counts if m != reference)
    if max(len(row) for row in by_procs) < 2:
        ordered.extend(default(m) for m in counts if m != reference)
    unique = list({c.label: c for c in ordered}.values())
    return tuple(unique[: max(1, max_candidates)])


def cost(candidate: Candidate, vcpus: int) -> tuple[int, int, str]:
    """Cheaper first: fewer CPUs claimed (M x T, inherited pools take N each), then fewer
    variables changed, then the label."""
    threads = vcpus if candidate.threads is None else candidate.threads
    return ((candidate.procs or 1) * threads, len(candidate.extra), candidate.label)


# --------------------------------------------------------------------------- the plan


def fit(
    candidates: int,
    warmup: int,
    runs: int | None,
    trial_s: float,
    budget_s: float,
) -> TunePlan:
    """How many candidates and runs fit `budget_s` at `trial_s` a trial.

    With `runs` None ("as many as fit"): between 2 and 10 timed runs per candidate, and
    candidates dropped from the end of the list (the least important) until 2 fit. With
    `runs` given, candidates are dropped until the asked runs fit. At least two candidates
    (the default and one other) and one run are kept: the budget then ends the run early.
    """
    trial_s = max(trial_s, 1e-3)
    rounds_fitting = int(budget_s // trial_s)  # trials that fit, all candidates together
    keep = candidates
    floor = min(candidates, 2)
    want = MIN_AUTO_RUNS if runs is None else runs
    while keep > floor and keep * (warmup + want) > rounds_fitting:
        keep -= 1
    if runs is None:
        per = rounds_fitting // keep - warmup if keep else 0
        chosen = max(1, min(MAX_AUTO_RUNS, per))
    else:
        chosen = runs
    return TunePlan(
        candidates=keep,
        asked=candidates,
        warmup=warmup,
        runs=chosen,
        trial_s=trial_s,
        budget_s=budget_s,
    )


def schedule(candidates: int, warmup: int, runs: int) -> list[tuple[int, int, bool]]:
    """(round from 1, candidate, warm-up?) in the order to run: interleaved, every round runs
    every candidate once (A B C A B C), warm-up rounds first."""
    return [(r + 1, c, r < warmup) for r in range(warmup + runs) for c in range(candidates)]


# --------------------------------------------------------------------------- the ranking


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
