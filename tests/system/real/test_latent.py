"""Latent oversubscription: idle NumPy processes, before any work starts (issue 12, 7-8).

Each spawned process imports NumPy, whose OpenBLAS starts a pool of N threads at import.
Idle, they already hold M pools of N threads: at-risk, naming OpenBLAS and the totals. The
same processes after threadpoolctl.threadpool_limits(1) in code keep their threads, but the
live pool size, read from their memory, is 1: ok, with the live value in the report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.system.real.workloads import PROCS, VCPUS, WORKLOAD_S, example, run_check

pytestmark = pytest.mark.real


def idle(*flags: str) -> list[str]:
    return example("idle_numpy.py", "--procs", str(PROCS), "--seconds", str(WORKLOAD_S), *flags)


def test_idle_default_pools_are_at_risk_and_a_limit_in_code_is_seen(tmp_path: Path) -> None:
    default = run_check(tmp_path, idle(), label="default")
    assert default.summary["command_status"] == 0, default.describe()
    assert default.summary["verdict"] == "at-risk", default.describe()
    [finding] = default.findings("pool-default")
    workers = default.child_pids()
    assert set(finding["pids"]) <= workers and len(finding["pids"]) == PROCS, default.describe()
    assert "OpenBLAS" in finding["message"] and "read live" in finding["message"]
    assert finding["evidence"]["pool_threads"] == PROCS * VCPUS, default.describe()
    assert default.summary["totals"]["pool_threads"] == PROCS * VCPUS, default.describe()
    assert default.summary["totals"]["pool_processes"] == PROCS, default.describe()
    live = {p["pid"]: p["live_pools"] for p in default.summary["processes"]}
    assert all(live[pid] == {"openblas": VCPUS} for pid in finding["pids"]), live
    assert "OPENBLAS_NUM_THREADS=1" in finding["fix"] or VCPUS // PROCS > 1
    assert "live_pools" not in default.summary["unavailable"]

    limited = run_check(tmp_path, idle("--limit", "1"), label="limited")
    assert limited.summary["command_status"] == 0, limited.describe()
    assert limited.summary["verdict"] == "ok", limited.describe()
    assert limited.summary["findings"] == [], limited.describe()
    assert limited.summary["totals"]["pool_threads"] == 0, limited.describe()
    children = [p for p in limited.summary["processes"] if p["pid"] in limited.child_pids()]
    with_numpy = [p for p in children if p["live_pools"]]
    assert len(with_numpy) == PROCS, limited.describe()
    assert all(p["live_pools"] == {"openblas": 1} for p in with_numpy), limited.describe()
    # The threads OpenBLAS started at import are still there: only the live value tells.
    assert all(p["threads"] >= VCPUS for p in with_numpy), limited.describe()
    assert "pool sizes read live: OpenBLAS 1 thread in pids" in limited.stderr, limited.stderr
    assert "(set in code)" in limited.stderr, limited.stderr
