"""`oversub merge`: the per-node reports of one job, read back and merged into one.

Pure: `parse_report` turns one decoded JSON document into a `NodeReport` (or says, in one
line, why it is not one); `merge` combines them into a `JobReport`; `merge_status` is the
exit status, with `check`'s policy (`analysis.policy.fails`). Reading files is the CLI's.

A report is untrusted input (it may come from any node, or from anyone): every field used
is checked for its type and range (numbers as a recording's are, `analysis.fields.number`:
finite and bounded, so every format can write them), text is cut to `MAX_TEXT` characters,
the number of findings to `MAX_FINDINGS`, and the launcher ids go through the same
allow-list as when they were written (`analysis.launcher.launcher_identity`). Renderers
escape all of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from oversub.analysis.fields import MAX_NUMBER, BadRecord, number
from oversub.analysis.launcher import launcher_identity
from oversub.analysis.policy import fails, finding_fails
from oversub.core.errors import ExitStatus, UsageError
from oversub.core.model import MAX_VCPUS
from oversub.core.names import FailOn, Name, Severity, Verdict
from oversub.core.nodes import (
    JobReport,
    NodeEpisode,
    NodeEpisodes,
    NodeFinding,
    NodeReport,
    NodeRow,
    RuleNodes,
)
from oversub.core.origin import MAX_NODE

MAX_TEXT = 300
"""Characters kept of a message or a reason; a longer one ends in "…"."""
MAX_RULE = 64
MAX_FINDINGS = 1000
"""Findings a report may list (oversub writes one per rule, a few dozen at most)."""
JOB_VARS = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
"""The launcher ids that name a whole job, in the order they are looked at."""
MAX_EPISODES = 100
"""Episodes a report may list (oversub writes at most 20)."""
MAX_LISTED = 5
"""Names listed in one note or line before "and N more"."""

_E = TypeVar("_E", bound=Name)


class BadReport(UsageError):
    """A file given to `merge` is not a report it can read (exit 2)."""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _kind(value: object) -> str:
    """The JSON name of a value's type, for error messages (never the value itself)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


class _Reader:
    """Checks the fields of one report; each problem is a BadReport naming file and key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def bad(self, problem: str) -> BadReport:
        return BadReport(f"{self.source}: {problem}")

    def text(self, doc: Mapping[str, object], key: str, limit: int | None = None) -> str:
        value = doc.get(key)
        if not isinstance(value, str):
            raise self.bad(f"`{key}` is {_kind(value)}, not a string")
        if limit is not None and not 1 <= len(value) <= limit:
            raise self.bad(f"`{key}` is empty or longer than {limit} characters")
        return value if limit is not None else _cut(value)

    def enum(self, doc: Mapping[str, object], key: str, kind: type[_E]) -> _E:
        value = doc.get(key)
        allowed = [member.value for member in kind]
        if value not in allowed:
            shown = f"{value!r:.40}" if isinstance(value, str) else _kind(value)
            raise self.bad(f"`{key}` is {shown}, not one of {', '.join(allowed)}")
        return kind(value)

    def finding(self, index: int, item: object) -> NodeFinding:
        if not isinstance(item, dict):
            raise self.bad(f"`findings[{index}]` is {_kind(item)}, not an object")
        try:
            return NodeFinding(
                rule=self.text(item, "rule", MAX_RULE),
                severity=self.enum(item, "severity", Severity),
                verdict=self.enum(item, "verdict", Verdict),
                message=self.text(item, "message"),
            )
        except BadReport as exc:
            raise self.bad(f"in `findings[{index}]`: {str(exc).split(': ', 1)[1]}") from None

    def number(self, doc: Mapping[str, object], key: str) -> float:
        try:
            return number(doc.get(key), key)
        except BadRecord:
            raise self.bad(f"`{key}` is not a number from 0 to {MAX_NUMBER:g}") from None

    def flag(self, doc: Mapping[str, object], key: str) -> bool:
        value = doc.get(key)
        if not isinstance(value, bool):
            raise self.bad(f"`{key}` is {_kind(value)}, not a boolean")
        return value

    def items(self, doc: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
        """The objects of an optional list (absent in the reports of older versions)."""
        value = doc.get(key, [])
        if not isinstance(value, list):
            raise self.bad(f"`{key}` is {_kind(value)}, not a list")
        if len(value) > MAX_EPISODES:
            raise self.bad(f"more than {MAX_EPISODES} `{key}`")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.bad(f"`{key}[{i}]` is {_kind(item)}, not an object")
        return value

    def episode(self, index: int, item: Mapping[str, object]) -> NodeEpisode:
        try:
            finding = item.get("finding")
            if not isinstance(finding, dict):
                raise self.bad(f"`finding` is {_kind(finding)}, not an object")
            nesting = item.get("nesting")
            if nesting is not None and not isinstance(nesting, dict):
                raise self.bad(f"`nesting` is {_kind(nesting)}, not an object or null")
            return NodeEpisode(
                verdict=self.enum(item, "verdict", Verdict),
                start_s=self.number(item, "start_s"),
                end_s=self.number(item, "end_s"),
                demand_peak=self.number(item, "demand_peak"),
                counts=self.flag(item, "counts"),
                rule=self.text(finding, "rule", MAX_RULE),
                cause=self.text(nesting or finding, "message"),
            )
        except BadReport as exc:
            raise self.bad(f"in `episodes[{index}]`: {str(exc).split(': ', 1)[1]}") from None

    def total(self, index: int, item: Mapping[str, object]) -> NodeEpisodes:
        try:
            episodes = item.get("episodes")
            if not isinstance(episodes, int) or isinstance(episodes, bool) or episodes < 0:
                raise self.bad("`episodes` is not a whole number")
            return NodeEpisodes(
                verdict=self.enum(item, "verdict", Verdict),
                episodes=episodes,
                seconds=self.number(item, "seconds"),
                share=min(1.0, self.number(item, "share")),
                counts=self.flag(item, "counts"),
            )
        except BadReport as exc:
            raise self.bad(f"in `episode_totals[{index}]`: {str(exc).split(': ', 1)[1]}") from None


def parse_report(doc: object, source: str) -> NodeReport:
    """The node report in `doc` (a decoded `check --json` or `watch --format json` report),
    or BadReport naming `source` and the first problem found."""
    read = _Reader(source)
    if not isinstance(doc, dict):
        raise read.bad(f"not an oversub report: the JSON document is {_kind(doc)}, not an object")
    if doc.get("type") == "interval":
        raise read.bad("an interval record of `watch --format ndjson`, not a report")
    if "node" not in doc:
        missing = "judged" not in doc or "findings" not in doc
        raise read.bad(
            "not an oversub report (no `node` key)"
            if missing
            else "no `node` key: written by an oversub without node names; run "
            "`oversub check --json` again with this version"
        )
    node = read.text(doc, "node", MAX_NODE)
    vcpus = doc.get("vcpus")
    if not isinstance(vcpus, int) or isinstance(vcpus, bool) or not 1 <= vcpus <= MAX_VCPUS:
        raise read.bad(f"`vcpus` is not a whole number from 1 to {MAX_VCPUS}")
    judged = doc.get("judged")
    if not isinstance(judged, bool):
        raise read.bad(f"`judged` is {_kind(judged)}, not a boolean")
    verdict = read.enum(doc, "verdict", Verdict) if judged else None
    if not judged and doc.get("verdict") is not None:
        raise read.bad("`judged` is false but `verdict` is set")
    reason = doc.get("not_judged_reason")
    if reason is not None and not isinstance(reason, str):
        raise read.bad(f"`not_judged_reason` is {_kind(reason)}, not a string or null")
    totals = doc.get("totals")
    if not isinstance(totals, dict):
        raise read.bad(f"`totals` is {_kind(totals)}, not an object")
    raw_demand = totals.get("demand")
    try:
        demand = None if raw_demand is None else number(raw_demand, "demand")
    except BadRecord:  # 1e400 decodes to inf, an integer of 400 digits overflows a float
        raise read.bad(
            f"`totals.demand` is not a number from 0 to {MAX_NUMBER:g} or null"
        ) from None
    findings = doc.get("findings")
    if not isinstance(findings, list):
        raise read.bad(f"`findings` is {_kind(findings)}, not a list")
    if len(findings) > MAX_FINDINGS:
        raise read.bad(f"more than {MAX_FINDINGS} findings")
    parsed = [read.finding(i, item) for i, item in enumerate(findings)]
    ids = doc.get("launcher_env", {})
    if not isinstance(ids, dict):
        raise read.bad(f"`launcher_env` is {_kind(ids)}, not an object")
    return NodeReport(
        source=source,
        node=node,
        launcher_env=launcher_identity(ids),
        vcpus=vcpus,
        demand=demand,
        verdict=verdict,
        not_judged_reason=None if judged else _cut(reason or "no reason given"),
        findings=tuple(sorted(parsed, key=lambda f: (-f.verdict.rank, -f.severity.rank))),
        episodes=tuple(read.episode(i, e) for i, e in enumerate(read.items(doc, "episodes"))),
        episode_totals=tuple(
            read.total(i, t) for i, t in enumerate(read.items(doc, "episode_totals"))
        ),
    )


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """Sorts "node2" before "node10": runs of ASCII digits compare by value, everything else
    as text ("²" and "٣" are digits to str.isdigit, not to int(): they stay text, as in
    `analysis.fields.decimal_key`). Any string has a key."""
    parts = re.split(r"([0-9]+)", name)
    # The split's odd parts are the runs of ASCII digits (a node name has at most 253).
    return tuple((0, int(p), "") if i % 2 else (1, 0, p) for i, p in enumerate(parts) if p)


def listed(names: Sequence[str]) -> str:
    """ "a, b, c" with at most MAX_LISTED names, then "and N more"."""
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return shown if more <= 0 else f"{shown} and {more} more"


def _same_content(r: NodeReport) -> tuple[object, ...]:
    """Everything merge reads from a report but the file's name."""
    ids = tuple(sorted(r.launcher_env.items()))
    return (
        r.node,
        ids,
        r.vcpus,
        r.demand,
        r.verdict,
        r.not_judged_reason,
        r.findings,
        r.episodes,
        r.episode_totals,
    )


def _unique(reports: Sequence[NodeReport], notes: list[str]) -> list[NodeReport]:
    """The reports without copies: a second file with the same content counts once."""
    first: dict[tuple[object, ...], NodeReport] = {}
    for r in reports:
        key = _same_content(r)
        if key in first:
            notes.append(f"{r.source} is the same report as {first[key].source}: counted once")
        else:
            first[key] = r
    return list(first.values())


def _rows(reports: Sequence[NodeReport], fail_on: FailOn, notes: list[str]) -> list[NodeRow]:
    by_node: dict[str, list[NodeReport]] = {}
    for r in reports:
        by_node.setdefault(r.node, []).append(r)
    for node, same in by_node.items():
        if len(same) > 1:
            notes.append(
                f"node {node} has {len(same)} reports ({listed([r.source for r in same])}): "
                "each is its own row and counts for the job (several checks on one node, one "
                "per task, or reports of different runs: check the files)"
            )
    rows = [
        NodeRow(
            label=r.node if len(by_node[r.node]) == 1 else f"{r.node} ({r.source})",
            report=r,
            fails=fails(r.verdict, r.findings, fail_on),
            failing=()
            if r.verdict is None
            else tuple(f for f in r.findings if finding_fails(f, fail_on)),
        )
        for r in reports
    ]
    return sorted(rows, key=lambda row: (natural_key(row.report.node), row.report.source))


def _rules(rows: Sequence[NodeRow]) -> tuple[RuleNodes, ...]:
    """Each rule once, with the nodes whose reports name it, worst first."""
    order: list[str] = []
    nodes: dict[str, list[str]] = {}
    worst: dict[str, tuple[NodeFinding, str]] = {}
    for row in rows:
        for f in row.report.findings:
            if f.rule not in nodes:
                order.append(f.rule)
                nodes[f.rule] = []
            if row.label not in nodes[f.rule]:
                nodes[f.rule].append(row.label)
            held = worst.get(f.rule)
            if held is None or (f.verdict.rank, f.severity.rank) > (
                held[0].verdict.rank,
                held[0].severity.rank,
            ):
                worst[f.rule] = (f, row.label)
    found = [
        RuleNodes(
            rule=rule,
            severity=worst[rule][0].severity,
            verdict=worst[rule][0].verdict,
            nodes=tuple(nodes[rule]),
            example=f"{worst[rule][1]}: {worst[rule][0].message}",
        )
        for rule in order
    ]
    rank = {rule: i for i, rule in enumerate(order)}
    return tuple(sorted(found, key=lambda r: (-r.verdict.rank, -r.severity.rank, rank[r.rule])))


def _job(reports: Sequence[NodeReport], notes: list[str]) -> str | None:
    """ "SLURM_JOB_ID=812345" when the reports that name a job name the same one (with "(2 of
    3 reports)" when not all do); a note when they name several."""
    for var in JOB_VARS:
        naming = [r for r in reports if var in r.launcher_env]
        values = sorted({r.launcher_env[var] for r in naming})
        if len(values) == 1:
            some = (
                f" ({len(naming)} of {len(reports)} reports)" if len(naming) < len(reports) else ""
            )
            return f"{var}={values[0]}{some}"
        if values:
            notes.append(
                f"the reports come from {len(values)} jobs by {var} ({listed(values)}): "
                "merged all the same; give merge the reports of one job"
            )
            return None
    return None


def merge(
    reports: Sequence[NodeReport], fail_on: FailOn, *, notes: Sequence[str] = ()
) -> JobReport:
    """The job's report: a row per node report (copies counted once), the worst verdict of
    the judged nodes, the findings grouped by rule, `notes` then notes on duplicates and
    mixed jobs."""
    if not reports:
        raise UsageError("merge: no reports given")
    notes = list(notes)
    kept = _unique(reports, notes)
    rows = _rows(kept, fail_on, notes)
    judged = [row.report.verdict for row in rows if row.report.verdict is not None]
    job = _job(kept, notes)
    return JobReport(
        rows=tuple(rows),
        fail_on=fail_on,
        verdict=max(judged, key=lambda v: v.rank) if judged else None,
        rules=_rules(rows),
        notes=tuple(notes),
        job=job,
    )


def merge_status(job: JobReport) -> ExitStatus:
    """`check`'s codes for the job: 1 when a node fails `--fail-on` (a failure
    is certain whatever the other nodes say), else 3 when a node was not judged (a gate
    must not pass blind), else 0."""
    if job.failing:
        return ExitStatus.FOUND
    if not job.judged:
        return ExitStatus.UNOBSERVABLE
    return ExitStatus.OK
