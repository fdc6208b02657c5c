"""Data types of multi-node jobs: the reports of one job, read back and merged.

Foundation (standard library only): `analysis.jobmerge` reads the JSON reports that
`render.serialize` wrote (each with its `core.origin.NodeIdentity`) back into
`NodeReport`s and merges them into a `JobReport` that `render.mergeview` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.names import FailOn, Severity, Verdict


class NodeFinding(NamedTuple):
    """One finding of a node's report, as `merge` needs it."""

    rule: str
    severity: Severity
    verdict: Verdict
    message: str
    """Bounded (see `analysis.jobmerge`); untrusted: every renderer escapes it."""


class NodeEpisode(NamedTuple):
    """One episode of a node's report (`episodes[]`), as `merge` shows it."""

    verdict: Verdict
    start_s: float
    end_s: float
    demand_peak: float
    counts: bool
    """The episodes of its verdict made that node's verdict."""
    rule: str
    cause: str
    """Its nested parallelism's message, else its finding's; bounded, untrusted."""


class NodeEpisodes(NamedTuple):
    """Every episode of one verdict in a node's report (`episode_totals[]`)."""

    verdict: Verdict
    episodes: int
    seconds: float
    share: float
    counts: bool


class NodeReport(NamedTuple):
    """One node's report (`check --json`, `watch --format json`), read back by `merge`."""

    source: str
    """The file it was read from, as given on the command line."""
    node: str
    launcher_env: Mapping[str, str]
    vcpus: int
    demand: float | None
    """Mean runnable threads over the run; None when not measured."""
    verdict: Verdict | None
    """None: the run was not judged (`not_judged_reason` says why)."""
    not_judged_reason: str | None
    findings: tuple[NodeFinding, ...]
    """Worst first (verdict, then severity), as the report listed them otherwise."""
    episodes: tuple[NodeEpisode, ...] = ()
    """The episodes the report kept, the worst first (none in a report without them)."""
    episode_totals: tuple[NodeEpisodes, ...] = ()

    @property
    def worst(self) -> NodeFinding | None:
        return self.findings[0] if self.findings else None


class NodeRow(NamedTuple):
    """One row of the merged report: a node's report and the name it is shown under."""

    label: str
    """The node's name; "node (file)" when the same node has several reports."""
    report: NodeReport
    fails: bool
    """It fails `--fail-on` (`analysis.policy.fails`: a critical finding for `costly`,
    else its verdict)."""
    failing: tuple[NodeFinding, ...] = ()
    """Its findings that fail `--fail-on` (`analysis.policy.finding_fails`); none when it
    was not judged."""


class RuleNodes(NamedTuple):
    """A rule and the nodes whose reports name it."""

    rule: str
    severity: Severity
    """The worst severity it has on any node."""
    verdict: Verdict
    """The worst verdict it argues for on any node."""
    nodes: tuple[str, ...]
    """Row labels, in row order."""
    example: str
    """The first of those nodes' messages, prefixed by its label."""


class JobReport(NamedTuple):
    """The per-node reports of one job, merged (`analysis.jobmerge.merge`)."""

    rows: tuple[NodeRow, ...]
    """One per report kept, ordered by node name (numbers in names by value), then file."""
    fail_on: FailOn
    verdict: Verdict | None
    """The worst verdict of the judged nodes; None when no node was judged."""
    rules: tuple[RuleNodes, ...]
    """Worst first (verdict, severity), then by first appearance."""
    notes: tuple[str, ...]
    """What merge did with duplicates, and reports of other jobs."""
    job: str | None
    """The job's id when the reports that name one agree ("SLURM_JOB_ID=812345", with
    " (2 of 3 reports)" when some reports name none)."""

    @property
    def judged(self) -> bool:
        """Every node has a verdict: only then can the job pass."""
        return all(row.report.verdict is not None for row in self.rows)

    @property
    def failing(self) -> tuple[NodeRow, ...]:
        return tuple(row for row in self.rows if row.fails)

    @property
    def not_judged(self) -> tuple[NodeRow, ...]:
        return tuple(row for row in self.rows if row.report.verdict is None)
