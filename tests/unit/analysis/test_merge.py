"""`oversub merge`: the pure merge on synthetic reports, its four formats with hostile
strings, and the command on files: every exit code and every bad-input path."""

from __future__ import annotations

import itertools
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from oversub.analysis.jobmerge import (
    MAX_FINDINGS,
    MAX_TEXT,
    BadReport,
    merge,
    merge_status,
    natural_key,
    parse_report,
)
from oversub.core.errors import ExitStatus
from oversub.core.names import FailOn, Verdict
from oversub.core.nodes import JobReport
from oversub.render import MergeFormat, render_merge
from tests.support.harness import run_cli

Capture = pytest.CaptureFixture[str]

OVER = {
    "rule": "oversubscribed-threads",
    "severity": "critical",
    "verdict": "oversubscribed",
    "message": "3 busy threads want 1 vCPU",
}
IDLE = {"rule": "idle-cpus", "severity": "info", "verdict": "ok", "message": "1 vCPU idle"}
WAIT = {"rule": "starved", "severity": "warning", "verdict": "starved", "message": "waits"}


def report(node: Any, verdict: str | None = "ok", **overrides: Any) -> dict[str, Any]:
    """A report as `check --json` writes it, reduced to what merge reads (plus a little)."""
    findings = {"ok": [IDLE], "oversubscribed": [IDLE, OVER], "starved": [WAIT], None: []}
    doc: dict[str, Any] = {
        "root_pid": 1,
        "vcpus": 2,
        "verdict": verdict,
        "judged": verdict is not None,
        "not_judged_reason": None if verdict else "the command failed with exit status 2",
        "findings": findings.get(verdict, []),
        "processes": [],
        "totals": {"demand": 3.5 if verdict == "oversubscribed" else 0.9},
        "exit_status": 0,
        "node": node,
        "launcher_env": {"SLURM_JOB_ID": "812345"},
    }
    doc.update({k.rstrip("_"): v for k, v in overrides.items()})
    return doc


def job(*docs: dict[str, Any], fail_on: FailOn = FailOn.OVERSUBSCRIBED) -> JobReport:
    return merge([parse_report(d, f"{d['node']}.json") for d in docs], fail_on)


def test_one_oversubscribed_node_fails_the_job_and_is_named() -> None:
    j = job(report("gpu-1", "oversubscribed"), report("gpu-2"))
    assert j.verdict is Verdict.OVERSUBSCRIBED and j.judged
    assert [row.label for row in j.failing] == ["gpu-1"]
    assert merge_status(j) is ExitStatus.FOUND
    assert [(r.rule, r.nodes) for r in j.rules] == [
        ("oversubscribed-threads", ("gpu-1",)),
        ("idle-cpus", ("gpu-1", "gpu-2")),
    ]
    assert j.rules[0].example == "gpu-1: 3 busy threads want 1 vCPU"
    assert j.job == "SLURM_JOB_ID=812345" and j.notes == ()
    text = render_merge(j, ExitStatus.FOUND, MergeFormat.TEXT)
    assert text.splitlines()[-1] == (
        "oversub merge: FAIL: job verdict oversubscribed (--fail-on oversubscribed) on 1 of "
        "2 nodes: gpu-1, exit 1"
    )


def test_all_ok_passes() -> None:
    j = job(report("a"), report("b"))
    assert (j.verdict, merge_status(j)) == (Verdict.OK, ExitStatus.OK)
    assert "pass: job verdict ok, the worst of 2 nodes" in render_merge(
        j, ExitStatus.OK, MergeFormat.TEXT
    )


def test_fail_on_decides_as_in_check() -> None:
    j = job(report("a", "starved"), report("b"))
    assert merge_status(j) is ExitStatus.OK and j.verdict is Verdict.STARVED
    j = job(report("a", "starved"), report("b"), fail_on=FailOn.AT_RISK)
    assert merge_status(j) is ExitStatus.FOUND


CHEAP = {**OVER, "severity": "warning", "message": "polars' pool sleeps while it waits"}
HANG = {"rule": "fork-hang", "severity": "critical", "verdict": "at-risk", "message": "hung"}


def test_costly_fails_a_node_with_a_critical_finding_and_names_it() -> None:
    j = job(report("gpu-1", "oversubscribed"), report("gpu-2"), fail_on=FailOn.COSTLY)
    assert merge_status(j) is ExitStatus.FOUND
    assert [row.label for row in j.failing] == ["gpu-1"]
    assert [f.rule for f in j.failing[0].failing] == ["oversubscribed-threads"]
    assert render_merge(j, ExitStatus.FOUND, MergeFormat.TEXT).splitlines()[-1] == (
        "oversub merge: FAIL: a costly finding (--fail-on costly) on 1 of 2 nodes: gpu-1; "
        "job verdict oversubscribed, exit 1"
    )
    xml = ET.fromstring(render_merge(j, ExitStatus.FOUND, MergeFormat.JUNIT))
    (failure,) = xml.iter("failure")
    assert failure.get("message") == (
        "verdict oversubscribed, 1 costly finding: oversubscribed-threads (--fail-on costly) "
        "in gpu-1.json"
    )


def test_costly_passes_a_cheap_oversubscription_and_says_why() -> None:
    cheap = report("gpu-1", "oversubscribed", findings=[IDLE, CHEAP])
    j = job(cheap, report("gpu-2"), fail_on=FailOn.COSTLY)
    assert merge_status(j) is ExitStatus.OK and j.verdict is Verdict.OVERSUBSCRIBED
    assert render_merge(j, ExitStatus.OK, MergeFormat.TEXT).splitlines()[-1] == (
        "oversub merge: pass: job verdict oversubscribed, the worst of 2 nodes, no costly "
        "finding (--fail-on costly), exit 0"
    )
    doc = json.loads(render_merge(j, ExitStatus.OK, MergeFormat.JSON))
    assert doc["fail_on"] == "costly" and doc["failing_nodes"] == []
    assert [node["fails"] for node in doc["nodes"]] == [False, False]
    # --fail-on oversubscribed still fails on any oversubscription.
    j = job(cheap, report("gpu-2"), fail_on=FailOn.OVERSUBSCRIBED)
    assert merge_status(j) is ExitStatus.FOUND


def test_costly_fails_a_certain_hang_whose_node_is_only_at_risk() -> None:
    # The job's verdict comes from the node that passes: the line names the one that fails.
    hung = report("gpu-2", "at-risk", findings=[HANG])
    cheap = report("gpu-1", "oversubscribed", findings=[CHEAP])
    j = job(cheap, hung, fail_on=FailOn.COSTLY)
    assert [row.label for row in j.failing] == ["gpu-2"]
    line = render_merge(j, ExitStatus.FOUND, MergeFormat.TEXT).splitlines()[-1]
    assert "on 1 of 2 nodes: gpu-2; job verdict oversubscribed" in line
    assert merge_status(job(cheap, hung, fail_on=FailOn.OVERSUBSCRIBED)) is ExitStatus.FOUND
    assert [r.label for r in job(cheap, hung, fail_on=FailOn.OVERSUBSCRIBED).failing] == ["gpu-1"]


def test_costly_does_not_pass_a_node_not_judged() -> None:
    j = job(report("a"), report("b", None), fail_on=FailOn.COSTLY)
    assert merge_status(j) is ExitStatus.UNOBSERVABLE


def test_a_node_not_judged_is_not_ok() -> None:
    j = job(report("a"), report("b", None))
    assert not j.judged and j.verdict is Verdict.OK
    assert merge_status(j) is ExitStatus.UNOBSERVABLE
    text = render_merge(j, ExitStatus.UNOBSERVABLE, MergeFormat.TEXT)
    assert "pass" not in text
    assert text.splitlines()[-1] == (
        "oversub merge: error: not judged: 1 of 2 nodes without a verdict (b: the command "
        "failed with exit status 2); the 1 judged node at worst ok, exit 3"
    )
    [row] = [line for line in text.splitlines() if line.startswith("b ")]
    assert row.split()[:6] == ["b", "2", "0.90", "not", "judged", "(the"], row
    doc = json.loads(render_merge(j, ExitStatus.UNOBSERVABLE, MergeFormat.JSON))
    assert (doc["verdict"], doc["judged"], doc["not_judged_nodes"]) == ("ok", False, ["b"])


def test_a_failing_node_fails_even_when_another_is_not_judged() -> None:
    j = job(report("a", "oversubscribed"), report("b", None))
    assert merge_status(j) is ExitStatus.FOUND
    line = render_merge(j, ExitStatus.FOUND, MergeFormat.TEXT).splitlines()[-1]
    assert line.endswith("on 1 of 2 nodes: a; 1 node not judged, exit 1")


def test_no_node_judged() -> None:
    j = job(report("a", None), report("b", None))
    assert j.verdict is None and merge_status(j) is ExitStatus.UNOBSERVABLE
    line = render_merge(j, ExitStatus.UNOBSERVABLE, MergeFormat.TEXT).splitlines()[-1]
    assert "2 of 2 nodes without a verdict" in line and "at worst" not in line


def test_a_copy_of_a_report_counts_once() -> None:
    doc = report("a", "oversubscribed")
    j = merge(
        [parse_report(doc, "a.json"), parse_report(dict(doc), "copy.json")], FailOn.OVERSUBSCRIBED
    )
    assert len(j.rows) == 1
    assert j.notes == ("copy.json is the same report as a.json: counted once",)


def test_two_reports_of_one_node_are_two_rows() -> None:
    j = merge(
        [
            parse_report(report("a", "oversubscribed"), "rank0.json"),
            parse_report(report("a"), "rank1.json"),
        ],
        FailOn.OVERSUBSCRIBED,
    )
    assert [row.label for row in j.rows] == ["a (rank0.json)", "a (rank1.json)"]
    assert [row.label for row in j.failing] == ["a (rank0.json)"]
    assert j.notes[0].startswith("node a has 2 reports (rank0.json, rank1.json): each is its own")


def test_reports_of_several_jobs_are_merged_with_a_note() -> None:
    j = job(report("a"), report("b", launcher_env={"SLURM_JOB_ID": "2"}))
    assert j.job is None
    assert j.notes == (
        "the reports come from 2 jobs by SLURM_JOB_ID (2, 812345): merged all the same; give "
        "merge the reports of one job",
    )
    assert job(report("a", launcher_env={})).job is None
    partial = job(report("a"), report("b", launcher_env={}), report("c"))
    assert partial.job == "SLURM_JOB_ID=812345 (2 of 3 reports)" and partial.notes == ()


def test_any_node_name_sorts_and_every_format_writes_it() -> None:
    # "²" is a digit to str.isdigit but not to int(): it sorts as text, it is not a number.
    names = ["n1²", "n10", "n2", "n1", "n٣", "²"]
    merged = job(*(report(n) for n in names))
    assert [row.report.node for row in merged.rows] == ["n1", "n1²", "n2", "n10", "n٣", "²"]
    assert natural_key("n1²") == ((1, 0, "n"), (0, 1, ""), (1, 0, "²"))
    for fmt in MergeFormat:
        assert "n1²" in render_merge(merged, ExitStatus.OK, fmt)


def test_rows_in_natural_node_order() -> None:
    j = job(*(report(f"node{i}") for i in (10, 2, 1)))
    assert [row.label for row in j.rows] == ["node1", "node2", "node10"]
    assert natural_key("a10") > natural_key("a9")


def test_a_rule_takes_its_worst_instance() -> None:
    mild = {**OVER, "severity": "warning", "verdict": "at-risk", "message": "mild"}
    j = job(report("a", findings=[mild]), report("b", "oversubscribed"))
    [rule] = [r for r in j.rules if r.rule == "oversubscribed-threads"]
    assert (rule.severity.value, rule.verdict.value, rule.nodes) == (
        "critical",
        "oversubscribed",
        ("a", "b"),
    )
    assert rule.example.startswith("b: ")


def test_launcher_ids_are_filtered_again_and_text_is_bounded() -> None:
    ids = {"SLURM_JOB_ID": "1", "RANK": "x;rm", "SECRET": "s", "WORLD_SIZE": 4}
    long = {**OVER, "message": "m" * 5000}
    r = parse_report(report("a", launcher_env=ids, findings=[long]), "a.json")
    assert dict(r.launcher_env) == {"SLURM_JOB_ID": "1"}
    assert len(r.findings[0].message) == MAX_TEXT and r.findings[0].message.endswith("…")


BAD: list[tuple[object, str]] = [
    ([1], "not an oversub report: the JSON document is a list, not an object"),
    ("x", "the JSON document is a string"),
    ({"type": "interval", "node": "a"}, "an interval record of `watch --format ndjson`"),
    ({"a": 1}, "not an oversub report (no `node` key)"),
    (
        {k: v for k, v in report("a").items() if k != "node"},
        "no `node` key: written by an oversub without node names",
    ),
    (report(""), "`node` is empty or longer than 253 characters"),
    (report("n" * 254), "`node` is empty or longer than 253 characters"),
    (report(7), "`node` is a number, not a string"),
    (report("a", vcpus=0), "`vcpus` is not a whole number from 1 to 65536"),
    (report("a", vcpus=True), "`vcpus` is not a whole number"),
    (report("a", vcpus="2"), "`vcpus` is not a whole number"),
    (report("a", vcpus=2.5), "`vcpus` is not a whole number"),
    (report("a", judged="yes"), "`judged` is a string, not a boolean"),
    (report("a", verdict_="fine"), "`verdict` is 'fine', not one of oversubscribed, starved"),
    (report("a", verdict_=None), "`verdict` is null, not one of"),
    (report("a", None, verdict_="ok"), "`judged` is false but `verdict` is set"),
    (report("a", None, not_judged_reason=3), "`not_judged_reason` is a number"),
    (report("a", totals=[]), "`totals` is a list, not an object"),
    (report("a", totals={"demand": -1}), "`totals.demand` is not a number from 0 to 1e+15"),
    (report("a", totals={"demand": float("inf")}), "`totals.demand` is not a number from 0"),
    (report("a", totals={"demand": 10**400}), "`totals.demand` is not a number from 0"),
    (report("a", totals={"demand": "9"}), "`totals.demand` is not a number"),
    (report("a", findings={}), "`findings` is an object, not a list"),
    (report("a", findings=[IDLE] * (MAX_FINDINGS + 1)), "more than 1000 findings"),
    (report("a", findings=[1]), "`findings[0]` is a number, not an object"),
    (report("a", findings=[{**OVER, "severity": "fatal"}]), "in `findings[0]`: `severity` is"),
    (report("a", findings=[IDLE, {**OVER, "rule": "r" * 65}]), "in `findings[1]`: `rule` is"),
    (report("a", findings=[{**OVER, "message": None}]), "`message` is null, not a string"),
    (report("a", launcher_env=[]), "`launcher_env` is a list, not an object"),
]


@pytest.mark.parametrize(("doc", "problem"), BAD)
def test_a_document_that_is_not_a_report(doc: object, problem: str) -> None:
    with pytest.raises(BadReport) as raised:
        parse_report(doc, "out/x.json")
    message = str(raised.value)
    assert message.startswith("out/x.json: ") and problem in message, message
    assert "\n" not in message and len(message) < 300
    assert raised.value.status is ExitStatus.USAGE


HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J\n::error::forged\r|x|`y`[z](http://a)<script>&"


def hostile_job() -> JobReport:
    finding = {**OVER, "rule": "r\x1b[31m<b>", "message": HOSTILE}
    bad = report(HOSTILE, "oversubscribed", findings=[finding])
    return merge(
        [parse_report(bad, "dir/\x1b[2J\n.json"), parse_report(report("b", None), "b.json")],
        FailOn.OVERSUBSCRIBED,
    )


def test_hostile_strings_in_text() -> None:
    text = render_merge(hostile_job(), ExitStatus.FOUND, MergeFormat.TEXT)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert not any(line.startswith("::") for line in text.splitlines())
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\n::error::forged\\r" in text
    assert all(
        line.startswith(("oversub merge:", "node", " ", "evil", "b ", "findings", "note"))
        for line in text.splitlines()
    )


def test_hostile_strings_in_markdown() -> None:
    md = render_merge(hostile_job(), ExitStatus.FOUND, MergeFormat.MARKDOWN)
    assert "<script>" not in md and "<b>" not in md and "\x1b" not in md
    assert "&lt;script&gt;" in md and "\\|x\\|" in md and "\\[z\\]" in md
    table = [line for line in md.splitlines() if line.startswith("| ")]
    for line in table:  # no cell's text ends its cell: every row has its columns
        assert len(line.replace("\\|", "").split("|")) in (7,), line


def test_hostile_strings_in_junit_and_json() -> None:
    j = hostile_job()
    xml = render_merge(j, ExitStatus.FOUND, MergeFormat.JUNIT)
    suite = ET.fromstring(xml.split("\n", 1)[1])
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "1")
    names = [case.get("name") for case in suite.iter("testcase")]
    assert names[0] == "b" and names[1] is not None and names[1].startswith("evil")
    assert suite.find("testcase/failure") is not None and suite.find("testcase/error") is not None
    doc = json.loads(render_merge(j, ExitStatus.FOUND, MergeFormat.JSON))
    assert doc["nodes"][1]["node"] == HOSTILE  # JSON keeps the text; its syntax escapes it
    assert doc["failing_nodes"] == [HOSTILE] and doc["exit_status"] == 1


def test_every_format_renders() -> None:
    j = job(report("a", "oversubscribed"), report("b"))
    for fmt in MergeFormat:
        assert render_merge(j, ExitStatus.FOUND, fmt).endswith("\n")


# --------------------------------------------------------------------------- the command


def write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no pyproject.toml of the project decides --fail-on


def test_cli_exit_1_names_the_node(tmp_path: Path, capsys: Capture) -> None:
    a = write(tmp_path / "a.json", report("gpu-1", "oversubscribed"))
    b = write(tmp_path / "b.json", report("gpu-2"))
    code, out, err = run_cli(["merge", a, b], capsys)
    assert code == 1 and err == ""
    assert "gpu-1" in out.splitlines()[-1] and "FAIL" in out
    code, out, err = run_cli(
        ["merge", a, b, "--fail-on", "oversubscribed", "-o", "m.json", "--format", "json"], capsys
    )
    assert code == 1 and out == "" and err.startswith("oversub merge: FAIL")
    assert json.loads((tmp_path / "m.json").read_text())["failing_nodes"] == ["gpu-1"]


def test_cli_exit_0_and_3(tmp_path: Path, capsys: Capture) -> None:
    a = write(tmp_path / "a.json", report("a"))
    b = write(tmp_path / "b.json", report("b", None))
    assert run_cli(["merge", a], capsys)[0] == 0
    code, out, _ = run_cli(["merge", a, b, "--format", "markdown"], capsys)
    assert code == 3 and "## oversub merge: error, exit 3" in out


def test_cli_default_gate_is_costly(tmp_path: Path, capsys: Capture) -> None:
    cheap = write(tmp_path / "a.json", report("a", "oversubscribed", findings=[CHEAP]))
    code, out, _ = run_cli(["merge", cheap], capsys)
    assert code == 0 and "no costly finding (--fail-on costly)" in out
    assert run_cli(["merge", cheap, "--fail-on", "oversubscribed"], capsys)[0] == 1
    (tmp_path / "pyproject.toml").write_text('[tool.oversub]\nfail-on = "oversubscribed"\n')
    assert run_cli(["merge", cheap], capsys)[0] == 1
    (tmp_path / "pyproject.toml").write_text('[tool.oversub]\nfail-on = "costly"\n')
    assert run_cli(["merge", cheap], capsys)[0] == 0


def test_cli_fail_on_from_pyproject(tmp_path: Path, capsys: Capture) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.oversub]\nfail-on = "starved"\n')
    a = write(tmp_path / "a.json", report("a", "starved"))
    assert run_cli(["merge", a], capsys)[0] == 1
    assert run_cli(["merge", a, "--fail-on", "oversubscribed"], capsys)[0] == 0


def test_cli_same_file_twice_is_read_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "a.json", report("a"))
    os.link(a, tmp_path / "hard.json")
    code, out, _ = run_cli(["merge", a, a, str(tmp_path / "hard.json")], capsys)
    assert code == 0 and out.count("is the file") == 2 and "1 report, 1 node" in out


def _bad_files(tmp_path: Path) -> list[tuple[str, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate((32 << 20) + 1)
    files = {
        "latin1.json": b'{"node": "\xe9"}',
        "broken.json": b'{"node": ',
        "nan.json": b'{"node": "a", "vcpus": NaN}',
        "deep.json": b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "bigint.json": b'{"vcpus": ' + b"9" * 5000 + b"}",
        "inf.json": json.dumps(report("a")).replace('"demand": 0.9', '"demand": 1e400').encode(),
        "bignum.json": json.dumps(report("a", totals={"demand": 10**400})).encode(),
        "stream.json": b'{"type": "interval"}\n{"type": "summary"}\n',
        "empty.json": b"",
        "schema.json": json.dumps(report("a", vcpus=0)).encode(),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return [
        (str(tmp_path / "missing.json"), "No such file or directory"),
        (str(tmp_path), "is a directory"),
        (str(fifo), "not a regular file"),
        (str(huge), "larger than 32 MiB"),
        (str(tmp_path / "latin1.json"), "not UTF-8 (byte 10)"),
        (str(tmp_path / "broken.json"), "not JSON (Expecting value at line 1, column 10)"),
        (str(tmp_path / "nan.json"), "NaN is not a JSON number"),
        (str(tmp_path / "deep.json"), "nested too deeply"),
        (str(tmp_path / "bigint.json"), "not a report: "),
        (str(tmp_path / "inf.json"), "`totals.demand` is not a number from 0 to 1e+15"),
        (str(tmp_path / "bignum.json"), "`totals.demand` is not a number from 0 to 1e+15"),
        (str(tmp_path / "stream.json"), "only its last line (the summary record) is a report"),
        (str(tmp_path / "empty.json"), "not JSON (Expecting value at line 1, column 1)"),
        (str(tmp_path / "schema.json"), "`vcpus` is not a whole number"),
    ]


def test_cli_bad_files_exit_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "good.json", report("a"))
    for (path, problem), fmt in itertools.product(_bad_files(tmp_path), ["text", "json"]):
        code, out, err = run_cli(["merge", good, path, "--format", fmt], capsys)
        assert code == 2 and out == "", (path, err)
        assert err.startswith(f"oversub: error: {path}: ") and problem in err, err
        assert err.count("\n") == 1 and len(err) < 300, err


def test_cli_usage_errors(tmp_path: Path, capsys: Capture) -> None:
    good = write(tmp_path / "good.json", report("a"))
    cases = [
        ["merge"],
        ["merge", good, "--format", "html"],
        ["merge", good, "--fail-on", "ok"],
        ["merge", good, "-o", str(tmp_path / "no" / "dir.json")],
        ["merge", good, "-o", ""],
        ["merge", good, "-o", str(tmp_path)],
    ]
    for argv in cases:
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and out == "" and err.startswith("oversub: error: "), (argv, err)


def test_cli_escapes_a_hostile_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = tmp_path / "x\x1b[2J\n::error::y.json"
    name.write_text("{")
    code, _, err = run_cli(["merge", str(name)], capsys)
    assert code == 2 and "\x1b" not in err and err.count("\n") == 1
    assert "x\\x1b[2J\\n::error::y.json" in err


def test_a_reader_that_leaves_keeps_the_exit_status(tmp_path: Path) -> None:
    import subprocess

    from tests.support.harness import OVERSUB

    a = write(tmp_path / "a.json", report("gpu-1", "oversubscribed"))
    proc = subprocess.Popen(
        [*OVERSUB, "merge", a], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before merge writes: its write fails with EPIPE
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitStatus.FOUND, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


# --------------------------------------------------------------------------- episodes (#43)


def episode(**overrides: Any) -> dict[str, Any]:
    """One entry of a report's `episodes`, as `serialize.episode_dict` writes it."""
    doc: dict[str, Any] = {
        "verdict": "oversubscribed",
        "start_s": 24.0,
        "end_s": 27.0,
        "seconds": 3.0,
        "intervals": 3,
        "counts": True,
        "demand": 3.9,
        "demand_peak": 4.07,
        "run_delay_ratio": 0.4,
        "run_delay_ratio_peak": 0.45,
        "waited_s": 4.7,
        "finding": {**OVER, "severity": "warning"},
        "busy": 4,
        "processes": [],
        "nesting": {"message": "Nested parallelism: pid 11 (a pytest-xdist worker) runs beside"},
    }
    doc.update(overrides)
    return doc


TOTAL = {
    "verdict": "oversubscribed",
    "episodes": 4,
    "seconds": 13.0,
    "share": 0.188,
    "longest_s": 4.0,
    "waited_s": 20.0,
    "counts": True,
}


def test_merge_shows_each_nodes_episodes_in_every_format() -> None:
    busy = report("gpu2", "oversubscribed", episodes=[episode()], episode_totals=[TOTAL])
    j = job(busy, report("gpu1"))
    (row,) = [r for r in j.rows if r.report.node == "gpu2"]
    assert row.report.episodes[0].cause.startswith("Nested parallelism: pid 11")
    assert row.report.episode_totals[0].episodes == 4
    text = render_merge(j, ExitStatus.FOUND, MergeFormat.TEXT)
    assert "episodes by node:\n  gpu2: 4 oversubscribed, 13.0 s (19%), made its verdict\n" in text
    assert (
        "    the worst: oversubscribed at 24.0-27.0 s, peak demand 4.07 "
        "(oversubscribed-threads): Nested parallelism: pid 11" in text
    )
    assert "gpu1:" not in text.split("episodes by node:")[1].split("findings by rule:")[0]
    md = render_merge(j, ExitStatus.FOUND, MergeFormat.MARKDOWN)
    assert "### Episodes by node" in md and "| gpu2 | 4 oversubscribed" in md
    doc = json.loads(render_merge(j, ExitStatus.FOUND, MergeFormat.JSON))
    node = next(n for n in doc["nodes"] if n["node"] == "gpu2")
    assert node["episodes"] == [
        {
            "verdict": "oversubscribed",
            "start_s": 24.0,
            "end_s": 27.0,
            "demand_peak": 4.07,
            "counts": True,
            "rule": "oversubscribed-threads",
            "cause": "Nested parallelism: pid 11 (a pytest-xdist worker) runs beside",
        }
    ]
    assert node["episode_totals"][0]["episodes"] == 4
    assert next(n for n in doc["nodes"] if n["node"] == "gpu1")["episodes"] == []
    xml = render_merge(j, ExitStatus.FOUND, MergeFormat.JUNIT)
    assert "the worst: oversubscribed at 24.0-27.0 s" in xml


def test_a_report_without_episodes_merges_as_before() -> None:
    plain = job(report("a", "oversubscribed"), report("b"))
    for fmt in (MergeFormat.TEXT, MergeFormat.MARKDOWN):
        assert "pisode" not in render_merge(plain, ExitStatus.FOUND, fmt)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"episodes": {}}, "`episodes` is an object, not a list"),
        ({"episodes": [1]}, "`episodes[0]` is a number, not an object"),
        ({"episodes": [episode(verdict="bad")]}, "in `episodes[0]`: `verdict` is"),
        ({"episodes": [episode(start_s=1e400)]}, "in `episodes[0]`: `start_s` is not a number"),
        ({"episodes": [episode(counts="yes")]}, "in `episodes[0]`: `counts` is a string"),
        ({"episodes": [episode(finding=None)]}, "in `episodes[0]`: `finding` is null"),
        ({"episodes": [episode(nesting=[])]}, "in `episodes[0]`: `nesting` is a list"),
        ({"episodes": [episode()] * 101}, "more than 100 `episodes`"),
        ({"episode_totals": [{**TOTAL, "episodes": -1}]}, "in `episode_totals[0]`: `episodes`"),
        ({"episode_totals": [{**TOTAL, "share": "x"}]}, "in `episode_totals[0]`: `share`"),
    ],
)
def test_bad_episodes_are_a_bad_report(overrides: dict[str, Any], problem: str) -> None:
    with pytest.raises(BadReport) as raised:
        parse_report(report("a", "oversubscribed", **overrides), "x.json")
    assert problem in str(raised.value), str(raised.value)
    assert "\n" not in str(raised.value)


def test_hostile_episode_text_is_escaped() -> None:
    bad = episode(nesting={"message": HOSTILE}, finding={**OVER, "rule": "r\x1b[31m<b>"})
    j = job(report(HOSTILE, "oversubscribed", episodes=[bad], episode_totals=[TOTAL]))
    text = render_merge(j, ExitStatus.FOUND, MergeFormat.TEXT)
    assert "\x1b" not in text and "\r" not in text
    assert not any(line.startswith("::") for line in text.splitlines())
    md = render_merge(j, ExitStatus.FOUND, MergeFormat.MARKDOWN)
    assert "<script>" not in md and "<b>" not in md
    for line in (x for x in md.splitlines() if x.startswith("| ") and "worst" not in x):
        if "oversubscribed," in line:
            assert len(line.replace("\\|", "").split("|")) == 5, line


def test_merge_reads_the_episodes_check_writes() -> None:
    from oversub.analysis.rates import counted, interval
    from oversub.analysis.summary import RunSummary
    from oversub.core.thresholds import Thresholds
    from oversub.render.serialize import summary_dict
    from tests.support.builders import ROOT, T0, Host, Load, Proc, budget, tree_pair

    th = Thresholds()
    run = RunSummary(ROOT, th)
    half = Load(cpu=0.5, delay=0.5)
    for k, bit in enumerate("0000111100001110000"):
        busy = 4 if bit == "1" else 2
        procs = [
            Proc(ROOT, ppid=1),
            *(Proc(201 + i, (half if busy == 4 else Load(cpu=0.9),)) for i in range(busy)),
        ]
        prev, curr = tree_pair(procs, t0=T0 + k, host=Host())
        run.add(counted(interval(prev, curr, 2), th))
    doc = summary_dict(run.result(budget(2), th, target_exited=True)) | {
        "node": "n1",
        "launcher_env": {},
    }
    r = parse_report(json.loads(json.dumps(doc)), "n1.json")
    assert [(e.start_s, e.end_s, e.counts) for e in r.episodes] == [
        (4.0, 8.0, True),
        (12.0, 15.0, True),
    ]
    assert r.episode_totals[0].episodes == 2 and r.episode_totals[0].counts
