"""Other libraries' own multi-process code: dask distributed and scikit-learn (issue 12).

- dask LocalCluster(n_workers=2, threads_per_worker=2): its nannies set the thread
  variables to 1, so the extra runnable threads are dask's task threads. The finding must
  say so (oversubscribed-threads) and name threads_per_worker, never ask for a variable
  that is already 1.
- scikit-learn with joblib's loky backend: loky limits its workers' pools, and the idle
  parent and the resource tracker, which hold OpenBLAS pools too, do not compete with them:
  nothing self-inflicted may name them.
- the multiprocessing backend: forked workers run OpenBLAS at all N; the finding names the
  workers and OpenBLAS (read live), not libgomp, which scikit-learn loads and never runs here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.system.real.workloads import PROCS, SELF_INFLICTED, WORKLOAD_S, example, run_check

pytestmark = pytest.mark.real

VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def dask(threads_per_worker: int) -> list[str]:
    return example(
        "dask_tasks.py",
        "--workers",
        str(PROCS),
        "--threads-per-worker",
        str(threads_per_worker),
        "--seconds",
        str(WORKLOAD_S),
    )


def sklearn(backend: str) -> list[str]:
    return example(
        "sklearn_fit.py", "--backend", backend, "--jobs", str(PROCS), "--seconds", str(WORKLOAD_S)
    )


def test_dask_task_threads_are_application_threads(tmp_path: Path, figure: Any) -> None:
    run = run_check(tmp_path, dask(2), label="dask")
    figure("dask threads_per_worker=2 tasks_per_s", run.last_value("tasks_per_s"))
    assert run.summary["command_status"] == 0, run.describe()
    assert "oversubscribed-pools" not in run.rules(), run.describe()
    [finding] = run.findings("oversubscribed-threads")
    # dask's task threads do BLAS with the GIL released: preempted more than they yield, so
    # they are the application's threads (at the CPU and demand of GIL-bound ones), not the GIL.
    assert "application's own" in finding["message"], finding
    assert "GIL" not in finding["message"], finding
    assert "threads_per_worker" in finding["fix"], finding
    for variable in VARIABLES:
        assert f"set {variable}" not in finding["fix"] and variable not in finding["fix"]
    # The workers' pools are limited, by the nanny's variables and in fact (read live).
    workers = [p for p in run.summary["processes"] if p["pid"] in finding["pids"]]
    limited = [p for p in workers if (p["thread_env"] or {}).get("OPENBLAS_NUM_THREADS") == "1"]
    assert len(limited) >= PROCS, run.describe()
    assert all(p["live_pools"] in (None, {}, {"openblas": 1}) for p in limited), run.describe()

    one = run_check(tmp_path, dask(1), label="dask1")
    figure("dask threads_per_worker=1 tasks_per_s", one.last_value("tasks_per_s"))
    assert "oversubscribed-pools" not in one.rules(), one.describe()
    for f in one.summary["findings"]:
        for variable in VARIABLES:
            assert f"set {variable}" not in f["fix"], f


def test_sklearn_loky_parent_and_tracker_are_not_counted(tmp_path: Path, figure: Any) -> None:
    run = run_check(tmp_path, sklearn("loky"), label="loky")
    figure("sklearn loky fits_per_s", run.last_value("fits_per_s"))
    assert run.summary["command_status"] == 0, run.describe()
    blamed = [f for f in run.summary["findings"] if f["rule"] in SELF_INFLICTED]
    assert not blamed, run.describe()
    # loky's workers run their pools at cpu_count // n_jobs: read live, not only in environ.
    workers = [p for p in run.summary["processes"] if (p["thread_env"] or {}).get(VARIABLES[2])]
    assert workers, run.describe()


def test_sklearn_multiprocessing_backend_names_workers_and_openblas(
    tmp_path: Path, figure: Any
) -> None:
    run = run_check(tmp_path, sklearn("multiprocessing"), label="mp")
    figure("sklearn multiprocessing fits_per_s", run.last_value("fits_per_s"))
    assert run.summary["command_status"] == 0, run.describe()
    blamed = [f for f in run.summary["findings"] if f["rule"] in SELF_INFLICTED]
    assert blamed, run.describe()
    root = run.summary["root_pid"]
    for f in blamed:
        assert root not in f["pids"], f  # the idle parent dispatches, it does not compete
        pools = str(f["evidence"].get("pools") or "").split(",")
        assert "openblas" in pools and "libgomp" not in pools, f
        assert "OPENBLAS_NUM_THREADS" in f["fix"], f
        assert "GNU OpenMP" not in f["fix"], f
