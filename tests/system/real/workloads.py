"""The real-workload tests' helpers: run examples under oversub, always clean up.

These tests run PyTorch and NumPy jobs from examples/ under `oversub check` / `oversub
watch` in subprocesses, so the test modules never import torch or numpy themselves (the
plain .venv collects them too, then deselects them by the `real` marker). Sizes derive from
N = the vCPUs this process may use. Throughput figures are printed in the terminal summary
and stored with record_property; no test asserts a timing.

Clean-up: `oversub check` starts its command in a session of its own, so killing the
check's process group would miss the workload. Every run therefore snapshots the check's
descendants with psutil before stopping it (SIGINT first, which oversub turns into a clean
stop of its tree, then SIGKILL for anything left).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.harness import OVERSUB

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
VCPUS = len(os.sched_getaffinity(0))
# M processes for the multi-process scenarios: N, so each default-sized pool oversubscribes,
# but at most 8 so a big machine does not start dozens of 300 MB torch processes.
PROCS = max(2, min(VCPUS, 8))
# Seconds of workload per run and seconds ignored at the start (imports, pool start-up:
# spawned workers import torch afresh, which takes a second or two on a loaded machine).
WORKLOAD_S = 7.0
WARMUP_S = 2.0
# Beyond the workload: interpreter start-up, imports, reports. A run that takes longer is
# stuck, and the test fails instead of hanging the suite.
RUN_GRACE_S = 120.0
# Findings that blame the tree itself, as opposed to outside load (starved-*) or notes.
SELF_INFLICTED = frozenset(
    {"oversubscribed-pools", "oversubscribed-processes", "pool-default", "busy-threads-exceed"}
)

FIGURES: list[str] = []
"""Measured figures of this session, printed in the terminal summary (conftest.py)."""


@dataclass(frozen=True)
class CheckRun:
    """One finished `oversub check --json` run."""

    exit_code: int
    summary: dict[str, Any]
    stdout: str
    stderr: str

    def findings(self, rule: str) -> list[dict[str, Any]]:
        """The findings with this rule id."""
        return [f for f in self.summary["findings"] if f["rule"] == rule]

    def rules(self) -> set[str]:
        """Every rule id that fired."""
        return {f["rule"] for f in self.summary["findings"]}

    def child_pids(self) -> set[int]:
        """Pids of the processes the command's root process started."""
        root = self.summary["root_pid"]
        return {p["pid"] for p in self.summary["processes"] if p["ppid"] == root}

    def last_value(self, key: str) -> float:
        """The float of the last `key=<float>` line the command printed on stdout."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith(f"{key}="):
                return float(line.split("=", 1)[1])
        raise AssertionError(f"no {key}= line in the command's stdout:\n{self.stdout}")

    def describe(self) -> str:
        """Enough context for a failed assertion: report, verdict, totals, findings."""
        brief = {
            "verdict": self.summary.get("verdict"),
            "totals": self.summary.get("totals"),
            "host": self.summary.get("host"),
            "findings": [(f["rule"], f["pids"], f["evidence"]) for f in self.summary["findings"]],
            "busy processes": [
                {k: p.get(k) for k in ("pid", "cpu_percent", "demand", "seconds", "owners")}
                for p in self.summary.get("processes", ())
                if (p.get("demand") or 0) >= 0.2
            ],
        }
        return f"exit {self.exit_code}\n{json.dumps(brief, indent=1)}\nstderr:\n{self.stderr}"


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of pid (empty when pid is gone)."""
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


class Tree:
    """A started process and every descendant seen so far (they may leave its session)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: dict[int, psutil.Process] = {}

    def remember(self) -> None:
        """Snapshot the current descendants, so they can be killed after being orphaned."""
        for child in descendants(self.proc.pid):
            self.seen.setdefault(child.pid, child)

    def communicate(self, timeout: float) -> tuple[str, str]:
        """proc.communicate, snapshotting descendants every second while it runs."""
        deadline = time.monotonic() + timeout
        while True:
            self.remember()
            try:
                return self.proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise

    def stop(self) -> None:
        """Stop proc (SIGINT, then SIGKILL to its group) and kill every descendant seen."""
        self.remember()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # psutil checks the creation time before killing, so a reused pid is left alone.
        for child in self.seen.values():
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(list(self.seen.values()), timeout=5)


@contextlib.contextmanager
def reaped(args: list[str], env: dict[str, str] | None = None) -> Iterator[Tree]:
    """Start args in a new session; on exit kill it and all its descendants, whatever happened."""
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    tree = Tree(proc)
    try:
        yield tree
    finally:
        tree.stop()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def example(name: str, *args: str) -> list[str]:
    """The command line that runs examples/<name> with this interpreter."""
    return [sys.executable, str(EXAMPLES / name), *args]


def run_check(
    tmp_path: Path,
    command: list[str],
    *,
    env_update: dict[str, str] | None = None,
    label: str = "run",
    flags: tuple[str, ...] = (),
) -> CheckRun:
    """Run `oversub check --json [FLAGS]` on command and return the parsed outcome."""
    report = tmp_path / f"{label}.json"
    args = [
        *OVERSUB,
        "check",
        "--warmup",
        str(WARMUP_S),
        "--timeout",
        str(WORKLOAD_S + RUN_GRACE_S),
        "--json",
        str(report),
        *flags,
        "--",
        *command,
    ]
    env = {**os.environ, **(env_update or {})}
    with reaped(args, env=env) as tree:
        try:
            stdout, stderr = tree.communicate(timeout=WORKLOAD_S + RUN_GRACE_S + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"oversub check did not finish: {' '.join(args)}")
    exit_code = tree.proc.returncode
    assert report.exists(), f"no JSON report (exit {exit_code}):\n{stderr}"
    summary = json.loads(report.read_text())
    return CheckRun(exit_code, summary, stdout, stderr)


def recommended_env(procs: int, workers: int = 0) -> dict[str, str]:
    """The variables `oversub recommend --format env` exports for this job shape."""
    out = subprocess.run(
        [
            *OVERSUB,
            "recommend",
            "--format",
            "env",
            "--procs",
            str(procs),
            "--workers",
            str(workers),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    env: dict[str, str] = {}
    for line in out.splitlines():
        assert line.startswith("export "), f"unexpected line in --format env: {line!r}"
        name, value = line.removeprefix("export ").split("=", 1)
        env[name] = value.strip("'\"")
    assert env, "oversub recommend --format env exported nothing"
    return env
