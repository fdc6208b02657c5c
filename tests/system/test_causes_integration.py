"""Right cause on real process trees: outside load that explains the waiting, an idle pool
under outside load, and single-thread oversubscription (issue 12, items 3, 4 and 6).

Everything, the watched tree and the outside load alike, is pinned to one CPU, so the
figures do not depend on the machine's size. Margins are wide; no timing is asserted.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import CPU, Spawner, pin_to_one_cpu, stress
from tests.support.harness import oversub as run_oversub


def oversub(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_oversub(args, pin=True, **kwargs)


pytestmark = pytest.mark.integration

# A busy loop for `duty` of every 100 ms: outside load of about `duty` CPU on the pinned CPU.
HOG = """
import os, sys, time
os.sched_setaffinity(0, {%d})
duty = float(sys.argv[1])
while True:
    end = time.perf_counter() + 0.1 * duty
    while time.perf_counter() < end:
        pass
    time.sleep(0.1 * (1 - duty))
"""

# Says "ready" once its 8 workers are up and have run a task, then idles.
IDLE_POOL = """
import multiprocessing, time
with multiprocessing.get_context("spawn").Pool(8) as pool:
    pool.map(abs, range(8))
    print("ready", flush=True)
    time.sleep(600)
"""


@contextlib.contextmanager
def outside_load(duty: float, count: int = 1) -> Iterator[None]:
    """`count` processes outside any watched tree, each busy `duty` of the time on CPU."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG % CPU, str(duty)]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            with contextlib.suppress(ProcessLookupError):
                hog.send_signal(signal.SIGKILL)
            hog.wait(timeout=10)


def check_json(tmp_path: Path, command: list[str]) -> dict[str, Any]:
    report = tmp_path / "r.json"
    result = oversub(
        ["check", "--interval", "0.5", "--warmup", "1", "--json", str(report), "--", *command]
    )
    assert report.exists(), result.stderr
    doc: dict[str, Any] = json.loads(report.read_text())
    doc["stderr"] = result.stderr
    return doc


def rules(doc: dict[str, Any]) -> set[str]:
    return {f["rule"] for f in doc["findings"]}


def test_small_outside_load_that_explains_the_waiting_is_named(tmp_path: Path) -> None:
    # One busy thread on its one CPU (demand ~1 = N) and ~0.3 CPU of other load: the tree
    # waits about what the other load takes, far below the fixed outside-cpu of 0.5.
    with outside_load(0.3):
        doc = check_json(tmp_path, stress(1, 1, 6))
    assert "starved-unattributed" not in rules(doc), doc["findings"]
    if doc["verdict"] == "starved":
        [finding] = [f for f in doc["findings"] if f["rule"] == "starved-outside"]
        assert "Other processes used" in finding["message"], finding
    for f in doc["findings"]:
        assert "no other load" not in f["message"], f


def test_an_idle_pool_under_outside_load_is_not_starved(tmp_path: Path, spawn: Spawner) -> None:
    # An idle Pool(8) on a CPU that two other processes keep busy: its workers' rare wake-ups
    # wait, but the tree keeps a tiny fraction of a CPU runnable. The pool's start-up (eight
    # interpreters importing under the same load) is real starvation, so the check attaches
    # only once the pool says it is ready, and the load starts after that.
    pool = spawn(
        [sys.executable, "-c", IDLE_POOL],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=pin_to_one_cpu,
    )
    assert pool.stdout is not None and pool.stdout.readline().strip() == "ready"
    report = tmp_path / "r.json"
    with outside_load(1.0, count=2):
        args = ["--pid", str(pool.pid), "--duration", "3", "--interval", "0.5"]
        result = oversub(["check", *args, "--json", str(report)])
    assert report.exists(), result.stderr
    doc = json.loads(report.read_text())
    assert doc["verdict"] not in ("starved", "oversubscribed"), doc["findings"]
    assert doc["totals"]["demand"] < 0.2, doc["totals"]


def test_single_thread_oversubscription_says_the_win_is_fairness(tmp_path: Path) -> None:
    doc = check_json(tmp_path, stress(3, 1, 5))
    [finding] = [f for f in doc["findings"] if f["rule"] == "oversubscribed-processes"]
    assert "fairness and latency, not throughput" in finding["message"], finding
    assert "at most 1 busy process" in finding["fix"], finding
