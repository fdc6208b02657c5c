"""`check --junit`: the run as JUnit XML, one test case per rule, so CI dashboards show
which rules passed and which failed.

Pure: returns a string. Built with xml.etree.ElementTree so every message, command line
and process name is escaped by the library, never by hand.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from oversub.core.names import FailOn
from oversub.core.results import Finding, Gate, Summary
from oversub.core.rules import PREFLIGHT_RULES, RUNTIME_RULES, Rule, RuleInfo
from oversub.render.episodeview import episode_lines
from oversub.render.phrases import budget_limit_line

_CLASSNAME = "oversub"

# Characters XML 1.0 cannot hold even escaped; ElementTree writes them anyway and the
# result no longer parses. Process names and command lines can contain them, and lone
# surrogates (from undecodable bytes) cannot even be written out as UTF-8.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _mode_rules(s: Summary) -> Mapping[Rule, RuleInfo]:
    """The rules the run's mode applies: the preflight's for a static preflight, else the
    run-time rules."""
    return PREFLIGHT_RULES if s.preflight else RUNTIME_RULES


def _evidence_value(value: float | int | str | None) -> str:
    """Evidence for people: "unknown" rather than Python's `None`, floats without noise."""
    if value is None:
        return "unknown (not measured)"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _finding_text(f: Finding) -> str:
    """The body of a failure or system-out entry: message, fix, pids, evidence."""
    lines = [f"[{f.severity.value}] {f.message}", f"fix: {f.fix}"]
    if f.pids:
        lines.append("pids: " + ", ".join(str(pid) for pid in f.pids))
    for key, value in f.evidence.items():
        lines.append(f"{key}: {_evidence_value(value)}")
    return xml_text("\n".join(lines))


def _passes(f: Finding, gate: Gate) -> str:
    """Why a finding of a judged run does not fail."""
    if gate.fail_on is FailOn.COSTLY:
        return f"not critical, passes --fail-on costly (severity {f.severity.value})"
    return f"below --fail-on {gate.fail_on.value} (verdict {f.verdict.value})"


def summary_junit(s: Summary, gate: Gate, *, rules: Mapping[Rule, RuleInfo] | None = None) -> str:
    """JUnit XML for the run, with an XML declaration and a trailing newline.

    One `<testsuite name="oversub">` holding one `<testcase classname="oversub" name=RULE>`
    per rule of `rules` (default: the catalogue of the mode that ran, `rules.RUNTIME_RULES`
    for a run, `rules.PREFLIGHT_RULES` for a static preflight), plus one per rule that fired
    but is not listed, so no finding is ever dropped. Each failing finding (`gate`, from
    `analysis.policy`) becomes
    a `<failure message=MESSAGE type=SEVERITY>` of its rule's test case (body: fix, pids,
    evidence); findings that do not fail (below `fail_on`; not critical under `costly`)
    become `<system-out>` text of their test case.
    A run that was not judged fails nothing: every test case is `<skipped message="not
    judged: REASON">` (findings still go to `<system-out>`). Suite attributes: `tests` =
    test cases, `failures` = test cases with at least one failure, `errors` = 0,
    `skipped` = skipped test cases, `time` = the run's duration in seconds. Suite
    `<properties>` record the verdict ("not judged" without one), fail-on, N and the root
    pid, and `episodes` (the totals against the rule) when the run had episodes, which the
    suite's `<system-out>` then lists (`episodeview.episode_lines`).
    """
    catalogue = {
        str(rule): info.summary
        for rule, info in (_mode_rules(s) if rules is None else rules).items()
    }
    by_rule: dict[str, list[Finding]] = {}
    for f in s.findings:
        by_rule.setdefault(str(f.rule), []).append(f)
        catalogue.setdefault(str(f.rule), "")
    judged = s.verdict is not None
    not_judged = f"not judged: {s.not_judged or 'nothing was measured'}"
    episodes = episode_lines(s)

    suite = ET.Element("testsuite", name=_CLASSNAME)
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", "not judged" if s.verdict is None else s.verdict.value),
        ("fail_on", gate.fail_on.value),
        ("vcpus", str(s.budget.vcpus)),
        ("budget", budget_limit_line(s.budget)),
        ("root_pid", str(s.root_pid)),
        *((("cgroup", s.budget.cgroup),) if s.budget.cgroup is not None else ()),
        ("samples", str(s.samples)),
        *((("episodes", episodes[0].removeprefix("episodes: ")),) if episodes else ()),
    ):
        ET.SubElement(properties, "property", name=name, value=xml_text(value))

    failed_cases = 0
    for rule, description in catalogue.items():
        case = ET.SubElement(
            suite, "testcase", classname=_CLASSNAME, name=xml_text(rule), time=f"{s.duration_s:.3f}"
        )
        findings = by_rule.get(rule, [])
        failing = [f for f in findings if gate.fails(f)]
        passing = [f for f in findings if f not in failing]
        if not judged:
            ET.SubElement(case, "skipped", message=xml_text(not_judged))
        for f in failing:
            failure = ET.SubElement(
                case, "failure", message=xml_text(f.message), type=f.severity.value
            )
            failure.text = (xml_text(description) + "\n" if description else "") + _finding_text(f)
        if passing:
            out = ET.SubElement(case, "system-out")
            out.text = "\n\n".join(
                (_passes(f, gate) if judged else f"measured, but the run is {not_judged}")
                + ":\n"
                + _finding_text(f)
                for f in passing
            )
        failed_cases += bool(failing)

    if episodes:  # the suite's own output: every episode, each cause with its fix
        ET.SubElement(suite, "system-out").text = xml_text("\n".join(episodes))
    suite.set("tests", str(len(catalogue)))
    suite.set("failures", str(failed_cases))
    suite.set("errors", "0")
    suite.set("skipped", "0" if judged else str(len(catalogue)))
    suite.set("time", f"{s.duration_s:.3f}")
    ET.indent(suite)
    body = ET.tostring(suite, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
