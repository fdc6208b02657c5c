"""M NumPy processes with OpenBLAS sized by default: oversubscribed; with the plan's env: fine.

Each spawned process imports numpy afresh, so OPENBLAS_NUM_THREADS from `oversub recommend
--procs M --format env` reaches its OpenBLAS before the pool starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.real.conftest import (
    PROCS,
    SELF_INFLICTED,
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
