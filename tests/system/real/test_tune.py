"""`oversub tune` on the NumPy matmul processes: every candidate measured and judged.

The default (OpenBLAS at N threads in each of M processes) is judged oversubscribed by the
same sampler and verdict as `check`, the recommendation floor(N/M) is not; the throughput
of each candidate goes to the figures (no timing is asserted).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import OVERSUB
from tests.system.real.workloads import PROCS, VCPUS, example, reaped

pytestmark = pytest.mark.real

BUDGET_S = 75


def test_tune_measures_and_judges_each_candidate(tmp_path: Path, figure: Any) -> None:
    report = tmp_path / "tune.json"
    command = example("numpy_matmul.py", "--procs", str(PROCS), "--seconds", "3")
    args = [
        *OVERSUB,
        "tune",
        "--procs",
        str(PROCS),
        "--metric",
        "matmuls_per_s",
        "--trial-seconds",
        "60",
        "--runs",
        "2",
        "--max-trials",
        "3",
        "--budget",
        f"{BUDGET_S}s",
        "--json",
        str(report),
        "--",
        *command,
    ]
    with reaped(args) as tree:
        try:
            stdout, stderr = tree.communicate(timeout=BUDGET_S + 120)
        except subprocess.TimeoutExpired:
            pytest.fail("oversub tune did not finish")
    assert tree.proc.returncode == 0, stderr
    doc = json.loads(report.read_text())
    by_label = {c["label"]: c for c in doc["candidates"]}
    rec = next(c for c in doc["candidates"] if "recommended" in c["roles"])
    assert rec["threads"] == max(1, VCPUS // PROCS)
    for c in doc["candidates"]:
        if c["stats"] is not None:
            figure(f"tune {c['label']} matmuls_per_s", round(c["stats"]["mean"], 2))
    assert by_label["default"]["stats"] is not None, stderr
    assert rec["stats"] is not None, stderr
    # check's verdict on each trial: M x N OpenBLAS threads oversubscribe, the plan does not.
    assert by_label["default"]["verdict"] == "oversubscribed", doc["trials"]
    assert rec["verdict"] != "oversubscribed", doc["trials"]
    pick = doc["ranking"]["pick"]
    assert pick is not None
    if pick != "default":  # which one wins is a measurement; what is printed for it is not
        threads = by_label[pick]["threads"]
        assert f"export OPENBLAS_NUM_THREADS={threads}" in stdout
