"""What `oversub tune` plans, measures and ranks: candidates, trials, statistics, a ranking.

Pure data (frozen dataclasses), shared by `tuning.candidates`, `tuning.schedule`,
`tuning.stats` and `tuning.ranking`, `cli.tune.loop` (the trial loop), `tuning.view` and
`tuning.exports` (the outputs) and `cli.tune.driver`. A *candidate* is one
setting (thread variables, process count, custom variables); a *trial* is one run of CMD
under one candidate. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from oversub.core.names import Verdict

RATIO_LIMIT = 1000.0
"""A speed-up beyond this either way (1000x faster, or 1/1000 as fast) is not stated as a
figure: no thread setting changes a job's throughput a thousandfold, so such a ratio says
that the figures are not the same measure (a counter that wrapped, a unit that changed, a
hostile CMD). It is written "more than 1000x" / "less than 0.001x" (JSON: null and a
`*_beyond_limit` key), with no interval."""


def beyond(ratio: float) -> str | None:
    """ "above" or "below" when `ratio` is beyond `RATIO_LIMIT` that way (inf and 0 are),
    None when it is stated as a figure."""
    if ratio > RATIO_LIMIT:
        return "above"
    if ratio < 1 / RATIO_LIMIT:
        return "below"
    return None


@dataclass(frozen=True)
class Candidate:
    """One setting tried: the variables a trial of it sets, and what they mean."""

    label: str
    """Short, unique: "default", "T=2", "M=4 T=1", "T=2 POLARS_MAX_THREADS=1"."""
    threads: int | None
    """Threads per process set in every pool's variables; None: inherited (the default)."""
    procs: int | None
    """The process count `{procs}` and OVERSUB_TUNE_PROCS carry; None without --procs-values."""
    extra: tuple[tuple[str, str], ...] = ()
    """`--env NAME=V` values of this candidate, in the order the dimensions were given."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Every variable a trial of it sets (thread variables, `--env`, OVERSUB_TUNE_*)."""
    roles: tuple[str, ...] = ()
    """What makes it special: "default" (variables as inherited), "recommended" (oversub's
    floor(N/M)), "one thread"."""
    unset: tuple[str, ...] = ()
    """Inherited thread-count variables a trial of it removes (their value is not a whole
    number that could be set to its T instead: `tuning.advice.inherited`)."""

    @property
    def is_default(self) -> bool:
        return "default" in self.roles


@dataclass(frozen=True)
class Trial:
    """One run of CMD under one candidate, as it ended."""

    index: int
    """Position in the order trials ran, from 1."""
    candidate: int
    """Index of the candidate in `TuneResult.candidates`."""
    round: int
    """Round of the interleaved schedule, from 1 (each round runs every candidate once)."""
    warmup: bool
    """A warm-up run: measured, shown in the order, left out of the statistics."""
    value: float | None
    """The figure: wall seconds (fixed work) or the metric (fixed time); None when failed."""
    seconds: float
    """Wall time of the trial as oversub saw it (start to tree stopped)."""
    status: int | None
    """CMD's exit status (negative: killed by that signal); None when it never ran."""
    failure: str | None = None
    """Why the trial gives no figure ("exit status 2", "no steps_per_s= line"); None if ok."""
    verdict: Verdict | None = None
    """check's verdict of the trial; None when it was not judged (too short, failed)."""
    delay_ratio: float | None = None
    """The tree's run-delay ratio over the trial (time waiting for a CPU / time running)."""
    record: str | None = None
    """The trial's recording (`--record DIR`), None without it."""
    busy_processes: int | None = None
    """Processes of the tree busy at once (half a thread runnable or more) for a quarter of
    the trial, as check counts them (`Totals.busy_processes`); None when nothing was
    measured. The M the trial really ran."""


@dataclass(frozen=True)
class Stats:
    """Figures of one candidate's timed trials."""

    n: int
    mean: float
    sd: float | None
    """Sample standard deviation; None with one figure; inf when beyond the largest double
    (figures near it: `tuning.stats`). The mean, min and max are always finite."""
    minimum: float
    maximum: float
    half: float | None
    """Half width of the 95 % interval of the mean (Student's t); None with one figure; inf
    when beyond the largest double."""

    @property
    def low(self) -> float:
        return self.mean - (self.half or 0.0)

    @property
    def high(self) -> float:
        return self.mean + (self.half or 0.0)


@dataclass(frozen=True)
class Standing:
    """One candidate's place: its statistics against the default's and the best's."""

    candidate: int
    stats: Stats | None
    """None when no timed trial of it gave a figure."""
    speedup: float | None
    """Throughput over the default's (>1: faster); None when either is unmeasured or has no
    positive mean. May be inf or 0, or anything beyond `RATIO_LIMIT` (see `beyond`)."""
    speedup_half: float | None
    """Its 95 % half width, propagated from both intervals (None without intervals, and for
    a ratio beyond `RATIO_LIMIT`); inf when beyond the largest double."""
    verdict: Verdict | None
    """The worst verdict over its timed trials; None when none was judged."""
    delay_ratio: float | None
    """Mean run-delay ratio over its timed trials that measured one."""
    failed: int
    """Timed trials that gave no figure."""


@dataclass(frozen=True)
class Ranking:
    """The candidates in order, and what the order can and cannot say."""

    standings: tuple[Standing, ...]
    """Measured candidates best first, then the unmeasured in candidate order."""
    best: int | None
    """The candidate with the best mean; None when nothing was measured."""
    pick: int | None
    """The setting to use: the cheapest of those indistinguishable from the best."""
    tied: tuple[int, ...]
    """Candidates whose interval overlaps the best's (the best included), best first."""
    runner_up: int | None
    """The second best mean."""
    runs_to_separate: int | None
    """When the best and the runner-up overlap: timed runs each would need for their
    intervals to part at the same spread and difference (None: they do not overlap, or no
    number of runs would part them)."""
    default_slower: float | None
    """How much slower the default is than the best: best / default throughput - 1
    (0.25 = 25 %); None when either is unmeasured. May be inf: the ratio (this + 1) is
    stated as beyond `RATIO_LIMIT` past it."""
    default_distinguishable: bool
    """The default's interval and the best's do not overlap."""


@dataclass(frozen=True)
class TunePlan:
    """How many trials fit the budget, decided before they run (fixed work: after the
    first trial, whose length it needs)."""

    candidates: int
    """Candidates kept (the first ones in priority order)."""
    asked: int
    """Candidates there were before the budget was applied."""
    warmup: int
    """Warm-up runs per candidate."""
    runs: int
    """Timed runs per candidate."""
    trial_s: float
    """The expected length of one trial."""
    budget_s: float

    @property
    def trials(self) -> int:
        return self.candidates * (self.warmup + self.runs)

    @property
    def seconds(self) -> float:
        return self.trials * self.trial_s


@dataclass(frozen=True)
class TuneResult:
    """A whole tuning run: what was tried, in which order, and how it ended."""

    command: tuple[str, ...]
    vcpus: int
    """N, the budget every trial shares."""
    procs: int
    """M, the processes the recommendation divides N among."""
    procs_source: str | None
    """Where M came from: "--procs", a launcher variable, "--procs-values" (its first value),
    "trials" (the processes the default's first trial ran busy at once), or None (one process
    assumed)."""
    metric: str | None
    """The metric's name (fixed time); None: wall time of fixed work."""
    metric_stat: str
    """"last" or "mean" of the metric's lines in one trial."""
    higher_is_better: bool
    candidates: tuple[Candidate, ...]
    trials: tuple[Trial, ...]
    """In the order they ran."""
    plan: TunePlan | None
    """None when nothing could be planned (the first trial failed)."""
    ranking: Ranking
    ended: str
    """"complete", "budget" (the budget ended it), "interrupted" (a stop signal),
    "default-failed" (the default candidate's run failed: nothing to compare with)."""
    elapsed_s: float
    notes: tuple[str, ...] = ()
    procs_seen: int | None = None
    """The most processes any trial ran busy at once (`Trial.busy_processes`); None when no
    trial measured it."""


@dataclass(frozen=True)
class TuneOptions:
    """What the user asked `oversub tune` to do (its options, as the command resolved them)."""

    procs: int | str | None
    procs_values: str | None
    env_dims: tuple[str, ...]
    max_candidates: int
    warmup: int
    runs: int | None
    metric: str | None
    metric_stat: str
    trial_seconds: float | None
    budget_s: float
    fail_if_slower: float | None
    fmt: str
    json_path: Path | None
    record_dir: Path | None
    show_output: bool
    interval: float | None
    err: TextIO | None = None
