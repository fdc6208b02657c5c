"""`check --markdown` and `$GITHUB_STEP_SUMMARY`: the run as a GitHub-flavoured Markdown report.

Pure: returns a string. No emoji (badges are words, which survive every renderer and
screen reader). Every text that is not a fixed word of this module goes through
`escape.markdown` (no raw HTML, no Markdown syntax, no line of its own), so process names,
thread variables, messages, paths and the command line can never break a table or inject
HTML.

GitHub refuses a job summary larger than 1 MiB, so `summary_markdown` can be asked for at
most `max_bytes`: the per-process table then ends early, lowest CPU first, with a line
saying how many processes were left out (the JSON report has them all).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from oversub.core.names import FailOn
from oversub.core.plural import count
from oversub.core.results import Finding, Gate, Summary
from oversub.render.escape import markdown as _md
from oversub.render.phrases import (
    budget_limit_line,
    delay_text,
    headline,
    host_phrases,
    number,
    pools_text,
    process_label,
    rate,
    sizing_vars_text,
    target_name,
    totals_line,
    unavailable_text,
)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md(h) for h in headers) + " |"]
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
    return lines


def findings_section(findings: tuple[Finding, ...], gate: Gate) -> list[str]:
    """The findings table; the failing ones (none in a run not judged) are marked."""
    if not findings:
        return ["No findings."]
    rows = [
        (
            f.rule,
            f.severity.value,
            f.verdict.value + (" (fails)" if gate.fails(f) else ""),
            f.message,
            f.fix,
        )
        for f in findings
    ]
    return markdown_table(("Rule", "Severity", "Verdict", "Message", "Fix"), rows)


EPISODE_HEADERS = ("Verdict", "When", "Figures", "Busy processes", "Cause", "Fix")


def episodes_section(s: Summary) -> list[str]:
    """ "### Episodes": the totals against the rule, then a row per cause, the worst first
    (`episodeview.groups`); [] for a run without episodes."""
    from oversub.render.episodeview import (
        busy_text,
        cause_text,
        figures,
        groups,
        others,
        span_text,
        totals_line,
    )

    head = totals_line(s)
    if head is None:
        return []
    rows = []
    for g in groups(s.episodes):
        e = g.worst
        also = others(g)
        rows.append(
            (
                e.verdict.value,
                span_text(g) + (f"; {also}" if also else ""),
                figures(e, s.budget.vcpus),
                busy_text(e),
                cause_text(e),
                e.finding.fix,
            )
        )
    said = _md(head[:1].upper() + head[1:]) + "."
    return ["", "### Episodes", "", said, "", *markdown_table(EPISODE_HEADERS, rows)]


PROCESS_HEADERS = (
    "PID",
    "Name",
    "Threads (peak active/total)",
    "CPU % mean/peak",
    "Demand mean/peak",
    "Run delay mean/peak",
    "Invol/s mean/peak",
    "Pools",
    "Sizing variables",
)


def process_rows(s: Summary) -> list[tuple[str, ...]]:
    """One row per process, busiest first."""
    th = s.thresholds
    cmdlines = {p.pid: p.cmdline for p in s.processes}
    return [
        (
            str(p.pid),
            process_label(p.name, p.cmdline, cmdlines.get(p.ppid), p.ppid)
            + (" (exited)" if p.exited else ""),
            f"{p.active_threads_peak}/{p.threads}",
            f"{p.cpu_percent:.0f} / {p.cpu_percent_peak:.0f}",
            f"{p.demand:.2f} / {p.demand_peak:.2f}",
            f"{delay_text(p.run_delay_ratio, p.demand, th)} / "
            f"{delay_text(p.run_delay_ratio_peak, p.demand_peak, th)}",
            f"{rate(p.involuntary_ctx_per_s)} / {rate(p.involuntary_ctx_per_s_peak)}",
            pools_text(p.pools, p.live_pools),
            sizing_vars_text(p.pools, p.thread_env),
        )
        for p in sorted(s.processes, key=lambda p: p.cpu_percent, reverse=True)
    ]


def _size(lines: list[str]) -> int:
    """Bytes of `lines` joined by newlines, with the final newline."""
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def _left_out(hidden: int, max_bytes: int) -> list[str]:
    return [
        "",
        f"{count(hidden, 'more process', 'more processes')} (the lowest CPU) left out: the "
        f"report must stay under {max_bytes:,} bytes (a GitHub job summary holds at most "
        "1 MiB); the --json report lists every process.",
    ]


def _fit_processes(head: list[str], table: list[str], tail: list[str], max_bytes: int) -> list[str]:
    """`table` (header, separator, rows by CPU) cut so that the report fits in `max_bytes`,
    ending with a line that says how many rows were left out."""
    header, rows = table[:2], table[2:]
    # The note with the largest count is the longest: reserve room for it.
    room = max_bytes - _size([*head, *header, *_left_out(len(rows), max_bytes), *tail])
    kept = 0
    for row in rows:
        room -= len(row.encode("utf-8")) + 1
        if room < 0:
            break
        kept += 1
    if not kept:
        return _left_out(len(rows), max_bytes)[1:]
    return [*header, *rows[:kept], *_left_out(len(rows) - kept, max_bytes)]


def _fail_rule(gate: Gate) -> str:
    """What makes a finding fail, after "K of N findings"."""
    if gate.fail_on is FailOn.COSTLY:
        return "critical (`--fail-on costly` fails on a critical finding)"
    return f"at or above `--fail-on {gate.fail_on.value}`"


def summary_markdown(
    s: Summary,
    *,
    command: tuple[str, ...] | None,
    exit_status: int,
    command_status: int | None,
    gate: Gate,
    max_bytes: int | None = None,
) -> str:
    """The run as Markdown, ending in a newline.

    Sections: a heading with the verdict as a word badge ("OVERSUBSCRIBED"), whether the
    check failed at `--fail-on`, the command and its exit status, the budget line, a
    findings table (rule, severity, verdict, message, fix), a per-process mean/peak table,
    totals and host context. The badge says FAILED when any finding fails (`gate`, from
    `analysis.policy`); `exit_status` is printed as given, since the CLI may fail for other
    reasons.
    With `max_bytes`, process rows are left out (lowest CPU first, and said so) until the
    report fits; a report whose other sections alone exceed it is returned whole.
    """
    word, meaning = headline(s)
    if s.verdict is None:
        head = [
            f"## oversub: {_md(word.upper())} (error)",
            "",
            f"**Not judged**: {_md(meaning)}. Nothing passes or fails; "
            f"oversub exit status {exit_status}.",
            "",
        ]
    else:
        failing = gate.failing
        outcome = "FAILED" if failing else "passed"
        head = [
            f"## oversub: {_md(word.upper())} ({outcome})",
            "",
            f"**Verdict: {_md(word)}**: {_md(meaning)}. "
            f"{len(failing)} of {count(len(s.findings), 'finding')} {_fail_rule(gate)}; "
            f"oversub exit status {exit_status}.",
            "",
        ]
    if command is not None:
        status = "no exit status" if command_status is None else f"exit status {command_status}"
        # One line whatever the arguments hold, escaped like every other text (a code span
        # cannot escape "<" for a renderer that does not treat it as code).
        head += [f"Command: <code>{_md(shlex.join(command))}</code> ({status})", ""]
    exited = ", target exited" if s.target_exited else ""
    watched = (
        "Static preflight of a plan: nothing was sampled."
        if s.preflight
        else f"Watched {_md(target_name(s.root_pid, s.budget))} for {s.duration_s:.1f} s "
        f"({count(s.samples, 'sample')}{exited})."
    )
    head += [
        f"Budget: {_md(budget_limit_line(s.budget))}. {watched}",
        "",
        "### Findings",
        "",
        *findings_section(s.findings, gate),
        *episodes_section(s),
    ]
    if s.preflight:
        head.extend(f"- Note: {_md(note)}" for note in s.notes)
        return "\n".join(head) + "\n"
    head += ["", "### Processes", ""]
    rows = process_rows(s)
    table = markdown_table(PROCESS_HEADERS, rows) if rows else ["No process was observed."]
    tail = [
        "",
        "### Totals",
        "",
        f"- Mean: {_md(totals_line(s.totals, s.budget.vcpus, s.thresholds))}",
        f"- Peak: demand {number(s.totals_peak.demand)}, CPU {s.totals_peak.cpu_percent:.0f}%, "
        "run delay "
        + _md(delay_text(s.totals_peak.run_delay_ratio, s.totals_peak.demand, s.thresholds)),
    ]
    host = host_phrases(s.host)
    if host:
        tail.append(f"- Host: {_md(', '.join(host))}")
    if s.unavailable:
        tail.append(f"- Unavailable here: {_md(unavailable_text(s.unavailable))}")
    tail.extend(f"- Note: {_md(note)}" for note in s.notes)
    if max_bytes is not None and rows and _size([*head, *table, *tail]) > max_bytes:
        table = _fit_processes(head, table, tail, max_bytes)
    return "\n".join([*head, *table, *tail]) + "\n"
