"""`oversub check` and `oversub watch` end to end, on real process trees.

Every run is pinned to one CPU (affinity is inherited by the whole tree), so the verdicts do
not depend on how many CPUs the machine has: 1 process x 3 busy threads on 1 CPU
oversubscribes anywhere, 1 x 1 never does. Margins are wide; no timing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from oversub.core.errors import ExitStatus
from tests.support.harness import (
    OVERSUB,
    Spawner,
    alive,
    busy_workers,
    descendants,
    stress,
    wait_until,
)
from tests.support.harness import oversub as run_oversub
from tests.support.harness import pin_to_one_cpu as _pin

pytestmark = pytest.mark.integration


def oversub(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`oversub ARGS` pinned to one CPU (see the module docstring)."""
    return run_oversub(args, pin=True, **kwargs)


def check_json(
    tmp_path: Path, command: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`oversub check --fail-on oversubscribed --interval 0.5 --warmup 0.5 --json
    tmp_path/r.json -- COMMAND`: stress's hashing threads are the application's own, a
    warning the default gate (`costly`) passes, so these tests gate on any oversubscription."""
    flags = ["--fail-on", "oversubscribed", "--interval", "0.5", "--warmup", "0.5"]
    flags += ["--json", str(tmp_path / "r.json")]
    return oversub(["check", *flags, "--", *command], env=env)


def test_check_fails_an_oversubscribed_command_and_writes_reports(tmp_path: Path) -> None:
    step_summary = tmp_path / "step.md"
    result = oversub(
        [
            "check",
            "--fail-on",
            "oversubscribed",  # any oversubscription: stress's threads are only a warning
            "--interval",
            "0.5",
            "--warmup",
            "0.5",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "r.xml"),
            "--markdown",
            str(tmp_path / "r.md"),
            "--",
            *stress(1, 3, 4),
        ],
        env={"GITHUB_STEP_SUMMARY": str(step_summary), "GITHUB_ACTIONS": "true"},
    )
    assert result.returncode == ExitStatus.FOUND, result.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "oversubscribed"
    assert doc["vcpus"] == 1 and doc["exit_status"] == 1 and doc["command_status"] == 0
    rules = {f["rule"] for f in doc["findings"]}
    assert "oversubscribed-threads" in rules
    assert doc["totals"]["demand"] > 1.5  # three busy threads wanted one CPU
    suite = ET.parse(tmp_path / "r.xml").getroot()
    failures = suite.findall(".//testcase/failure")
    assert failures and any(
        tc.get("name") == "oversubscribed-threads" and tc.find("failure") is not None
        for tc in suite.iter("testcase")
    )
    assert "oversubscribed-threads" in (tmp_path / "r.md").read_text()
    assert "oversubscribed-threads" in step_summary.read_text()
    assert "::error" in result.stderr
    assert "oversub stress: root pid" in result.stderr  # the command's stderr passed through


def test_the_default_gate_passes_cheap_oversubscription_and_says_why(tmp_path: Path) -> None:
    # Issue 21 item 3: --fail-on costly, the default, fails on critical findings only; 3
    # hashing threads on 1 CPU are the application's own threads, a warning.
    flags = ["--interval", "0.5", "--warmup", "0.5", "--json", str(tmp_path / "r.json")]
    result = oversub(["check", *flags, "--", *stress(1, 3, 4)])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "oversubscribed" and doc["fail_on"] == "costly", result.stderr
    assert not [f for f in doc["findings"] if f["severity"] == "critical"], doc["findings"]
    assert result.returncode == ExitStatus.OK == doc["exit_status"], result.stderr
    assert result.stderr.splitlines()[-1] == (
        "oversub check: pass: verdict oversubscribed, no costly finding (--fail-on costly), exit 0"
    )


def test_a_variable_already_set_is_never_asked_for_again(tmp_path: Path) -> None:
    # Issue 11 item 1 / issue 12 item 1: OMP_NUM_THREADS=1 is in every process's environment
    # and stress's threads are hashlib threads, not a pool: the fix names the thread count.
    result = check_json(tmp_path, stress(2, 2, 4), env={"OMP_NUM_THREADS": "1"})
    assert result.returncode == ExitStatus.FOUND, result.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    [finding] = [f for f in doc["findings"] if f["rule"].startswith("oversubscribed")]
    assert finding["rule"] == "oversubscribed-threads", doc["findings"]
    assert all((p["thread_env"] or {}).get("OMP_NUM_THREADS") == "1" for p in doc["processes"])
    assert "OMP_NUM_THREADS" not in finding["fix"], finding["fix"]
    assert "application's own" in finding["message"]
    assert "threads per worker" in finding["fix"]


def test_check_passes_a_healthy_command(tmp_path: Path) -> None:
    result = check_json(tmp_path, stress(1, 1, 3))
    assert result.returncode == ExitStatus.OK, result.stderr
    # Other load on a shared CI machine may starve it; it never oversubscribes itself.
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] in {"ok", "starved"}


def test_command_failure_is_exit_3_with_status_in_report(tmp_path: Path) -> None:
    code = "import time, sys; time.sleep(2); sys.exit(7)"
    result = oversub(
        [
            "check",
            "--interval",
            "0.5",
            "--warmup",
            "0",
            "--json",
            str(tmp_path / "r.json"),
            "--",
            sys.executable,
            "-c",
            code,
        ]
    )
    assert result.returncode == ExitStatus.UNOBSERVABLE, result.stderr
    assert json.loads((tmp_path / "r.json").read_text())["command_status"] == 7
    assert result.stderr.splitlines()[-1] == (
        "oversub check: error: not judged: the command failed with exit status 7, exit 3"
    )
    # Issue 11 item 2: the headline says so too, not "ok".
    assert "\noversub: not judged (the command failed with exit status 7)" in result.stderr


def test_command_arguments_that_are_not_utf8_get_reports(tmp_path: Path) -> None:
    # A Latin-1 file name on the command line: Python hands it over with surrogate escapes.
    result = subprocess.run(
        [
            *OVERSUB,
            "check",
            "--interval",
            "0.2",
            "--warmup",
            "0",
            "--json",
            str(tmp_path / "r.json"),
            "--markdown",
            str(tmp_path / "r.md"),
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(1.5)",
            b"caf\xe9",
        ],
        capture_output=True,
        timeout=90,
        preexec_fn=_pin,
    )
    assert result.returncode == ExitStatus.OK, result.stderr.decode()
    doc = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert doc["command"][-1] == "caf\ufffd"
    assert "caf\ufffd" in (tmp_path / "r.md").read_text("utf-8")


def test_command_not_found_is_exit_3() -> None:
    result = oversub(["check", "--", "/nonexistent/oversub-no-such-command"])
    assert result.returncode == ExitStatus.UNOBSERVABLE
    assert result.stderr.strip().splitlines()[-1].startswith("oversub: error: cannot start")


def test_command_exiting_before_first_sample_is_exit_3() -> None:
    result = oversub(["check", "--warmup", "0", "--interval", "1", "--", "true"])
    assert result.returncode == ExitStatus.UNOBSERVABLE
    assert "nothing was measured" in result.stderr
    assert "\noversub: not judged (nothing was measured" in result.stderr, result.stderr
    # The headline names the command's pid, the one the start line gave, not oversub's own.
    started = re.search(r"oversub check: started pid (\d+) ", result.stderr)
    assert started is not None, result.stderr
    assert "oversub: not judged (nothing was measured: the command exited before a full " in (
        result.stderr
    )
    assert f", pid {started.group(1)}, 0.0 s, 0 samples" in result.stderr, result.stderr


def test_timeout_ends_the_tree_and_is_not_a_failure(tmp_path: Path) -> None:
    result = oversub(
        [
            "check",
            "--timeout",
            "2.5",
            "--interval",
            "0.5",
            "--warmup",
            "0",
            "--json",
            str(tmp_path / "r.json"),
            "--",
            *stress(1, 1, 60),
        ]
    )
    assert result.returncode == ExitStatus.OK, result.stderr
    doc = json.loads(result_json := (tmp_path / "r.json").read_text())
    assert doc["timed_out"] is True, result_json
    for proc in doc["processes"]:
        assert not alive(proc["pid"]) or proc["pid"] == os.getpid()


def test_timeout_ends_the_wait_of_a_long_interval(tmp_path: Path) -> None:
    # The loop waits a whole interval in one call that the command's exit ends: the
    # timeout must end it too, not the 60 s interval.
    began = time.monotonic()
    result = oversub(
        [
            "check",
            "--timeout",
            "1",
            "--interval",
            "60",
            "--warmup",
            "0",
            "--json",
            str(tmp_path / "r.json"),
            "--",
            *stress(1, 1, 120),
        ]
    )
    assert time.monotonic() - began < 40, result.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["timed_out"] is True, doc


def test_ctrl_c_kills_the_whole_tree(spawn: Spawner) -> None:
    check = spawn(
        [*OVERSUB, "check", "--interval", "0.5", "--", *stress(2, 1, 120)],
        stderr=subprocess.PIPE,
        preexec_fn=_pin,
    )
    assert check.stderr is not None
    # check's start line, then stress announces its root pid.
    lines = [check.stderr.readline().decode() for _ in range(2)]
    assert lines[0].startswith("oversub check: started pid "), lines
    assert "root pid" in lines[1], lines

    # The command, the stress root and its 2 workers.
    def whole_tree() -> set[int] | None:
        tree = descendants(check.pid)
        return tree if len(tree) >= 4 else None

    tree = wait_until(whole_tree, what="the command, the stress root and its workers")
    check.send_signal(signal.SIGINT)
    assert check.wait(timeout=30) == ExitStatus.INTERRUPTED
    survivors = [pid for pid in tree if alive(pid)]
    assert survivors == []


def test_check_attaches_to_a_running_pid(spawn: Spawner) -> None:
    target = spawn(stress(1, 3, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    wait_until(lambda: busy_workers(target.pid, 1, 3), what="the stress workers")
    argv = ["check", "--pid", str(target.pid), "--duration", "2.5", "--interval", "0.5"]
    result = oversub([*argv, "--fail-on", "oversubscribed"])
    assert result.returncode == ExitStatus.FOUND, result.stderr


def test_watch_json_summary_and_ndjson_lines(spawn: Spawner) -> None:
    target = spawn(stress(1, 3, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    wait_until(lambda: busy_workers(target.pid, 1, 3), what="the stress workers")
    summary = oversub(
        ["watch", str(target.pid), "--duration", "2", "--interval", "0.5", "--format", "json"]
    )
    assert summary.returncode == 0, summary.stderr  # watch observes; it never gates
    doc = json.loads(summary.stdout)
    assert doc["verdict"] == "oversubscribed" and doc["root_pid"] == target.pid
    assert {p["pid"] for p in doc["processes"]} >= {target.pid}
    lines = oversub(["watch", str(target.pid), "--once", "--interval", "0.5"])  # a pipe: ndjson
    records = [json.loads(x) for x in lines.stdout.splitlines()]
    assert [r["type"] for r in records] == ["interval", "summary"]
    # Issue 11 item 17: every record carries the wall clock, UTC, ISO 8601.
    from datetime import datetime, timedelta, timezone

    for record in records:
        stamp = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        assert stamp.tzinfo is not None and stamp.utcoffset() == timedelta(0)
        assert record["timestamp"].endswith("Z")
        assert abs(datetime.now(timezone.utc) - stamp) < timedelta(minutes=10)


def test_watch_sees_starvation_from_outside(spawn: Spawner) -> None:
    hog = spawn(stress(1, 2, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    target = spawn(stress(1, 1, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    wait_until(lambda: busy_workers(hog.pid, 1, 2) and busy_workers(target.pid, 1, 1))
    result = oversub(
        ["watch", str(target.pid), "--duration", "3", "--interval", "0.5", "--format", "json"]
    )
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "starved", doc["findings"]
    assert any(f["rule"] == "starved-outside" for f in doc["findings"])


def test_watch_reports_target_exit(spawn: Spawner) -> None:
    target = spawn(stress(1, 1, 2), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    result = oversub(["watch", str(target.pid), "--interval", "0.5", "--format", "json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["target_exited"] is True
