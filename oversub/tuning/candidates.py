"""`oversub tune`'s candidates: the thread settings worth trying, most important first.

Pure: the plan that fits them in the budget is `tuning.schedule`'s, their ranking
`tuning.ranking`'s; the flags they come from are read by `cli.tune.driver`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from oversub.tuning.trials import Candidate

PROCS_VAR = "OVERSUB_TUNE_PROCS"
THREADS_VAR = "OVERSUB_TUNE_THREADS"
"""Exported to every trial for programs that read the candidate's figures themselves."""


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
