"""M NumPy processes with OpenBLAS sized by default: oversubscribed; with the plan's env: fine.

Each spawned process imports numpy afresh, so OPENBLAS_NUM_THREADS from `oversub recommend
--procs M --format env` reaches its OpenBLAS before the pool starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.system.real.workloads import (
    PROCS,
    SELF_INFLICTED,
    VCPUS,
    WORKLOAD_S,
    example,
    recommended_env,
    run_check,
)

pytestmark = pytest.mark.real


def matmuls() -> list[str]:
    """examples/numpy_matmul.py with M = PROCS processes."""
    return example("numpy_matmul.py", "--procs", str(PROCS), "--seconds", str(WORKLOAD_S))


def test_default_openblas_oversubscribes_and_the_env_fixes_it(tmp_path: Path, figure: Any) -> None:
    default = run_check(tmp_path, matmuls(), label="default")
    figure("numpy default matmuls_per_s", default.last_value("matmuls_per_s"))
    assert default.summary["command_status"] == 0, default.describe()
    assert default.exit_code == 1, default.describe()
    findings = default.findings("oversubscribed-pools")
    assert len(findings) == 1, default.describe()
    assert "openblas" in str(findings[0]["evidence"].get("pools", "")).split(","), (
        default.describe()
    )
    assert "OPENBLAS_NUM_THREADS" in findings[0]["fix"], findings[0]["fix"]
    # The busy processes are the M spawned children (spawn also starts a resource tracker).
    assert len(set(findings[0]["pids"]) & default.child_pids()) == PROCS, default.describe()

    env = recommended_env(PROCS)
    assert "OPENBLAS_NUM_THREADS" in env, env
    fixed = run_check(tmp_path, matmuls(), env_update=env, label="fixed")
    figure("numpy fixed matmuls_per_s", fixed.last_value("matmuls_per_s"))
    assert fixed.summary["command_status"] == 0, fixed.describe()
    assert fixed.exit_code == 0, fixed.describe()
    # ok, unless other load on the machine starves the tree (starved-*): never self-inflicted.
    assert not fixed.rules() & SELF_INFLICTED, fixed.describe()
    assert fixed.summary["verdict"] in {"ok", "starved"}, fixed.describe()


def test_apply_caps_openblas_that_numpy_loaded_first() -> None:
    # Issue 11 item 13: `oversub.apply()` after `import numpy` did nothing without
    # threadpoolctl (it returned 1, and `check` still saw 2 active threads). NumPy's OpenBLAS
    # read its size when it loaded; apply and worker_init_fn must still cap it.
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, numpy, threadpoolctl, oversub\n"
        "def blas():\n"
        "    return sorted({p['num_threads'] for p in threadpoolctl.threadpool_info()"
        " if p['user_api'] == 'blas'})\n"
        "before = blas()\n"
        "oversub.apply(oversub.recommend(procs=1, cpus=1))\n"
        "main = blas()\n"
        "oversub.worker_init_fn(0)\n"
        "print(json.dumps([before, main, blas()]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    before, main, worker = json.loads(done.stdout)
    assert before and (before[0] > 1 or VCPUS == 1), before  # sized by default: every CPU
    assert main == [1] and worker == [1], (main, worker)
