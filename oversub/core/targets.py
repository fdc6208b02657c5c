"""What a command follows (`Target`: a process tree, a cgroup or the node) and what the one
sampling loop hands on each interval (`TargetResult`, `Round`) and `serve` exposes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.model import Budget
from oversub.core.names import TargetKind
from oversub.core.results import Assessment, Interval
from oversub.core.samples import TreeSample


class Target(NamedTuple):
    """What `watch`, `check` and `serve` follow; `run.sources.attach` makes its source."""

    kind: TargetKind
    pid: int = 0
    """A tree's root process (0 otherwise)."""
    cgroup: str = ""
    """A cgroup's path as /proc/PID/cgroup shows it ("" otherwise)."""
    name: str = "tree"
    """A tree's name in `serve`'s labels (`--name`)."""
    adopter: int | None = None
    """A tree started by oversub as its child subreaper: oversub's pid (orphans count)."""

    @classmethod
    def tree(cls, pid: int, *, name: str = "tree", adopter: int | None = None) -> Target:
        return cls(TargetKind.TREE, pid=pid, name=name, adopter=adopter)

    @classmethod
    def of_cgroup(cls, path: str) -> Target:
        return cls(TargetKind.CGROUP, cgroup=path, name=path)

    @classmethod
    def node(cls) -> Target:
        return cls(TargetKind.NODE, name="/")

    def gone(self, sample: TreeSample) -> bool:
        """The target has exited, from one sample of it: the one test of an exit.

        A tree: its root is missing, a zombie waiting for its parent to reap it, or listed
        but with no thread left to read (reaped between the /proc scan and the task reads).
        A cgroup is gone when it was removed (while empty it is only idle); the node never.
        """
        if self.kind is not TargetKind.TREE:
            return sample.gone
        root = sample.processes.get(self.pid)
        return root is None or all(t.state in "ZX" for t in root.threads)


class TargetResult(NamedTuple):
    """One target over the last interval."""

    target: str
    """Its name: the cgroup path, the tree's `--name`, or "/" for the node."""
    kind: TargetKind
    cgroup: str
    """The cgroup path (a tree: its root process's; "" when unknown)."""
    budget: Budget
    interval: Interval
    assessment: Assessment
    state: str
    """The verdict as a state (`analysis.fleet.state`); "" for the node, which has none."""


class Round(NamedTuple):
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


class Counters(NamedTuple):
    """What a target did since the exporter first saw it: sums of its intervals' raw deltas.
    None: unknown in some interval (the counter is then not exported)."""

    cpu_s: float = 0.0
    delay_s: float | None = 0.0
    involuntary: int | None = 0
    voluntary: int | None = 0
    throttled_s: float | None = None
    """None until an interval measured throttling (a target without a quota has none)."""


class Exported(NamedTuple):
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
