"""`--cgroup` and `--all` on the command line: one target at a time, bad paths as one-line
errors with their documented exit codes, and the shapes of `watch --all`'s NDJSON and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.harness import oversub


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (["watch"], 2, "watch needs exactly one of: PID, --cgroup PATH, --all"),
        (["watch", "1", "--all"], 2, "watch needs exactly one of"),
        (["watch", "--cgroup", "/x", "--all"], 2, "watch needs exactly one of"),
        (["watch", "--cgroup", "relative"], 2, "give an absolute cgroup path"),
        (["watch", "--all", "--record", "r.ndjson"], 2, "--record records one target"),
        (["watch", "--cgroup", "/a/../b"], 2, "without '..'"),
        (["watch", "--cgroup", "/oversub-no-such-cgroup"], 3, "no cgroup /oversub-no-such-cgroup"),
        (["check", "--cgroup", "/oversub-no-such-cgroup"], 3, "no cgroup /oversub-no-such"),
        (["check", "--pid", "1", "--cgroup", "/x"], 2, "--pid and --cgroup exclude each other"),
        (["check", "--cgroup", "/x", "--cpus", "2"], 2, "--cpus only applies to the static"),
        (
            ["check", "--cgroup", "/", "--procs", "2", "--threads", "1", "--cpus", "2"],
            2,
            "--cgroup and --cpus exclude",
        ),
        (["check", "--cgroup", "/x", "--timeout", "2"], 2, "--timeout only applies"),
    ],
)
def test_bad_targets_are_one_line_errors(args: list[str], status: int, words: str) -> None:
    out = oversub(args, timeout=60)
    assert out.returncode == status, out.stderr
    assert words in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_check_static_plan_against_a_cgroups_budget() -> None:
    """`check --procs M --threads T --cgroup /` judges the plan against the root cgroup's
    budget: every online CPU."""
    out = oversub(["check", "--procs", "64", "--threads", "64", "--cgroup", "/"])
    assert out.returncode == 1, out.stderr
    assert "oversubscribed" in out.stderr


@pytest.mark.integration
def test_watch_all_ndjson_and_json_shapes() -> None:
    out = oversub(["watch", "--all", "--once", "--interval", "0.2", "--format", "ndjson"])
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [line["type"] for line in lines] == ["node-interval", "node-summary"]
    first = lines[0]
    assert first["node"]["vcpus"] >= 1 and first["node"]["totals"]["processes"] > 1
    for target in first["targets"]:
        assert target["verdict"] in ("oversubscribed", "starved", "at-risk", "ok", "not-judged")
        assert target["budget"]["cgroup"] == target["cgroup"]
    out = oversub(["watch", "--all", "--once", "--interval", "0.2", "--format", "json"])
    doc = json.loads(out.stdout)
    assert doc["type"] == "node-summary" and doc["node"]["samples"] == 1


@pytest.mark.integration
def test_a_cgroup_run_is_recorded_and_reported(tmp_path: Path) -> None:
    """`watch --cgroup / --record` (the root cgroup: every process) and `report` of it: the
    recording keeps the cgroup, and the report names it instead of a pid."""
    record = tmp_path / "r.ndjson"
    out = oversub(
        [
            "watch",
            "--cgroup",
            "/",
            "--once",
            "--interval",
            "0.2",
            "--format",
            "json",
            "--record",
            str(record),
        ]
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["budget"]["cgroup"] == "/"
    report = oversub(["report", str(record), "--format", "text"])
    assert report.returncode == 0, report.stderr
    assert "oversub watch --cgroup /" in report.stdout
    assert "oversub watch None" not in report.stdout
