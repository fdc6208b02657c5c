"""A run's episodes in JSON, Markdown, JUnit and the HTML report whose verdict strip links to
them (issue 43); the headline of a verdict the episodes made."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from oversub.analysis.policy import gate
from oversub.analysis.rates import counted, interval
from oversub.analysis.summary import RunSummary
from oversub.core.names import FailOn
from oversub.core.results import Interval, Summary
from oversub.core.thresholds import Thresholds
from oversub.recording import ReportFormat, render_report
from oversub.recording.replay import parse, reassess
from oversub.render.finalreport import summary_text
from oversub.render.junit import summary_junit
from oversub.render.markdown import summary_markdown
from oversub.render.serialize import summary_dict
from tests.support.builders import (
    IDLE,
    ROOT,
    T0,
    Host,
    Load,
    Proc,
    budget,
    recording_lines,
    tree_pair,
)

TH = Thresholds()
XD = "python -u -c import sys;exec(eval(sys.stdin.readline()))"
HALF = Load(cpu=0.5, delay=0.5, involuntary=100.0)


def steps(
    bits: str, inner_cmd: str = "python -m loky.backend.popen_loky_posix {i}"
) -> list[Interval]:
    out = []
    for k, bit in enumerate(bits):
        procs = [
            Proc(ROOT, (IDLE,), ppid=1, cmdline="python -m pytest -n 2 tests"),
            Proc(101, (HALF if bit == "1" else Load(cpu=0.9),), cmdline=XD),
            Proc(102, (IDLE if bit == "1" else Load(cpu=0.9),), cmdline=XD),
        ]
        if bit == "1":
            procs += [
                Proc(120 + i, (HALF,), ppid=102, cmdline=inner_cmd.format(i=i)) for i in range(3)
            ]
        prev, curr = tree_pair(procs, t0=T0 + k, host=Host(outside=0.02))
        out.append(counted(interval(prev, curr, 2), TH))
    return out


def summary(bits: str, **kw: str) -> Summary:
    run = RunSummary(ROOT, TH)
    for iv in steps(bits, **kw):
        run.add(iv)
    return run.result(budget(2), TH, target_exited=True)


BURSTY = "0" * 10 + "111" + "0" * 10 + "1111" + "0" * 10 + "1" + "0" * 10


def test_the_headline_says_the_verdict_comes_from_episodes() -> None:
    s = summary(BURSTY)
    assert (
        summary_text(s)
        .splitlines()[0]
        .startswith(
            "oversub: oversubscribed (the tree kept more threads runnable than it has vCPUs in 3 "
            "episodes, 8.0 s (17% of the time measured)), pid 100"
        )
    )


def test_a_run_without_episodes_has_no_episode_section() -> None:
    s = summary("0" * 10)
    g = gate(s, FailOn.COSTLY)
    md = summary_markdown(s, command=None, exit_status=0, command_status=None, gate=g)
    assert "Episodes" not in md
    assert "episodes" not in summary_junit(s, g)


def test_json_has_every_episode_kept_and_the_totals() -> None:
    s = summary(BURSTY)
    doc = json.loads(json.dumps(summary_dict(s)))
    assert [(e["start_s"], e["end_s"]) for e in doc["episodes"]] == [
        (23.0, 27.0),
        (10.0, 13.0),
        (37.0, 38.0),
    ]
    e = doc["episodes"][0]
    assert list(e) == [
        "verdict",
        "start_s",
        "end_s",
        "seconds",
        "intervals",
        "counts",
        "demand",
        "demand_peak",
        "run_delay_ratio",
        "run_delay_ratio_peak",
        "waited_s",
        "finding",
        "busy",
        "processes",
        "nesting",
    ]
    assert (
        e["nesting"]["role"] == "pytest-xdist worker"
        and e["nesting"]["inner_role"] == "loky worker"
    )
    assert e["processes"][0]["parents"] == [
        {"pid": ROOT, "name": "python", "cmdline": "python -m pytest -n 2 tests", "role": None}
    ]
    assert doc["episode_totals"] == [
        {
            "verdict": "oversubscribed",
            "episodes": 3,
            "seconds": 8.0,
            "share": 0.167,
            "longest_s": 4.0,
            "waited_s": 16.0,
            "counts": True,
        }
    ]


def test_markdown_and_junit_show_the_episodes() -> None:
    s = summary(BURSTY)
    g = gate(s, FailOn.OVERSUBSCRIBED)
    md = summary_markdown(s, command=("pytest",), exit_status=1, command_status=0, gate=g)
    section = md.split("### Episodes", 1)[1].split("### Processes", 1)[0]
    assert (
        "| oversubscribed | 23.0-27.0 s (4.0 s, the worst of 3); also at 10.0-13.0 and" in section
    )
    assert "Nested parallelism: pid 101" in section
    suite = ET.fromstring(summary_junit(s, g).split("\n", 1)[1])
    out = suite.find("system-out")
    assert out is not None and out.text is not None and out.text.startswith("episodes: 3 oversub")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["episodes"].startswith("3 oversubscribed, 8.0 s")
    failures = [f.get("message") for f in suite.iter("failure")]
    assert any(m and m.startswith("3 oversubscribed episodes fill 8.0 s") for m in failures)


HOSTILE = '<img src="http://127.0.0.1:9/x.png">\x1b[2J\n::error::forged|x|'


def test_the_html_strip_links_every_episode_to_its_card() -> None:
    lines = recording_lines(steps(BURSTY.replace("0" * 10 + "1" + "0" * 10, "0" * 10)))
    page = render_report(reassess(parse(lines)), ReportFormat.HTML)
    cards = re.findall(r'<div class="card finding" id="(episode-[0-9]+)">', page)
    assert cards == ["episode-1", "episode-2"]
    links = re.findall(r'<a href="#(episode-[0-9]+)"><title>([^<]*)</title>', page)
    assert {target for target, _ in links} == {"episode-1", "episode-2"}
    assert ("episode-1", "oversubscribed at 23.0-27.0 s: see below") in links
    # One cell per interval of an episode: 4 + 3.
    assert [t for t, _ in links].count("episode-1") == 4
    assert [t for t, _ in links].count("episode-2") == 3


def test_hostile_names_in_episodes_are_escaped_everywhere() -> None:
    s = summary(BURSTY, inner_cmd=HOSTILE + " {i}")
    text = summary_text(s)
    assert "\x1b" not in text and not any(line.startswith("::") for line in text.splitlines())
    g = gate(s, FailOn.OVERSUBSCRIBED)
    md = summary_markdown(s, command=None, exit_status=1, command_status=None, gate=g)
    assert "<img" not in md and "\x1b" not in md
    table = md.split("### Episodes", 1)[1].split("### Processes", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows and all(len(r.replace("\\|", "").split("|")) == 8 for r in rows)
    ET.fromstring(summary_junit(s, g).split("\n", 1)[1])  # well-formed
    page = render_report(
        reassess(parse(recording_lines(steps(BURSTY, inner_cmd=HOSTILE + " {i}")))),
        ReportFormat.HTML,
    )
    assert "<img" not in page and "&lt;img" in page


def test_checks_closing_line_says_the_episodes_made_the_verdict() -> None:
    from oversub.core.errors import ExitStatus
    from oversub.core.results import CheckDecision, CheckOutcome
    from oversub.render.checkview import closing_lines

    s = summary(BURSTY)
    outcome = CheckOutcome(s, command=("pytest",), command_status=0)
    lines = closing_lines(CheckDecision(outcome, ExitStatus.FOUND, gate(s, FailOn.OVERSUBSCRIBED)))
    assert lines[-1] == (
        "oversub check: FAIL: verdict oversubscribed in 3 episodes (8.0 s, 17% of the time "
        "measured) (--fail-on oversubscribed), exit 1"
    )
    lines = closing_lines(CheckDecision(outcome, ExitStatus.OK, gate(s, FailOn.COSTLY)))
    assert lines[-1] == (
        "oversub check: pass: verdict oversubscribed in 3 episodes (8.0 s, 17% of the time "
        "measured), no costly finding (--fail-on costly), exit 0"
    )
    # A whole run's own verdict: no such words.
    steady = summary("1" * 10)
    assert (
        "episodes"
        not in closing_lines(
            CheckDecision(
                CheckOutcome(steady, command=("pytest",), command_status=0),
                ExitStatus.FOUND,
                gate(steady, FailOn.OVERSUBSCRIBED),
            )
        )[-1]
    )
