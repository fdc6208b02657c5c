"""What a tuning run can and cannot say, from its own trials and environment: the M the trials
ran (busy processes at once, as `check` counts them), a command whose wall time does not move
with the setting (it runs for a fixed time), and the thread variables tune itself inherited.

Pure: the environment is passed in, the sentences come out (`tuning.view` escapes them).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from oversub.core.pools import is_thread_var
from oversub.tuning.trials import Ranking, Trial

SAME_TIME = 0.10
"""Candidates whose mean wall times are all within 10 % of each other "took about the same
time": what a time-bound command gives (its start-up, which the setting may change, is the
only part that moves: 4.0 to 4.3 s for numpy_matmul.py --seconds 3 on a loaded machine)."""
MAX_SHOWN = 4
"""Variables named in one sentence before "and N more"."""
MAX_VALUE = 40
"""Characters of an inherited variable's value shown."""

_PER_SECOND = re.compile(r"(per_?s(ec(ond)?)?|_ps|/s)$", re.IGNORECASE)
_RATE = re.compile(r"rate|throughput|speed", re.IGNORECASE)
"""Names that read as a throughput: "matmuls_per_s", "steps_ps" first, then "rate"."""


@dataclass(frozen=True)
class Inherited:
    """The thread variables of tune's own environment, by what the trials do with them."""

    replaced: tuple[tuple[str, str], ...] = ()
    """Variables of the table every T candidate sets (`thread_env`): set to T there."""
    raised: tuple[tuple[str, str], ...] = ()
    """Other thread-count variables (a name with THREAD) holding a whole number: a T
    candidate sets them to T as well, so that it really runs T threads."""
    unset: tuple[tuple[str, str], ...] = ()
    """Other thread-count variables whose value is not a whole number (MKL_DOMAIN_NUM_THREADS
    takes "MKL_BLAS=2"): a T candidate removes them."""
    kept: tuple[tuple[str, str], ...] = ()
    """Thread variables that are not counts (binding, wait policy): every trial inherits
    them, as the job would."""

    @property
    def any(self) -> bool:
        return bool(self.replaced or self.raised or self.unset or self.kept)


def inherited(environ: Mapping[str, str], table: Collection[str]) -> Inherited:
    """Sort the thread variables of `environ` (`core.pools.is_thread_var`) by what a T
    candidate does with them; `table` is what every T candidate sets."""
    replaced: list[tuple[str, str]] = []
    raised: list[tuple[str, str]] = []
    unset: list[tuple[str, str]] = []
    kept: list[tuple[str, str]] = []
    for name in sorted(environ):
        if not is_thread_var(name):
            continue
        item = (name, environ[name])
        if name in table:
            replaced.append(item)
        elif "THREAD" in name:
            value = environ[name].strip()
            (raised if value.isascii() and value.isdigit() else unset).append(item)
        else:
            kept.append(item)
    order = {name: i for i, name in enumerate(table)}  # the table's order: OMP_NUM_THREADS first
    replaced.sort(key=lambda item: order.get(item[0], len(order)))
    return Inherited(tuple(replaced), tuple(raised), tuple(unset), tuple(kept))


def _shown(items: Sequence[tuple[str, str]], values: bool = True) -> str:
    def one(name: str, value: str) -> str:
        if not values:
            return name
        cut = value if len(value) <= MAX_VALUE else value[: MAX_VALUE - 1] + "…"
        return f"{name}={cut}"

    shown = ", ".join(one(n, v) for n, v in items[:MAX_SHOWN])
    more = len(items) - MAX_SHOWN
    return shown if more <= 0 else f"{shown} and {more} more"


def environment_notes(env: Inherited) -> list[str]:
    """What the inherited thread variables do to the trials, in sentences."""
    if not env.any:
        return []
    notes = []
    counts = [*env.replaced, *env.raised, *env.unset]
    if counts:
        changes = []
        if env.replaced and not env.raised and not env.unset:
            changes.append("sets them to its T")
        elif env.replaced or env.raised:
            changes.append(f"sets {_shown([*env.replaced, *env.raised], False)} to its T")
        if env.unset:
            changes.append(f"removes {_shown(env.unset, False)}")
        notes.append(
            f"tune's environment sets {_shown(counts)} (an earlier `eval \"$(oversub "
            'recommend ...)"`?): the default candidate runs with them, so it is not the '
            f"libraries' default; each T candidate {' and '.join(changes)}"
        )
    if env.kept:
        notes.append(f"every trial inherits {_shown(env.kept)} from tune's environment")
    return notes


def seen_procs(trials: Iterable[Trial]) -> int | None:
    """The most processes any trial ran busy at once; None when no trial measured it."""
    counts = [t.busy_processes for t in trials if t.busy_processes]
    return max(counts) if counts else None


def inferred_procs(first: Trial) -> int | None:
    """The M to plan with when none was given: the processes the default's first trial ran
    busy at once, when more than one (None: keep M = 1 assumed)."""
    busy = first.busy_processes
    return busy if busy is not None and busy > 1 else None


def procs_notes(
    procs: int, source: str | None, seen: int | None, vcpus: int, recommended: int
) -> list[str]:
    """Where M came from, and whether the trials ran more busy processes than that."""
    notes = []
    if source is None:
        why = "no --procs, no launcher variable"
        if seen is None or seen <= 1:
            why += ", and no trial saw more than one busy process"
        notes.append(
            f"M = {procs} was assumed ({why}): the recommended T = {recommended} is for "
            f"{procs} process{'es' if procs > 1 else ''}; give --procs M if CMD runs M at once"
        )
    elif source == "trials":
        notes.append(
            f"M = {procs}: the default's first trial ran {procs} processes busy at once (no "
            f"--procs, no launcher variable), so the recommendation is floor({vcpus}/{procs}) = "
            f"{recommended}; give --procs M to plan for another M"
        )
    if seen is not None and seen > procs:
        notes.append(
            f"the trials ran up to {seen} processes busy at once, more than M = {procs}"
            + ("" if source is None else f" ({source})")
            + f": the recommended T = {recommended} asks for {seen} x {recommended} = "
            f"{seen * recommended} threads on {vcpus} vCPUs; give --procs {seen} if they all "
            "run at once"
        )
    return notes


def same_time(ranking: Ranking) -> tuple[float, float] | None:
    """The range of the candidates' mean wall times when they all took about the same time
    (within `SAME_TIME`); None otherwise or with fewer than two measured."""
    means = [st.stats.mean for st in ranking.standings if st.stats is not None]
    if len(means) < 2 or min(means) <= 0:
        return None
    low, high = min(means), max(means)
    return (low, high) if high <= low * (1 + SAME_TIME) else None


def time_bound_note(ranking: Ranking, printed: Sequence[str]) -> list[str]:
    """Fixed work whose wall time did not move: say what that means and what to use instead
    (`--metric`, with a name CMD prints when there is one)."""
    span = same_time(ranking)
    if span is None:
        return []
    low, high = span
    note = (
        f"every candidate took about the same wall time ({low:.4g} to {high:.4g} s by the "
        f"means, within {SAME_TIME * 100:.0f} %): if CMD runs for a fixed time (a --seconds "
        "flag, a time limit), it takes that time under any setting and its wall time cannot "
        "rank them; have it print its throughput as NAME=<number> and give --metric NAME"
    )
    rates = [n for n in printed if _PER_SECOND.search(n)] + [
        n for n in printed if _RATE.search(n) and not _PER_SECOND.search(n)
    ]
    if rates:
        note += f" (CMD prints {rates[0]}=<number>: --metric {rates[0]})"
    elif printed:
        note += f" (CMD prints {', '.join(f'{n}=' for n in printed[:MAX_SHOWN])})"
    return [note]
