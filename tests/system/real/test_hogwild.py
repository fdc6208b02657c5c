"""Hogwild on a shared PyTorch model: oversub must flag the default pools and pass the fix.

M = N worker processes each size torch's OpenMP pool to all N vCPUs (docs/signals.md: every
worker reports torch.get_num_threads() = N, fork or spawn). `oversub check` must exit 1 with
an oversubscribed-pools finding that names the workers, an OpenMP/torch pool and a fix;
with the plan applied in each worker (`--threads recommended`) it must exit 0.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import OVERSUB
from tests.system.real.workloads import PROCS, WORKLOAD_S, CheckRun, example, run_check

pytestmark = pytest.mark.real

OPENMP_POOLS = {"libgomp", "libiomp5", "torch"}


def hogwild(start_method: str, threads: str) -> list[str]:
    """examples/hogwild.py with M = PROCS workers on the small model."""
    return example(
        "hogwild.py",
        "--workers",
        str(PROCS),
        "--start-method",
        start_method,
        "--threads",
        threads,
        "--seconds",
        str(WORKLOAD_S),
        "--model",
        "small",
    )


def oversub_diff(before: str, after: str) -> subprocess.CompletedProcess[str]:
    args = ["diff", before, after, "--metric", "steps_per_s", "--format", "json"]
    return subprocess.run([*OVERSUB, *args], capture_output=True, text=True, timeout=60)


def worker_pids(run: CheckRun) -> set[int]:
    """The pids the workers printed (`worker=<rank> pid=<pid> ...`)."""
    pids = {int(m) for m in re.findall(r"^worker=\d+ pid=(\d+)", run.stdout, re.MULTILINE)}
    assert len(pids) == PROCS, f"expected {PROCS} worker lines:\n{run.stdout}"
    return pids


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_default_threads_oversubscribe_and_the_plan_fixes_it(
    start_method: str, tmp_path: Path, figure: Any
) -> None:
    # Issue 14: both runs are recorded with their throughput, for `oversub diff` below.
    recorded = {
        label: ("--record", str(tmp_path / f"{label}.ndjson"), "--metric", "steps_per_s")
        for label in ("default", "recommended")
    }
    default = run_check(
        tmp_path, hogwild(start_method, "default"), label="default", flags=recorded["default"]
    )
    figure(f"hogwild {start_method} default steps_per_s", default.last_value("steps_per_s"))
    assert default.summary["command_status"] == 0, default.describe()
    assert default.exit_code == 1, default.describe()
    assert default.summary["verdict"] == "oversubscribed", default.describe()
    findings = default.findings("oversubscribed-pools")
    assert len(findings) == 1, default.describe()
    finding = findings[0]
    workers = worker_pids(default)
    assert workers <= set(finding["pids"]), default.describe()
    pools = set(str(finding["evidence"].get("pools", "")).split(","))
    assert pools & OPENMP_POOLS, default.describe()
    assert "OMP_NUM_THREADS" in finding["fix"] or "set_num_threads" in finding["fix"]

    fixed = run_check(
        tmp_path,
        hogwild(start_method, "recommended"),
        label="recommended",
        flags=recorded["recommended"],
    )
    figure(f"hogwild {start_method} recommended steps_per_s", fixed.last_value("steps_per_s"))
    assert fixed.summary["command_status"] == 0, fixed.describe()
    assert fixed.exit_code == 0, fixed.describe()
    assert not fixed.rules() & {"oversubscribed-pools", "oversubscribed-processes"}, (
        fixed.describe()
    )
    # The plan each worker applied: floor(N / M) threads.
    threads = {int(t) for t in re.findall(r"^worker=.* threads=(\d+)", fixed.stdout, re.M)}
    assert threads == {max(1, fixed.summary["vcpus"] // PROCS)}, fixed.stdout

    # `oversub diff` of the two recordings shows the improvement and passes as a CI gate;
    # the other way round, the default threads are worse and fail it.
    before, after = (str(tmp_path / f"{label}.ndjson") for label in ("default", "recommended"))
    diff = oversub_diff(before, after)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    doc = json.loads(diff.stdout)
    assert doc["before"]["verdict"] == "oversubscribed", doc
    assert doc["after"]["verdict"] != "oversubscribed", doc
    assert doc["after"]["run_delay_ratio"] < doc["before"]["run_delay_ratio"], doc
    assert doc["after"]["demand"] < doc["before"]["demand"], doc
    assert doc["before"]["metric"] == default.last_value("steps_per_s"), doc
    assert doc["after"]["metric"] == fixed.last_value("steps_per_s"), doc
    assert any(reason.startswith("verdict oversubscribed") for reason in doc["better"]), doc
    figure(f"hogwild {start_method} diff better", "; ".join(doc["better"]))
    assert oversub_diff(after, before).returncode == 1
