"""A run through time: a recording (`--record FILE`) read back, and its replay under
thresholds. Plain data; the format is `recording.format`, the replay `recording.replay`."""

from __future__ import annotations

from dataclasses import dataclass

from oversub.core.model import Budget
from oversub.core.results import Assessment, Interval, Summary
from oversub.core.thresholds import Thresholds


@dataclass(frozen=True)
class Header:
    """The first record of a recording: what was watched, on what budget, how."""

    version: str
    """The oversub version that wrote it."""
    host: str
    started: str
    """Wall clock at the start, UTC, ISO 8601."""
    mode: str
    """"watch", "check-command", "check-pid" or "check-cgroup" (`budget.cgroup` names it;
    `watch --cgroup` is "watch" with that budget)."""
    pid: int | None
    """The watched pid (None for `check -- CMD`: the intervals name the command's pid; None
    for a cgroup)."""
    command: tuple[str, ...] | None
    interval: float
    """Seconds per sample asked for."""
    budget: Budget
    thresholds: Thresholds
    """The thresholds the run was judged with."""
    episodes: bool = True
    """The run was judged with episodes (its thresholds name theirs); False for a recording
    of an oversub before them, whose recorded verdict the whole run's average made."""


@dataclass(frozen=True)
class Ending:
    """The summary record: how the run ended and what it concluded."""

    verdict: str | None
    """The recorded verdict (None: not judged)."""
    findings: tuple[str, ...]
    """The recorded findings' rule ids, in report order."""
    target_exited: bool
    notes: tuple[str, ...]
    command_status: int | None
    timed_out: bool
    interrupted: bool
    metrics: tuple[tuple[str, float], ...] = ()
    """Figures CMD printed on stdout as `NAME=<number>` (`check --metric NAME`): the last
    value of each."""


@dataclass(frozen=True)
class Recording:
    """A recording as read: header, intervals in order, and the ending when it has one."""

    header: Header
    intervals: tuple[Interval, ...]
    timestamps: tuple[str, ...]
    """The wall-clock end of each interval, UTC, ISO 8601 (as recorded: untrusted text)."""
    ending: Ending | None
    """None: the run was killed before it ended (the file is a prefix)."""
    cut: bool = False
    """The last line was cut (a write interrupted by SIGKILL) and was left out."""

    @property
    def check(self) -> bool:
        return self.header.mode.startswith("check")


@dataclass(frozen=True)
class Replay:
    """A recording re-assessed under `thresholds`, as a live run would have judged it."""

    recording: Recording
    thresholds: Thresholds
    intervals: tuple[Interval, ...]
    """The recorded intervals, active threads counted under `thresholds`."""
    assessments: tuple[Assessment, ...]
    """The verdict of each interval, as the live view showed it."""
    summary: Summary
    """The whole run (for `check`, judged by its policy)."""
    metrics: tuple[tuple[str, float], ...] = ()
    """Figures the workload printed (`Ending.metrics`)."""


@dataclass(frozen=True)
class Figures:
    """What `oversub diff` compares of one run (means over the run)."""

    verdict: str | None
    """None: not judged."""
    vcpus: int
    demand: float
    run_delay_ratio: float | None
    active_threads: int
    """Sustained for a quarter of the run (as the verdict counts them)."""
    involuntary_ctx_per_cpu_s: float | None
    cpu_percent: float
    seconds: float
    metric: float | None
    """The value of `--metric` the workload printed (last one), None when not recorded."""
    metrics: tuple[tuple[str, float], ...] = ()
    """Every figure the workload printed and the run recorded (`Replay.metrics`)."""


@dataclass(frozen=True)
class Comparison:
    """Two runs side by side, and whether the second is worse (`recording.compare`)."""

    before: Figures
    after: Figures
    metric: str | None
    """The figure named by `--metric`."""
    worse: tuple[str, ...]
    """Why AFTER is worse than BEFORE (empty: it is not)."""
    better: tuple[str, ...]
    """What improved, in words."""
    unjudged: tuple[str, ...] = ()
    """Which run has no verdict (nothing to compare: exit 3)."""
    metrics: tuple[str, ...] = ()
    """The throughputs shown: `metric` first, then every other figure both runs recorded."""
    noted: tuple[str, ...] = ()
    """Each shown throughput that is not gated (no `--metric` names it) and is lower in
    AFTER by more than the tolerance, in words ("steps 100 -> 50, 50% lower"): said, not
    judged."""
