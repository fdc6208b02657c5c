"""`check --markdown` and `$GITHUB_STEP_SUMMARY`: the run as a GitHub-flavoured Markdown report.

Pure: returns a string. No emoji (badges are words, which survive every renderer and
screen reader). Table cells escape pipes and fold newlines so user text (command lines,
messages) can never break a table.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from oversub.model import Verdict
from oversub.plural import count
from oversub.render.phrases import (
    budget_limit_line,
    delay_text,
    fails,
    headline,
    host_phrases,
    number,
    pools_text,
    process_label,
    rate,
    sizing_vars_text,
    totals_line,
    unavailable_text,
)
from oversub.results import Finding, Summary

__all__ = ["summary_markdown"]


def _cell(text: str) -> str:
    """Text safe inside one table cell: pipes escaped, line breaks as <br>."""
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")


def _longest_backtick_run(text: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def _code(text: str) -> str:
    """An inline code span that holds any text: the fence is one backtick longer than the
    longest run inside, and padded when the text starts or ends with a backtick."""
    fence = "`" * (_longest_backtick_run(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _code_block(text: str) -> list[str]:
    """A fenced block for multi-line text (an inline span would fold its lines)."""
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return [f"{fence}sh", *text.splitlines(), fence]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |"]
    lines.append("|" + "|".join("---" for _ in headers) + "|")
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _findings_section(findings: tuple[Finding, ...], fail_on: Verdict | None) -> list[str]:
    """The findings table; `fail_on` None (a run not judged): nothing is marked as failing."""
    if not findings:
        return ["No findings."]
    rows = [
        (
            f.rule,
            f.severity.value,
            f.verdict.value + (" (fails)" if fail_on is not None and fails(f, fail_on) else ""),
            f.message,
            f.fix,
        )
        for f in findings
    ]
    return _table(("Rule", "Severity", "Verdict", "Message", "Fix"), rows)


def _process_section(s: Summary) -> list[str]:
    if not s.processes:
        return ["No process was observed."]
    headers = (
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
    th = s.thresholds
    cmdlines = {p.pid: p.cmdline for p in s.processes}
    rows = [
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
    return _table(headers, rows)


def summary_markdown(
    s: Summary,
    *,
    command: list[str] | None,
    exit_status: int,
    command_status: int | None,
    fail_on: Verdict,
) -> str:
    """The run as Markdown, ending in a newline.

    Sections: a heading with the verdict as a word badge ("OVERSUBSCRIBED"), whether the
    check failed at `--fail-on`, the command and its exit status, the budget line, a
    findings table (rule, severity, verdict, message, fix), a per-process mean/peak table,
    totals and host context. `fail_on` semantics: a finding fails when
    finding.verdict.rank >= fail_on.rank; the badge says FAILED when any finding fails
    (`exit_status` is printed as given, since the CLI may fail for other reasons).
    """
    word, meaning = headline(s)
    if s.verdict is None:
        lines = [
            f"## oversub: {word.upper()} (error)",
            "",
            f"**Not judged**: {meaning}. Nothing passes or fails; "
            f"oversub exit status {exit_status}.",
            "",
        ]
    else:
        failing = [f for f in s.findings if fails(f, fail_on)]
        outcome = "FAILED" if failing else "passed"
        lines = [
            f"## oversub: {word.upper()} ({outcome})",
            "",
            f"**Verdict: {word}**: {meaning}. "
            f"{len(failing)} of {count(len(s.findings), 'finding')} at or above "
            f"`--fail-on {fail_on.value}`; oversub exit status {exit_status}.",
            "",
        ]
    if command is not None:
        status = "no exit status" if command_status is None else f"exit status {command_status}"
        text = shlex.join(command)
        if "\n" in text:
            lines += [f"Command ({status}):", "", *_code_block(text), ""]
        else:
            lines += [f"Command: {_code(text)} ({status})", ""]
    exited = ", target exited" if s.target_exited else ""
    watched = (
        "Static preflight of a plan: nothing was sampled."
        if s.preflight
        else f"Watched pid {s.root_pid} for {s.duration_s:.1f} s "
        f"({count(s.samples, 'sample')}{exited})."
    )
    lines += [
        f"Budget: {budget_limit_line(s.budget)}. {watched}",
        "",
        "### Findings",
        "",
        *_findings_section(s.findings, fail_on if s.judged else None),
    ]
    if s.preflight:
        lines.extend(f"- Note: {note}" for note in s.notes)
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "### Processes",
        "",
        *_process_section(s),
        "",
        "### Totals",
        "",
        f"- Mean: {totals_line(s.totals, s.budget.vcpus, s.thresholds)}",
        f"- Peak: demand {number(s.totals_peak.demand)}, CPU {s.totals_peak.cpu_percent:.0f}%, "
        "run delay "
        + delay_text(s.totals_peak.run_delay_ratio, s.totals_peak.demand, s.thresholds),
    ]
    host = host_phrases(s.host)
    if host:
        lines.append(f"- Host: {', '.join(host)}")
    if s.unavailable:
        lines.append(f"- Unavailable here: {unavailable_text(s.unavailable)}")
    lines.extend(f"- Note: {note}" for note in s.notes)
    return "\n".join(lines) + "\n"
