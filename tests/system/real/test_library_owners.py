"""Whose busy threads these are, on issue 41's real libraries under `oversub check`.

examples/libraries.py runs PROCS processes of one library at its default size. Before issue
41 the finding said the busy threads of HF tokenizers were "the application's own threads"
(with dask's, an executor's and joblib's knobs), those of OpenCV "could not be attributed"
and XGBoost's, scikit-learn's and faiss' were GNU OpenMP's with a figure measured on torch.
Now each names the library that owns them (its OpenMP team where it drives one: the wheels
share one vendored libgomp, so the copy that runs does not say whose team it is) and the knob
measured to size it (docs/pools.md, "More libraries' pools").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.system.real.workloads import PROCS, WORKLOAD_S, example, run_check

pytestmark = pytest.mark.real

CASES = {
    "tokenizers": ("tokenizers", "HF tokenizers (rayon)", "RAYON_NUM_THREADS=1"),
    "opencv": ("opencv", "OpenCV's pool", "cv2.setNumThreads(1)"),
    "xgboost": ("xgboost", "XGBoost's OpenMP team", "OMP_NUM_THREADS=1"),
    "sklearn-hgb": ("sklearn", "scikit-learn's OpenMP team", "OMP_NUM_THREADS=1"),
    "lightgbm": ("lightgbm", "LightGBM's OpenMP team", "OMP_NUM_THREADS=1"),
    "faiss": ("faiss", "faiss's OpenMP team", "faiss.omp_set_num_threads(1)"),
}
NOT_THEIRS = ("application's own", "could not be attributed", "dask", "joblib", "torch")


@pytest.mark.parametrize("library", sorted(CASES))
def test_the_finding_names_the_library_that_owns_the_busy_threads(
    library: str, tmp_path: Path, figure: Any
) -> None:
    key, label, knob = CASES[library]
    command = example("libraries.py", library, "--procs", str(PROCS), "--seconds", str(WORKLOAD_S))
    run = run_check(tmp_path, command, label=library)
    figure(f"{library} steps_per_s", run.last_value("steps_per_s"))
    assert run.summary["command_status"] == 0, run.describe()
    over = [f for f in run.summary["findings"] if f["rule"].startswith("oversubscribed-")]
    assert len(over) == 1, run.describe()
    [finding] = over
    assert f"belong to {label}" in finding["message"], finding
    assert knob in finding["fix"], finding
    for words in NOT_THEIRS:
        assert words not in finding["message"] and words not in finding["fix"], (words, finding)
    # The JSON names the owner by its key in every worker that ran the library's pool.
    busy = [p for p in run.summary["processes"] if p["pid"] in finding["pids"]]
    assert len(busy) >= PROCS, run.describe()
    for p in busy:
        owners = {o["owner"]: o for o in p["owners"] or ()}
        assert key in owners and owners[key]["busy"] >= 1, p["owners"]
        assert "unattributed" not in owners or owners["unattributed"]["busy"] == 0, p["owners"]
