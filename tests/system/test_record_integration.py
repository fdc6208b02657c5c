"""`--record` and `oversub report` on real process trees: the replay of a recording with its
own thresholds gives the live run's verdict and findings, exactly.

Each tree is pinned to one CPU (see tests/system/test_check_integration.py), so the verdicts hold
on any machine; `check --pid` and `watch` attach only once the workload is up, so the judged
window holds nothing but the steady state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from oversub.core.errors import ExitStatus
from tests.support.harness import OVERSUB, Spawner, busy_workers, stress, wait_until
from tests.support.harness import oversub as run_oversub
from tests.support.harness import pin_to_one_cpu as _pin

pytestmark = pytest.mark.integration


def oversub(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_oversub(args, pin=True, **kwargs)


def report(path: Path, *flags: str) -> dict[str, Any]:
    result = oversub(["report", str(path), "--format", "json", *flags])
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def recorded_summary(path: Path) -> dict[str, Any]:
    last: dict[str, Any] = json.loads(path.read_text().splitlines()[-1])
    assert last["type"] == "summary"
    return last


def same_judgement(live: dict[str, Any], replayed: dict[str, Any]) -> None:
    assert replayed["verdict"] == live["verdict"]
    assert replayed["findings"] == live["findings"]  # rules, pids, evidence, messages, fixes
    assert replayed["samples"] == live["samples"]


def test_an_oversubscribed_check_replays_to_its_verdict(tmp_path: Path) -> None:
    rec, doc = tmp_path / "run.ndjson", tmp_path / "r.json"
    flags = ["--interval", "0.5", "--warmup", "0.5", "--record", str(rec), "--json", str(doc)]
    # Any oversubscription fails: stress's hashing threads are a warning the default passes.
    flags += ["--fail-on", "oversubscribed"]
    # As in CI: beside every report file, the job summary and annotations.
    flags += ["--junit", str(tmp_path / "r.xml"), "--markdown", str(tmp_path / "r.md")]
    ci = {"GITHUB_STEP_SUMMARY": str(tmp_path / "step.md"), "GITHUB_ACTIONS": "true"}
    result = oversub(["check", *flags, "--", *stress(1, 3, 4)], env=ci)
    assert result.returncode == ExitStatus.FOUND, result.stderr
    assert "::error" in result.stderr
    for name in ("r.xml", "r.md", "step.md"):
        assert "oversubscribed" in (tmp_path / name).read_text(), name
    live = json.loads(doc.read_text())
    assert live["verdict"] == "oversubscribed"
    replayed = report(rec)
    same_judgement(live, replayed["summary"])
    same_judgement(recorded_summary(rec), replayed["summary"])
    assert replayed["recording"]["complete"] and replayed["changed"] == []
    # Looser thresholds: demand ~3 on N = 1 passes under a margin of 4 (N x 5), and waiting
    # stops counting under a delay ratio of 0.99: no longer oversubscribed.
    loose = report(rec, "--margin", "4", "--delay-ratio", "0.99")
    assert loose["summary"]["verdict"] != "oversubscribed"
    assert loose["changed"] == ["margin", "delay_ratio"]
    assert all(not f["rule"].startswith("oversubscribed") for f in loose["summary"]["findings"])


def test_a_healthy_pid_check_replays_to_its_verdict(tmp_path: Path, spawn: Spawner) -> None:
    target = spawn(stress(1, 1, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    wait_until(lambda: busy_workers(target.pid, 1, 1), what="the stress worker")
    rec, doc = tmp_path / "run.ndjson", tmp_path / "r.json"
    flags = ["--duration", "2", "--interval", "0.5", "--record", str(rec), "--json", str(doc)]
    result = oversub(["check", "--pid", str(target.pid), *flags])
    live = json.loads(doc.read_text())
    assert result.returncode == ExitStatus.OK, result.stderr
    # One busy thread on its one CPU: never oversubscribed; other load on a shared machine
    # may make it starved, which the replay must reproduce all the same.
    assert live["verdict"] != "oversubscribed", live["findings"]
    same_judgement(live, report(rec)["summary"])


def test_a_starved_watch_replays_to_its_verdict(tmp_path: Path, spawn: Spawner) -> None:
    hog = spawn(stress(1, 2, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    target = spawn(stress(1, 1, 30), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    wait_until(lambda: busy_workers(hog.pid, 1, 2) and busy_workers(target.pid, 1, 1))
    rec = tmp_path / "run.ndjson"
    result = oversub(
        [
            "watch",
            str(target.pid),
            "--duration",
            "3",
            "--interval",
            "0.5",
            "--format",
            "json",
            "--record",
            str(rec),
        ]
    )
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout)
    assert live["verdict"] == "starved", live["findings"]
    same_judgement(live, report(rec)["summary"])


def test_a_killed_watch_leaves_a_recording_that_report_reads(
    tmp_path: Path, spawn: Spawner
) -> None:
    target = spawn(stress(1, 3, 60), stderr=subprocess.DEVNULL, preexec_fn=_pin)
    wait_until(lambda: busy_workers(target.pid, 1, 3), what="the stress workers")
    rec = tmp_path / "run.ndjson"
    watcher = spawn(
        [
            *OVERSUB,
            "watch",
            str(target.pid),
            "--interval",
            "0.2",
            "--format",
            "json",
            "--record",
            str(rec),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def intervals() -> int:
        return rec.read_text().count('"type":"interval"') if rec.exists() else 0

    wait_until(lambda: intervals() >= 4, what="four recorded intervals")
    os.kill(watcher.pid, signal.SIGKILL)
    watcher.wait(timeout=30)
    doc = report(rec)
    assert doc["recording"]["complete"] is False and doc["recorded"] is None
    assert doc["recording"]["intervals"] >= 4
    assert doc["summary"]["verdict"] == "oversubscribed"
    assert any("ends early" in note for note in doc["summary"]["notes"])
    text = oversub(["report", str(rec)])
    assert text.returncode == 0 and "no recorded verdict" in text.stdout
