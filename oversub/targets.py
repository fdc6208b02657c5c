"""Many targets over one interval (`watch --all`, `serve`): what the node loop hands on.

Kinds of target: "tree" (a process tree, `serve --pid`), "cgroup" (one cgroup and the
cgroups below it) and "node" (the whole node, `/`, with `--all`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from oversub.model import Budget
from oversub.results import Assessment, Interval


@dataclass(frozen=True)
class TargetResult:
    """One target over the last interval."""

    target: str
    """Its name: the cgroup path, the tree's `--name`, or "/" for the node."""
    kind: str
    """"tree", "cgroup" or "node"."""
    cgroup: str
    """The cgroup path (a tree: its root process's; "" when unknown)."""
    budget: Budget
    interval: Interval
    assessment: Assessment
    state: str
    """The verdict as a state (`analysis.fleet.state`); "" for the node, which has none."""


@dataclass(frozen=True)
class Round:
    """All targets over one interval, ranked worst first (`analysis.fleet.rank`)."""

    targets: tuple[TargetResult, ...]
    node: TargetResult | None
    """The node's totals (`--all` only)."""
    found: int
    """Targets read before any cut (node mode: those that hold load)."""
    up: bool
    """The target could be read: the pid exists, the cgroup exists, /proc was scanned."""
    elapsed: float
    """Seconds since the first reading."""
    intervals: int
    sample_s: float
    """Wall time the reading and its analysis took: the cost of one interval."""


@dataclass(frozen=True)
class Counters:
    """What a target did since the exporter first saw it: sums of its intervals' raw deltas.
    None: unknown in some interval (the counter is then not exported)."""

    cpu_s: float = 0.0
    delay_s: float | None = 0.0
    involuntary: int | None = 0
    voluntary: int | None = 0
    throttled_s: float | None = None
    """None until an interval measured throttling (a target without a quota has none)."""


@dataclass(frozen=True)
class Exported:
    """What `serve` exposes at a scrape: the latest round and the counters, read whole."""

    round: Round | None
    """The last round; None before the first one (two samples)."""
    counters: Mapping[str, Counters]
    """target -> its counters (the node's under "/")."""
    up: bool
    """The last sample read its target."""
    last_sample_unix: float | None
    """Wall time of the last sample, Unix seconds."""
    interval_s: float
    """The sampling interval asked for."""
    top: int
    """At most this many targets (besides the node) are exported."""
    version: str
    python: str
