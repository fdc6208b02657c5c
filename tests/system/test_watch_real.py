"""`oversub watch` on real trees for the verdicts that need the kernel's help: a cgroup quota
that throttles, and a busy worker whose parent died. Neither depends on the core count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cgroup_sandbox import quota_cgroup
from tests.support.harness import OVERSUB, Spawner, busy_workers, descendants, oversub, wait_until

pytestmark = pytest.mark.integration


def _watch(pid: int, seconds: float) -> dict[str, object]:
    out = subprocess.run(
        [
            *OVERSUB,
            "watch",
            str(pid),
            "--duration",
            str(seconds),
            "--interval",
            "0.5",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def _rules(doc: dict[str, object]) -> set[str]:
    findings = doc["findings"]
    assert isinstance(findings, list)
    return {f["rule"] for f in findings}


def test_half_cpu_quota_throttling_is_starved_not_oversubscribed(
    spawn: Spawner,
) -> None:
    with quota_cgroup(0.5) as (_mount, quota_dir, tasks_dir):
        # The shell joins the cgroup before exec, so the whole stress tree is inside it.
        script = (
            f'echo $$ > {tasks_dir}/cgroup.procs && exec "$0" -m oversub stress '
            "--procs 1 --threads 1 --seconds 30"
        )
        job = spawn(
            ["sh", "-c", script, sys.executable], stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            wait_until(lambda: busy_workers(job.pid, 1, 1), what="the stress worker")
            doc = _watch(job.pid, 3)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=10)
            # The kernel empties cgroup.procs once the tasks are reaped.
            procs = Path(tasks_dir) / "cgroup.procs"
            wait_until(lambda: not procs.read_text().strip(), what="an empty cgroup")
    assert doc["vcpus"] == 1  # 0.5 CPU rounds down to one: a thread cannot run part-time
    assert doc["verdict"] == "starved", doc["findings"]
    assert "starved-quota" in _rules(doc)
    assert quota_dir


ORPHANING_PARENT = """
import subprocess, sys, time
busy = "import hashlib, time\\nb = bytes(1 << 20)\\nt = time.time() + 30\\n" \\
       "while time.time() < t: hashlib.sha256(b)"
# mid starts a busy grandchild, lives long enough to be seen, then exits: the grandchild
# is re-parented while it keeps working.
mid = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {busy!r}]); " \\
      "time.sleep(2)"
subprocess.run([sys.executable, "-c", mid], check=True)
time.sleep(30)
"""


def test_busy_worker_whose_parent_died_is_an_orphan(
    spawn: Spawner,
) -> None:
    root = spawn([sys.executable, "-c", ORPHANING_PARENT], start_new_session=True)
    # Watch from the moment the middle process exists, so the tree is seen before it dies.
    wait_until(lambda: descendants(root.pid), what="the middle process")
    doc = _watch(root.pid, 4)
    assert "orphan" in _rules(doc), doc["findings"]
    assert doc["verdict"] in {"at-risk", "starved", "oversubscribed"}


def test_live_format_on_a_pipe_prints_the_summary_alone(spawn: Spawner) -> None:
    # Issue 11 item 9: piped, the live format printed its last frame without a newline,
    # "No findings.oversub summary", and that frame's verdict above the summary's.
    target = spawn([sys.executable, "-c", "import time; time.sleep(30)"])
    argv = ["watch", str(target.pid), "--format", "live", "--duration", "1", "--interval", "0.5"]
    out = oversub(argv, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("oversub summary · pid "), out.stdout
    assert "oversub watch ·" not in out.stdout and "No findings.oversub" not in out.stdout
    assert out.stdout.count("No findings.") == 1, out.stdout
