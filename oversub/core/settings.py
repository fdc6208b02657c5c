"""Every setting a run is judged or paced by, declared once.

One row per setting: its name, kind, default, allowed range, the help text (word for word
docs/rules.md's or docs/cli.md's), its `[tool.oversub]` key and the commands that take it as
a flag. From this table come the click options of `watch` and `check`
(`oversub.cli.options`), the validation of `[tool.oversub]` (`oversub.cli.config`), the
defaults of `thresholds.Thresholds`, and the docs check (tests/unit/core/test_catalogue.py).
A value is resolved in one place (`cli.config.resolve`): the flag, else the pyproject key,
else the default here.

To add a setting: a row here (and a field of `thresholds.Thresholds` when the verdict uses it),
a row in the table of docs/rules.md or docs/cli.md; the flag, the key and their validation follow.

Pure data; imported by `watch` and `check` at start, not by `recommend` or `cpus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.names import FailOn

# NamedTuples, not dataclasses: this table is built at every start of the CLI, and a
# dataclass costs about five times as much to create (bench/startup.py measures start-up).


class Range(NamedTuple):
    """Allowed interval of a number; None = unbounded on that side."""

    low: float
    low_open: bool = False
    high: float | None = None
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if value <= self.low if self.low_open else value < self.low:
            return False
        return not (
            self.high is not None and (value >= self.high if self.high_open else value > self.high)
        )

    def describe(self) -> str:
        """ ">= 0", "> 0", "in [0.1, 3600]": for error messages."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


class Setting(NamedTuple):
    """One setting: a flag, a `[tool.oversub]` key and a default."""

    name: str
    """Python name: the `Thresholds` field or the command's parameter ("delay_ratio")."""
    default: float | str | None
    """Value when neither flag nor key is given (None: no default, e.g. no timeout)."""
    help: str
    """What it means: `--help` adds " [DEFAULT]."; the docs' table has the same words."""
    commands: tuple[str, ...]
    """The commands that take it as a flag."""
    allowed: Range | None = None
    """The range of a number; None for a choice."""
    choices: tuple[str, ...] = ()
    """The values of a choice, worst first."""
    seconds: bool = False
    """A number of seconds (the flag's metavar says so)."""
    threshold: bool = False
    """A field of `thresholds.Thresholds`: the verdict depends on it."""

    @property
    def key(self) -> str:
        """The `[tool.oversub]` key, spelled as the flag: "delay-ratio"."""
        return self.name.replace("_", "-")

    @property
    def flag(self) -> str:
        return "--" + self.key

    @property
    def help_text(self) -> str:
        """`--help`: the meaning and the default, "... [0.15]." (no default: no brackets)."""
        if self.default is None:
            return self.help
        return f"{self.help} [{self.default}]."


_JUDGING = ("watch", "check", "serve")
"""The commands that sample and judge (their interval and thresholds)."""
_REJUDGING = ("watch", "check", "report", "serve")
"""Thresholds are also flags of `report`, which judges a recording again."""

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "margin",
        0.15,
        "demand may exceed N by this fraction of N (measurement noise)",
        _REJUDGING,
        Range(0.0),
        threshold=True,
    ),
    Setting(
        "delay_ratio",
        0.10,
        'delay ratio above which threads "wait" (healthy ≈ 0.01, 2× oversubscribed ≈ 0.5)',
        _REJUDGING,
        Range(0.0, high=1.0),
        threshold=True,
    ),
    Setting(
        "active_cpu",
        0.20,
        'share of the interval a thread must be runnable (running or waiting) to count as "active"',
        _REJUDGING,
        Range(0.0, low_open=True, high=1.0),
        threshold=True,
    ),
    Setting(
        "throttle_ratio",
        0.10,
        "share of quota periods throttled that counts as the quota biting",
        _REJUDGING,
        Range(0.0, high=1.0),
        threshold=True,
    ),
    Setting(
        "outside_cpu",
        0.50,
        "CPUs used outside the tree that count as the cause of waiting",
        _REJUDGING,
        Range(0.0),
        threshold=True,
    ),
    Setting(
        "idle_seconds",
        3.0,
        "idle time after which a forked OpenMP child is reported hung",
        _REJUDGING,
        Range(0.0, low_open=True),
        seconds=True,
        threshold=True,
    ),
    Setting(
        "min_wait",
        0.05,
        "CPU-seconds per second of waiting below which nothing counts as waiting",
        _REJUDGING,
        Range(0.0),
        threshold=True,
    ),
    Setting(
        "episode_share",
        0.10,
        "share of the time measured that episodes of one verdict must fill, together, to "
        "make the run's verdict",
        _REJUDGING,
        Range(0.0, low_open=True, high=1.0),
        threshold=True,
    ),
    Setting(
        "episode_seconds",
        3.0,
        "seconds those episodes must also last together (one short spike is no share)",
        _REJUDGING,
        Range(0.0),
        seconds=True,
        threshold=True,
    ),
    Setting(
        "long_episode",
        30.0,
        "an episode at least this many seconds long makes the run's verdict whatever its share",
        _REJUDGING,
        Range(0.0, low_open=True),
        seconds=True,
        threshold=True,
    ),
    Setting(
        "fail_on",
        FailOn.COSTLY.value,
        "Fail on a costly (critical) finding, or on this verdict or worse",
        ("check", "merge"),
        choices=tuple(v.value for v in FailOn),
    ),
    Setting(
        "interval",
        1.0,
        "Seconds per sample",
        (*_JUDGING, "tune", "run"),
        # At least 0.1 s: sampling a large tree more often makes oversub itself a CPU hog;
        # at most an hour: an hour between two samples is already one rate for the hour.
        Range(0.1, high=3600.0),
        seconds=True,
    ),
    Setting(
        "warmup",
        1.0,
        "With a command: seconds ignored at start (imports, pool start-up)",
        ("check", "run"),
        Range(0.0),
        seconds=True,
    ),
    Setting(
        "record_max_mb",
        50.0,
        "With --record: above this many MB, intervals are merged in pairs (coarser, not cut)",
        ("watch", "check"),
        Range(0.1),
    ),
    Setting(
        "timeout",
        None,
        "With a command: end it after this many seconds (TERM, then KILL); not a failure.",
        ("check",),
        Range(0.0, low_open=True),
        seconds=True,
    ),
)
"""Every setting, in the order of the docs' tables and of `--help`."""

BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
BY_KEY: Mapping[str, Setting] = {s.key: s for s in SETTINGS}
THRESHOLDS: tuple[Setting, ...] = tuple(s for s in SETTINGS if s.threshold)


def default(name: str) -> float:
    """The default of a numeric setting (for the fields of `thresholds.Thresholds`)."""
    value = BY_NAME[name].default
    assert isinstance(value, float)
    return value
