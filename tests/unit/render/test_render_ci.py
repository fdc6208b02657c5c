"""CI reports: Markdown (GitHub step summary), JUnit XML, GitHub workflow annotations, and
the shared fail-on rule.

`github.annotations` is called through its module: with `from __future__ import annotations`
in force, importing the bare name would clash with the future feature."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from oversub.analysis.policy import fails, gate
from oversub.core.names import FailOn, Severity, Verdict
from oversub.core.results import Finding, Summary
from oversub.core.rules import PREFLIGHT_RULES, RUNTIME_RULES, Rule
from oversub.render import github
from oversub.render.junit import summary_junit
from oversub.render.markdown import summary_markdown
from tests.support.builders import (
    make_finding,
    make_host_rates,
    make_process_summary,
    make_summary,
)

RULES = {
    rule: RUNTIME_RULES[rule]
    for rule in (Rule.OVERSUBSCRIBED_POOLS, Rule.POOL_DEFAULT, Rule.ORPHAN)
}


def junit(s: Summary, *, fail_on: FailOn, **kwargs: Any) -> str:
    return summary_junit(s, gate(s, fail_on), **kwargs)


def annotate(s: Summary, *, fail_on: FailOn) -> list[str]:
    return github.annotations(s, gate(s, fail_on))


def markdown(s: Summary, *, fail_on: FailOn, **kwargs: Any) -> str:
    return summary_markdown(s, gate=gate(s, fail_on), **kwargs)


def critical() -> Finding:
    return make_finding()


def hazard() -> Finding:
    return make_finding(
        rule="pool-default",
        severity=Severity.WARNING,
        verdict=Verdict.AT_RISK,
        message="2 processes map libgomp sized by default.",
        pids=(2001,),
        evidence={"processes": 2},
        fix="Set OMP_NUM_THREADS=1.",
    )


def info() -> Finding:
    return make_finding(
        rule="orphan",
        severity=Severity.INFO,
        verdict=Verdict.OK,
        message="pid 7 lost its parent.",
        fix="Nothing to do.",
    )


def mixed_summary() -> Summary:
    return make_summary(findings=(critical(), hazard(), info()))


@pytest.mark.parametrize("fail_on", [v for v in FailOn if v is not FailOn.COSTLY])
@pytest.mark.parametrize("verdict", list(Verdict))
def test_a_verdict_gate_compares_ranks(fail_on: FailOn, verdict: Verdict) -> None:
    # The one pass/fail policy (issue 13 item 3): "ok" never fails, the rest by rank, and
    # the severities do not matter (a cheap warning fails --fail-on oversubscribed).
    bar = Verdict(fail_on.value)
    expected = verdict is not Verdict.OK and verdict.rank >= bar.rank
    for findings in ((), (hazard(),), (critical(),)):
        assert fails(verdict, findings, fail_on) is expected


# The gate values x a run with a critical finding, with warnings only, with no finding, and
# not judged (issue 21 item 3): `costly` looks at severities, the others at the verdict.
CHEAP = make_finding(rule="oversubscribed-threads", severity=Severity.WARNING)
HANG = make_finding(rule="fork-hang", severity=Severity.CRITICAL, verdict=Verdict.AT_RISK)
RUNS: dict[str, tuple[Verdict | None, tuple[Finding, ...]]] = {
    "critical": (Verdict.OVERSUBSCRIBED, (make_finding(), CHEAP)),
    "warning": (Verdict.OVERSUBSCRIBED, (CHEAP, info())),
    "hang": (Verdict.AT_RISK, (HANG,)),
    "at-risk": (Verdict.AT_RISK, (hazard(),)),
    "none": (Verdict.OK, ()),
    "not judged": (None, (make_finding(),)),
}
FAILS = {
    FailOn.COSTLY: {"critical", "hang"},
    FailOn.OVERSUBSCRIBED: {"critical", "warning"},
    FailOn.STARVED: {"critical", "warning"},
    FailOn.AT_RISK: {"critical", "warning", "hang", "at-risk"},
}


@pytest.mark.parametrize("fail_on", list(FailOn))
@pytest.mark.parametrize("run", list(RUNS))
def test_each_gate_value_on_each_kind_of_run(fail_on: FailOn, run: str) -> None:
    from oversub.analysis.policy import exit_status
    from oversub.core.errors import ExitStatus
    from oversub.core.results import CheckOutcome

    verdict, findings = RUNS[run]
    s = make_summary(verdict=verdict, findings=findings)
    expected = run in FAILS[fail_on]
    assert fails(verdict, findings, fail_on) is expected
    status = exit_status(CheckOutcome(s), fail_on)
    if verdict is None:
        assert status is ExitStatus.UNOBSERVABLE  # exit 3 whatever the gate
        assert gate(s, fail_on).failing == ()
    else:
        assert status is (ExitStatus.FOUND if expected else ExitStatus.OK)
        # The findings marked failing are those that make the run fail, and only those.
        assert bool(gate(s, fail_on).failing) is expected
    assert exit_status(CheckOutcome(s, interrupted=True), fail_on) is ExitStatus.INTERRUPTED


def test_costly_marks_the_critical_findings_only() -> None:
    s = make_summary(findings=(make_finding(), CHEAP, HANG, info()))
    assert [f.rule for f in gate(s, FailOn.COSTLY).failing] == ["oversubscribed-pools", "fork-hang"]
    # --fail-on oversubscribed marks by verdict: the cheap warning fails, the hang does not.
    marked = [f.rule for f in gate(s, FailOn.OVERSUBSCRIBED).failing]
    assert marked == ["oversubscribed-pools", "oversubscribed-threads"]


def test_the_default_gate_is_costly() -> None:
    from oversub.cli.check.runners import CheckOptions
    from oversub.core.settings import SETTINGS

    assert CheckOptions().fail_on is FailOn.COSTLY
    setting = next(s for s in SETTINGS if s.name == "fail_on")
    assert setting.default == "costly"
    assert setting.choices == ("costly", "oversubscribed", "starved", "at-risk")


# --------------------------------------------------------------------------- markdown


def test_markdown_has_heading_findings_processes_and_budget() -> None:
    md = markdown(
        mixed_summary(),
        command=["python", "train.py", "--lr", "0.1"],
        exit_status=1,
        command_status=0,
        fail_on=FailOn.OVERSUBSCRIBED,
    )
    assert md.startswith("## oversub: OVERSUBSCRIBED (FAILED)\n")
    assert md.endswith("\n")
    assert "1 of 3 findings at or above `--fail-on oversubscribed`" in md
    assert "exit status 1" in md
    assert "Command: <code>python train.py --lr 0.1</code> (exit status 0)" in md
    assert "N = 2 usable vCPUs (limited by affinity: 2 CPUs)" in md
    rows = [line for line in md.splitlines() if line.startswith("| oversubscribed-pools")]
    assert len(rows) == 1
    assert "critical" in rows[0] and "oversubscribed (fails)" in rows[0]
    assert "export OMP_NUM_THREADS=1 before starting the job." in rows[0]
    assert "| pool-default | warning | at-risk |" in md  # below fail-on: no "(fails)"
    assert any(line.startswith("| 2001 | python train.py --worker |") for line in md.splitlines())
    assert "### Totals" in md and "demand 4.00 runnable threads on N = 2" in md


def test_markdown_escapes_pipes_and_newlines_in_cells() -> None:
    weird = make_finding(message="a|b\nc", fix="use `x | y`")
    s = make_summary(
        findings=(weird,),
        processes=(make_process_summary(cmdline="py|thon", thread_env={"OMP_NUM_THREADS": "1|2"}),),
    )
    md = markdown(
        s, command=None, exit_status=0, command_status=None, fail_on=FailOn.OVERSUBSCRIBED
    )
    row = next(line for line in md.splitlines() if line.startswith("| oversubscribed-pools"))
    assert "a\\|b<br>c" in row and "use \\`x \\| y\\`" in row
    # Unescaped pipes split cells: the row keeps exactly 5 cells (6 separators).
    assert row.replace("\\|", "").count("|") == 6
    assert "py\\|thon" in md and "OMP_NUM_THREADS=1\\|2" in md
    assert "Command:" not in md


def test_markdown_passing_run_and_backticks_in_command() -> None:
    s = make_summary(verdict=Verdict.OK, findings=(), processes=())
    md = markdown(
        s,
        command=["sh", "-c", "echo `date`"],
        exit_status=0,
        command_status=None,
        fail_on=FailOn.AT_RISK,
    )
    assert md.startswith("## oversub: OK (passed)")
    assert "No findings." in md and "No process was observed." in md
    assert "<code>sh -c 'echo \\`date\\`'</code>" in md and "(no exit status)" in md


# --------------------------------------------------------------------------- junit


def parse(xml: str) -> ET.Element:
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>\n') and xml.endswith("\n")
    return ET.fromstring(xml.split("\n", 1)[1])


def cases(suite: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in suite.iter("testcase")}


@pytest.mark.parametrize(
    ("fail_on", "failing_rules"),
    [
        (FailOn.OVERSUBSCRIBED, {"oversubscribed-pools"}),
        (FailOn.COSTLY, {"oversubscribed-pools"}),
        (FailOn.AT_RISK, {"oversubscribed-pools", "pool-default"}),
    ],
)
def test_junit_failure_per_failing_finding(fail_on: FailOn, failing_rules: set[str]) -> None:
    suite = parse(junit(mixed_summary(), fail_on=fail_on, rules=RULES))
    assert suite.tag == "testsuite" and suite.get("name") == "oversub"
    by_name = cases(suite)
    assert list(by_name) == list(RULES)
    assert all(case.get("classname") == "oversub" for case in by_name.values())
    assert suite.get("tests") == str(len(RULES))
    assert suite.get("failures") == str(len(failing_rules))
    for name, case in by_name.items():
        failures = case.findall("failure")
        if name in failing_rules:
            assert len(failures) == 1
            assert case.find("system-out") is None
        else:
            assert failures == []
            out = case.find("system-out")
            why = "not critical, passes --fail-on costly" if fail_on is FailOn.COSTLY else "below"
            assert out is not None and why in (out.text or "")


def test_junit_failure_content() -> None:
    suite = parse(junit(mixed_summary(), fail_on=FailOn.AT_RISK, rules=RULES))
    failure = cases(suite)["pool-default"].find("failure")
    assert failure is not None
    assert failure.get("message") == hazard().message
    assert failure.get("type") == "warning"
    body = failure.text or ""
    assert (
        RUNTIME_RULES[Rule.POOL_DEFAULT].summary in body and "fix: Set OMP_NUM_THREADS=1." in body
    )
    assert "pids: 2001" in body and "processes: 2" in body
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "oversubscribed" and props["fail_on"] == "at-risk"
    assert props["vcpus"] == "2"


def test_junit_several_findings_of_one_rule_and_unknown_rules() -> None:
    s = make_summary(
        findings=(
            make_finding(pids=(1,), message="first <&>"),
            make_finding(pids=(2,), message="second\x01"),
            make_finding(rule="new-rule", message="not in the catalogue"),
        )
    )
    suite = parse(junit(s, fail_on=FailOn.AT_RISK, rules=RULES))
    by_name = cases(suite)
    messages = [f.get("message") for f in by_name["oversubscribed-pools"].findall("failure")]
    assert messages == ["first <&>", "second\ufffd"]
    assert "new-rule" in by_name  # a finding of an unlisted rule is never dropped
    assert suite.get("tests") == str(len(RULES) + 1)
    assert suite.get("failures") == "2"


def test_junit_lists_only_the_rules_of_the_mode_that_ran() -> None:
    # Issue 11 item 8: a run listed the preflight rules as passing test cases.
    suite = parse(junit(make_summary(findings=()), fail_on=FailOn.AT_RISK))
    assert list(cases(suite)) == list(RUNTIME_RULES)
    assert suite.get("failures") == "0"
    static = make_summary(findings=(), preflight=True, samples=0, processes=())
    suite = parse(junit(static, fail_on=FailOn.AT_RISK))
    assert list(cases(suite)) == list(PREFLIGHT_RULES)


def test_junit_evidence_has_no_python_reprs() -> None:
    finding = make_finding(evidence={"throttled_ratio": None, "demand": 3.5, "processes": 2})
    text = junit(make_summary(findings=(finding,)), fail_on=FailOn.OVERSUBSCRIBED)
    assert "None" not in text
    assert "throttled_ratio: unknown (not measured)" in text and "demand: 3.5" in text


# --------------------------------------------------------------------------- github


def test_annotations_error_for_failing_warning_for_others() -> None:
    lines = annotate(mixed_summary(), fail_on=FailOn.OVERSUBSCRIBED)
    assert lines == [
        "::error title=oversub oversubscribed-pools::"
        "2 processes run OpenMP pools of 2 threads each on 2 vCPUs. "
        "Fix: export OMP_NUM_THREADS=1 before starting the job.",
        "::warning title=oversub pool-default::"
        "2 processes map libgomp sized by default. Fix: Set OMP_NUM_THREADS=1.",
    ]
    # With fail_on at-risk the hazard fails too; the ok finding never does.
    assert [
        line.split(" ", 1)[0] for line in annotate(mixed_summary(), fail_on=FailOn.AT_RISK)
    ] == ["::error", "::error"]


def test_annotations_escape_workflow_command_syntax() -> None:
    f = make_finding(rule="a:b,c", message="100% busy\r\nline two", fix="x: y")
    (line,) = annotate(make_summary(findings=(f,)), fail_on=FailOn.AT_RISK)
    assert line == "::error title=oversub a%3Ab%2Cc::100%25 busy%0D%0Aline two Fix: x: y"
    assert "\n" not in line and "\r" not in line


def test_escape_functions_escape_percent_first() -> None:
    assert github.escape_data("%0A") == "%250A"
    assert github.escape_property("a:%,\n") == "a%3A%25%2C%0A"


def test_markdown_multiline_command_stays_one_line() -> None:
    # A newline in an argument must not start a line of Markdown (a heading, raw HTML): the
    # command stays on its line, its line breaks as <br>, its HTML as entities.
    script = "import os\nprint(os.getpid())\n<script>alert(1)</script>"
    md = markdown(
        make_summary(),
        command=["python", "-c", script],
        exit_status=0,
        command_status=-15,
        fail_on=FailOn.OVERSUBSCRIBED,
    )
    (line,) = [line for line in md.splitlines() if line.startswith("Command:")]
    assert line == (
        "Command: <code>python -c 'import os<br>print(os.getpid())<br>"
        "&lt;script&gt;alert(1)&lt;/script&gt;'</code> (exit status -15)"
    )
    assert not any(line.startswith("<script>") for line in md.splitlines())


def test_markdown_host_line_leaves_out_unknown_signals() -> None:
    s = make_summary(host=make_host_rates(psi_some=None, throttled_ratio=0.2, throttled_s=1.0))
    md = markdown(
        s, command=None, exit_status=0, command_status=None, fail_on=FailOn.OVERSUBSCRIBED
    )
    host = next(line for line in md.splitlines() if line.startswith("- Host:"))
    assert host == (
        "- Host: outside the tree 0.05 CPUs, steal 0.00 CPUs, throttled 20% of periods (1.00 s)"
    )
    bare = make_summary(host=make_host_rates(outside_cpus=None, steal_cpus=None, psi_some=None))
    bare_md = markdown(
        bare, command=None, exit_status=0, command_status=None, fail_on=FailOn.OVERSUBSCRIBED
    )
    assert "- Host:" not in bare_md


# --------------------------------------------------------------------------- hostile text

FORGED = "8\x1b]0;x\x07\x1b[2J\n::error::forged\r\noversub check: pass <script>alert(1)</script>"
"""A thread-variable value (or process name) that would drive a terminal, forge workflow
commands and a verdict line, and inject HTML."""


def hostile_summary() -> Summary:
    finding = make_finding(message=f"pid 7 {FORGED}", fix=f"unset `{FORGED}` | & [x](y)")
    # No command line: the name (comm) labels the process (a zombie, a kernel thread).
    name = "\x1b[2J<b>x</b>"
    process = make_process_summary(name=name, cmdline="", thread_env={"OMP_NUM_THREADS": FORGED})
    return make_summary(findings=(finding,), processes=(process,), notes=(FORGED,))


def test_markdown_has_no_raw_html_and_no_line_of_its_own_for_untrusted_text() -> None:
    md = markdown(
        hostile_summary(),
        command=["sh", "-c", FORGED],
        exit_status=1,
        command_status=0,
        fail_on=FailOn.OVERSUBSCRIBED,
    )
    assert "<script>" not in md and "<b>" not in md and "\x1b" not in md and "\r" not in md
    assert "&lt;script&gt;" in md and "&lt;b&gt;" in md
    assert not any(line.startswith(("::", "oversub check", "&lt;")) for line in md.splitlines())
    row = next(line for line in md.splitlines() if line.startswith("| oversubscribed-pools"))
    assert row.replace("\\|", "").count("|") == 6  # one row, five cells: nothing broke out
    assert "\\[x\\](y)" in row and "\\`" in row and "&amp;" in row


def test_annotations_cannot_forge_a_workflow_command() -> None:
    lines = annotate(hostile_summary(), fail_on=FailOn.AT_RISK)
    assert len(lines) == 1
    (line,) = lines
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x07" not in line
    assert "%0A::error::forged%0D%0Aoversub check: pass" in line
    assert "\\x1b]0;x\\x07" in line


def test_markdown_fits_the_job_summary_limit_by_leaving_out_processes() -> None:
    processes = tuple(
        make_process_summary(pid=10_000 + i, cpu_percent=float(i % 97), thread_env={"OMP_X": "y"})
        for i in range(20_000)
    )
    s = make_summary(processes=processes)
    common = {"command": ["python", "train.py"], "exit_status": 0, "command_status": 0}
    whole = markdown(s, fail_on=FailOn.OVERSUBSCRIBED, **common)  # type: ignore[arg-type]
    assert len(whole.encode()) > 1 << 20
    limit = (1 << 20) - 5000
    cut = markdown(s, fail_on=FailOn.OVERSUBSCRIBED, max_bytes=limit, **common)  # type: ignore[arg-type]
    assert len(cut.encode()) <= limit
    assert "### Totals" in cut and "more processes (the lowest CPU) left out" in cut
    kept = {int(m[1]) for m in re.finditer(r"^\| (\d+) \| python", cut, re.MULTILINE)}
    assert 1000 < len(kept) < 20_000
    # The busiest are kept: every kept process used at least as much CPU as any left out.
    by_pid = {p.pid: p.cpu_percent for p in processes}
    assert min(by_pid[pid] for pid in kept) >= max(
        cpu for pid, cpu in by_pid.items() if pid not in kept
    )


# --------------------------------------------------------------------------- the gate's words
# Issue 21 item 3: every sink that shows the gate says what is true under --fail-on costly.


def closing(s: Summary, fail_on: FailOn, **kwargs: Any) -> str:
    from oversub.analysis.policy import exit_status
    from oversub.core.results import CheckDecision, CheckOutcome
    from oversub.render.checkview import closing_lines

    outcome = CheckOutcome(s, **kwargs)
    decision = CheckDecision(outcome, exit_status(outcome, fail_on), gate(s, fail_on))
    return closing_lines(decision)[-1]


def test_closing_line_under_costly_says_why_a_run_passes_or_fails() -> None:
    cheap = make_summary(findings=(CHEAP,))
    assert closing(cheap, FailOn.COSTLY) == (
        "oversub check: pass: verdict oversubscribed, no costly finding (--fail-on costly), exit 0"
    )
    assert closing(cheap, FailOn.OVERSUBSCRIBED) == (
        "oversub check: FAIL: verdict oversubscribed (--fail-on oversubscribed), exit 1"
    )
    costly = make_summary(findings=(make_finding(), CHEAP, HANG))
    assert closing(costly, FailOn.COSTLY) == (
        "oversub check: FAIL: verdict oversubscribed, 2 costly findings: oversubscribed-pools, "
        "fork-hang (--fail-on costly), exit 1"
    )
    hung = make_summary(verdict=Verdict.AT_RISK, findings=(HANG,))
    assert closing(hung, FailOn.COSTLY).startswith(
        "oversub check: FAIL: verdict at-risk, 1 costly finding: fork-hang"
    )
    ok = make_summary(verdict=Verdict.OK, findings=(info(),))
    assert (
        closing(ok, FailOn.COSTLY) == "oversub check: pass: verdict ok (--fail-on costly), exit 0"
    )
    assert closing(cheap, FailOn.COSTLY, interrupted=True) == (
        "oversub check: interrupted: verdict oversubscribed, no costly finding (--fail-on "
        "costly), exit 130"
    )
    unjudged = make_summary(verdict=None, findings=(make_finding(),), not_judged="it failed")
    assert closing(unjudged, FailOn.COSTLY) == "oversub check: error: not judged: it failed, exit 3"


def test_json_report_holds_the_gate_value() -> None:
    from oversub.core.errors import ExitStatus
    from oversub.core.results import CheckDecision, CheckOutcome
    from oversub.render.checkview import check_dict

    s = make_summary(findings=(CHEAP,))
    for fail_on in FailOn:
        doc = check_dict(CheckDecision(CheckOutcome(s), ExitStatus.OK, gate(s, fail_on)))
        assert doc["fail_on"] == fail_on.value


def test_markdown_under_costly_counts_the_critical_findings() -> None:
    common: dict[str, Any] = {"command": None, "command_status": None}
    md = markdown(
        make_summary(findings=(CHEAP, info())), fail_on=FailOn.COSTLY, exit_status=0, **common
    )
    assert md.startswith("## oversub: OVERSUBSCRIBED (passed)\n")
    assert "0 of 2 findings critical (`--fail-on costly` fails on a critical finding)" in md
    assert "(fails)" not in md
    md = markdown(mixed_summary(), fail_on=FailOn.COSTLY, exit_status=1, **common)
    assert md.startswith("## oversub: OVERSUBSCRIBED (FAILED)\n")
    assert "1 of 3 findings critical" in md and "oversubscribed (fails)" in md


def test_annotations_under_costly_error_on_critical_warn_on_the_rest() -> None:
    s = make_summary(findings=(make_finding(), CHEAP, HANG, info()))
    commands = [line.split(" ", 1)[0] for line in annotate(s, fail_on=FailOn.COSTLY)]
    assert commands == ["::error", "::warning", "::error"]
    commands = [line.split(" ", 1)[0] for line in annotate(s, fail_on=FailOn.OVERSUBSCRIBED)]
    assert commands == ["::error", "::error", "::warning"]


def test_junit_under_costly_fails_critical_findings_and_says_why_the_rest_pass() -> None:
    s = make_summary(findings=(make_finding(), CHEAP))
    suite = parse(junit(s, fail_on=FailOn.COSTLY))
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["fail_on"] == "costly"
    by_name = cases(suite)
    assert len(by_name["oversubscribed-pools"].findall("failure")) == 1
    assert by_name["oversubscribed-threads"].findall("failure") == []
    out = by_name["oversubscribed-threads"].find("system-out")
    assert out is not None
    assert (out.text or "").startswith("not critical, passes --fail-on costly (severity warning)")
