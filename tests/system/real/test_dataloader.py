"""DataLoader workers doing NumPy work next to a training main process.

Without the fix, the main process trains with torch's full OpenMP pool while each worker's
OpenBLAS keeps all N threads (torch only sets its own pool to 1 in workers): oversub must
say at least at-risk and blame the tree (pool-default or oversubscribed-*), naming the
worker. With `--fix` (oversub.apply in main, oversub.worker_init_fn in the workers) nothing
may be blamed on the tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.system.real.workloads import SELF_INFLICTED, WORKLOAD_S, example, run_check

pytestmark = pytest.mark.real

RANK = {"ok": 0, "at-risk": 1, "starved": 2, "oversubscribed": 3}


def loader(*flags: str) -> list[str]:
    """examples/dataloader_numpy.py with its default W = max(1, N // 2) workers."""
    return example("dataloader_numpy.py", "--seconds", str(WORKLOAD_S), *flags)


def test_default_pools_are_flagged_and_the_fix_clears_them(tmp_path: Path, figure: Any) -> None:
    default = run_check(tmp_path, loader(), label="default")
    figure("dataloader default steps_per_s", default.last_value("steps_per_s"))
    assert default.summary["command_status"] == 0, default.describe()
    assert RANK[default.summary["verdict"]] >= RANK["at-risk"], default.describe()
    blamed = [f for f in default.summary["findings"] if f["rule"] in SELF_INFLICTED]
    assert blamed, default.describe()
    workers = default.child_pids()
    assert workers, default.describe()
    assert any(workers <= set(f["pids"]) for f in blamed), default.describe()
    for f in blamed:
        # torch.set_num_threads does not reach NumPy's OpenBLAS in the workers: whenever it
        # is offered, threadpoolctl (which does) is offered for OpenBLAS beside it.
        if "torch.set_num_threads" in f["fix"]:
            assert "threadpoolctl.threadpool_limits" in f["fix"], f["fix"]
        assert "OpenBLAS" in f["fix"], f["fix"]

    fixed = run_check(tmp_path, loader("--fix"), label="fixed")
    figure("dataloader fixed steps_per_s", fixed.last_value("steps_per_s"))
    assert fixed.summary["command_status"] == 0, fixed.describe()
    assert fixed.exit_code == 0, fixed.describe()
    # ok, unless other load on the machine starves the tree (starved-*): never self-inflicted.
    assert not fixed.rules() & SELF_INFLICTED, fixed.describe()
    assert fixed.summary["verdict"] in {"ok", "starved"}, fixed.describe()
