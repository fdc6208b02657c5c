"""The numbers the verdict depends on, with their defaults from the settings table.

Apart from `oversub.core.settings` so that listing the commands (`oversub --help`) builds the
table's rows but not this record.
"""

from __future__ import annotations

from typing import NamedTuple

from oversub.core.settings import default


class Thresholds(NamedTuple):
    """Every number the verdict depends on; each is a CLI flag and a pyproject key, and each
    default is the one of `oversub.core.settings` (where the help text lives too)."""

    margin: float = default("margin")
    """Demand may exceed N by this fraction of N before it counts (measurement noise)."""
    delay_ratio: float = default("delay_ratio")
    """Share of runnable time spent waiting above which threads 'wait'."""
    active_cpu: float = default("active_cpu")
    """A thread runnable (running or waiting) this share of an interval counts as active.

    Runnable, not running: under contention a busy thread gets little CPU but stays runnable."""
    throttle_ratio: float = default("throttle_ratio")
    """Share of cgroup periods throttled above which the quota 'bites'."""
    outside_cpu: float = default("outside_cpu")
    """CPUs used outside the tree above which other processes count as the cause."""
    idle_seconds: float = default("idle_seconds")
    """A forked child idle this long with OpenMP mapped is reported as hung."""
    min_wait: float = default("min_wait")
    """Threads 'wait' only when the tree also spends at least this many CPU-seconds per second
    waiting: an idle tree's rare wake-ups can show a high delay ratio on almost nothing."""
    episode_share: float = default("episode_share")
    """Episodes of one verdict (oversubscribed, starved) make the run's verdict when together
    they fill this share of the time measured (and `episode_seconds`)."""
    episode_seconds: float = default("episode_seconds")
    """... and last at least this many seconds together: one short spike is no share."""
    long_episode: float = default("long_episode")
    """One episode at least this long makes the run's verdict whatever its share."""

    def episode_rule(self) -> str:
        """The rule that makes a run's verdict from its episodes, in words: "at least 10% of
        the time measured and 3 s together, or one episode of 30 s"."""
        return (
            f"at least {self.episode_share:.0%} of the time measured and "
            f"{self.episode_seconds:g} s together, or one episode of {self.long_episode:g} s"
        )
