"""`oversub merge` in each format: plain text, JSON, Markdown, JUnit XML.

Pure: each function takes the merged `JobReport` and the exit status and returns a string
ending in a newline. Everything in a report came from a file that anyone may have written
(node names, rule ids, messages, file names): the text formats pass every piece through
their sink's function of `render.escape`, JUnit through ElementTree (plus `junit.xml_text` for
what XML cannot hold), JSON through the serialiser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from oversub.core.errors import ExitStatus
from oversub.core.names import FailOn, Verdict
from oversub.core.nodes import JobReport, NodeRow
from oversub.core.plural import count
from oversub.render.escape import markdown, terminal

_NONE = "-"


def _listed(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def verdict_line(job: JobReport, status: ExitStatus) -> str:
    """The job's answer in one line, with the exit status (unescaped: callers escape)."""
    n = len(job.rows)
    unjudged = job.not_judged
    costly = job.fail_on is FailOn.COSTLY
    if job.failing:
        names = [row.label for row in job.failing]
        tail = f"; {count(len(unjudged), 'node')} not judged" if unjudged else ""
        if costly:
            # The job's verdict may come from a node that passes: name what fails.
            return (
                f"FAIL: a costly finding (--fail-on costly) on {len(names)} of "
                f"{count(n, 'node')}: {_listed(names)}; job verdict {job.verdict}{tail}, "
                f"exit {int(status)}"
            )
        return (
            f"FAIL: job verdict {job.verdict} (--fail-on {job.fail_on}) on {len(names)} of "
            f"{count(n, 'node')}: {_listed(names)}{tail}, exit {int(status)}"
        )
    if unjudged:
        why = "; ".join(f"{row.label}: {row.report.not_judged_reason}" for row in unjudged[:3]) + (
            "; …" if len(unjudged) > 3 else ""
        )
        judged = n - len(unjudged)
        rest = f"; the {count(judged, 'judged node')} at worst {job.verdict}" if judged else ""
        return (
            f"error: not judged: {len(unjudged)} of {count(n, 'node')} without a verdict "
            f"({why}){rest}, exit {int(status)}"
        )
    why = ", no costly finding" if costly and job.verdict is not Verdict.OK else ""
    return (
        f"pass: job verdict {job.verdict}, the worst of {count(n, 'node')}{why} "
        f"(--fail-on {job.fail_on}), exit {int(status)}"
    )


def _verdict_cell(row: NodeRow) -> str:
    verdict = row.report.verdict
    return "not judged" if verdict is None else verdict.value


def _worst_cell(row: NodeRow) -> str:
    r = row.report
    if r.verdict is None:
        return f"({r.not_judged_reason})"  # the verdict column says "not judged"
    return r.worst.rule if r.worst is not None else _NONE


def _demand(row: NodeRow) -> str:
    d = row.report.demand
    return _NONE if d is None else f"{d:.2f}"


def _cells(job: JobReport, escape: Callable[[str], str]) -> list[list[str]]:
    return [
        [
            escape(row.label),
            str(row.report.vcpus),
            _demand(row),
            _verdict_cell(row),
            escape(_worst_cell(row)),
        ]
        for row in job.rows
    ]


_HEADER = ["node", "N", "demand", "verdict", "worst finding"]


def _episode_totals(row: NodeRow) -> str:
    """ "3 oversubscribed, 12.0 s (26%), made the verdict; 1 starved, 1.0 s (2%)"."""
    return "; ".join(
        f"{t.episodes} {t.verdict.value}, {t.seconds:.1f} s ({t.share:.0%})"
        + (", made its verdict" if t.counts else ", below the rule")
        for t in row.report.episode_totals
    )


def _worst_episode(row: NodeRow) -> str:
    """ "oversubscribed at 24.0-27.0 s, peak demand 4.07: CAUSE" (unescaped)."""
    e = row.report.episodes[0]
    return (
        f"{e.verdict.value} at {e.start_s:.1f}-{e.end_s:.1f} s, peak demand "
        f"{e.demand_peak:.2f} ({e.rule}): {e.cause}"
    )


def _with_episodes(job: JobReport) -> list[NodeRow]:
    return [row for row in job.rows if row.report.episode_totals and row.report.episodes]


def episode_lines(row: NodeRow) -> list[str]:
    """A node's episodes in two lines (unescaped): the totals, the worst; [] without."""
    if not row.report.episode_totals or not row.report.episodes:
        return []
    return [f"episodes: {_episode_totals(row)}", f"the worst: {_worst_episode(row)}"]


def _heading(job: JobReport) -> str:
    n = len(job.rows)
    nodes = len({row.report.node for row in job.rows})
    job_id = f"; job {job.job}" if job.job else ""
    return f"{count(n, 'report')}, {count(nodes, 'node')}{job_id}"


def merge_text(job: JobReport, status: ExitStatus) -> str:
    """Plain text for a terminal or a log: the table, findings by rule, notes, the verdict."""
    rows = [_HEADER, *_cells(job, terminal)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    right = {1, 2}
    lines = [f"oversub merge: {terminal(_heading(job))}"]
    for r in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    shown = _with_episodes(job)
    if shown:
        lines.append("episodes by node:")
        for row in shown:
            lines.append(f"  {terminal(row.label)}: {terminal(_episode_totals(row))}")
            lines.append(f"    the worst: {terminal(_worst_episode(row))}")
    if job.rules:
        lines.append("findings by rule:")
        for rule in job.rules:
            lines.append(
                f"  {terminal(rule.rule)} ({rule.severity}, {rule.verdict}) on "
                f"{count(len(rule.nodes), 'node')}: {terminal(_listed(rule.nodes, 20))}"
            )
            lines.append(f"    e.g. {terminal(rule.example)}")
    for note in job.notes:
        lines.append(f"note: {terminal(note)}")
    lines.append(f"oversub merge: {terminal(verdict_line(job, status))}")
    return "\n".join(lines) + "\n"


def merge_markdown(job: JobReport, status: ExitStatus) -> str:
    """Markdown (a CI job summary, a comment): heading, node table, rules table, notes."""
    word = "FAIL" if status is ExitStatus.FOUND else "pass" if status is ExitStatus.OK else "error"
    lines = [
        f"## oversub merge: {word}, exit {int(status)}",
        "",
        markdown(verdict_line(job, status)),
        "",
        markdown(_heading(job)),
        "",
        "| " + " | ".join(_HEADER) + " |",
        "|---|---:|---:|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in _cells(job, markdown)]
    if job.rules:
        lines += ["", "### Findings by rule", "", "| rule | severity | verdict | nodes | e.g. |"]
        lines.append("|---|---|---|---|---|")
        for rule in job.rules:
            cells = [
                markdown(rule.rule),
                rule.severity.value,
                rule.verdict.value,
                markdown(_listed(rule.nodes, 20)),
                markdown(rule.example),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    shown = _with_episodes(job)
    if shown:
        lines += [
            "",
            "### Episodes by node",
            "",
            "| node | episodes | the worst |",
            "|---|---|---|",
        ]
        for row in shown:
            cells = [
                markdown(row.label),
                markdown(_episode_totals(row)),
                markdown(_worst_episode(row)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    if job.notes:
        lines += ["", *(f"- {markdown(note)}" for note in job.notes)]
    return "\n".join(lines) + "\n"


def merge_dict(job: JobReport, status: ExitStatus) -> dict[str, Any]:
    """The `--format json` object.

    Keys:
      - `verdict` (str | null): the worst verdict of the judged nodes; null when none was.
      - `judged` (bool): every node has a verdict.
      - `fail_on` (str: costly, oversubscribed, starved, at-risk), `exit_status` (int): the
        gate and its answer (as `check`).
      - `job` (str | null): "SLURM_JOB_ID=…" or "TORCHELASTIC_RUN_ID=…" when the reports
        agree on one.
      - `nodes` (list): one object per report kept, in row order: `node`, `label` (the
        node, or "node (file)" when the node has several reports), `source` (the file),
        `vcpus`, `demand` (float | null), `verdict` (str | null), `not_judged_reason`
        (str | null), `fails` (bool), `worst_finding` (`{rule, severity, verdict, message}`
        or null), `launcher_env` (object), `episodes` (list: the episodes its report kept,
        the worst first, each `{verdict, start_s, end_s, demand_peak, counts, rule,
        cause}`; [] for a report without any), `episode_totals` (list: per verdict
        `{verdict, episodes, seconds, share, counts}`).
      - `failing_nodes`, `not_judged_nodes` (list[str]): labels.
      - `rules` (list): `{rule, severity, verdict, nodes (labels), example}`, worst first.
      - `notes` (list[str]): duplicates, reports of several jobs.
    """
    nodes = []
    for row in job.rows:
        r, worst = row.report, row.report.worst
        nodes.append(
            {
                "node": r.node,
                "label": row.label,
                "source": r.source,
                "vcpus": r.vcpus,
                "demand": None if r.demand is None else round(r.demand, 3),
                "verdict": None if r.verdict is None else r.verdict.value,
                "not_judged_reason": r.not_judged_reason,
                "fails": row.fails,
                "worst_finding": None
                if worst is None
                else {
                    "rule": worst.rule,
                    "severity": worst.severity.value,
                    "verdict": worst.verdict.value,
                    "message": worst.message,
                },
                "launcher_env": dict(r.launcher_env),
                "episodes": [
                    e._asdict()
                    | {
                        "verdict": e.verdict.value,
                        "start_s": round(e.start_s, 3),
                        "end_s": round(e.end_s, 3),
                        "demand_peak": round(e.demand_peak, 3),
                    }
                    for e in r.episodes
                ],
                "episode_totals": [
                    t._asdict()
                    | {
                        "verdict": t.verdict.value,
                        "seconds": round(t.seconds, 3),
                        "share": round(t.share, 3),
                    }
                    for t in r.episode_totals
                ],
            }
        )
    return {
        "verdict": None if job.verdict is None else job.verdict.value,
        "judged": job.judged,
        "fail_on": job.fail_on.value,
        "exit_status": int(status),
        "job": job.job,
        "nodes": nodes,
        "failing_nodes": [row.label for row in job.failing],
        "not_judged_nodes": [row.label for row in job.not_judged],
        "rules": [
            {
                "rule": rule.rule,
                "severity": rule.severity.value,
                "verdict": rule.verdict.value,
                "nodes": list(rule.nodes),
                "example": rule.example,
            }
            for rule in job.rules
        ],
        "notes": list(job.notes),
    }


def _row_gate(row: NodeRow, job: JobReport) -> str:
    """A failing node against the gate: "verdict starved (--fail-on starved)", or under
    `costly` "verdict at-risk, 1 costly finding: fork-hang (--fail-on costly)"."""
    if job.fail_on is FailOn.COSTLY:
        rules = ", ".join(dict.fromkeys(f.rule for f in row.failing))
        found = f", {count(len(row.failing), 'costly finding')}: {rules}"
    else:
        found = ""
    return f"verdict {row.report.verdict}{found} (--fail-on {job.fail_on})"


def merge_junit(job: JobReport, status: ExitStatus) -> str:
    """JUnit XML: one `<testsuite name="oversub merge">`, one test case per node row
    (classname "oversub.merge", name = the label): a `<failure>` when it fails `--fail-on`
    (its verdict, or under `costly` a critical finding), an `<error>` when it was not
    judged, its findings in `<system-out>`."""
    import xml.etree.ElementTree as ET

    from oversub.render.junit import xml_text

    suite = ET.Element(
        "testsuite",
        name="oversub merge",
        tests=str(len(job.rows)),
        failures=str(len(job.failing)),
        errors=str(len(job.not_judged)),
    )
    for row in job.rows:
        r = row.report
        case = ET.SubElement(suite, "testcase", classname="oversub.merge", name=xml_text(row.label))
        body = "\n".join(
            [
                *(f"[{f.severity}] {f.rule} ({f.verdict}): {f.message}" for f in r.findings),
                *episode_lines(row),
            ]
        )
        if r.verdict is None:
            ET.SubElement(case, "error", message=xml_text(f"not judged: {r.not_judged_reason}"))
        elif row.fails:
            failure = ET.SubElement(
                case,
                "failure",
                message=xml_text(f"{_row_gate(row, job)} in {r.source}"),
                type=r.verdict.value,
            )
            failure.text = xml_text(body)
        if body and not row.fails:
            ET.SubElement(case, "system-out").text = xml_text(body)
    props = ET.Element("properties")
    ET.SubElement(props, "property", name="verdict", value=str(job.verdict or "not judged"))
    ET.SubElement(props, "property", name="exit_status", value=str(int(status)))
    suite.insert(0, props)  # JUnit's schema puts the properties first
    text = ET.tostring(suite, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + text + "\n"
