"""`oversub merge` on the reports of two real `oversub check --json` runs, one per "node".

The nodes are simulated on this machine: each run gets its node name from `OVERSUB_NODE`
and a launcher's variables (SLURM and torchrun, as a job step would see them), and each is
pinned to one CPU, one after the other so that neither loads the other: 1 process x 3 busy
threads on 1 CPU oversubscribes anywhere, 1 x 1 never does (a loaded CI machine may make it
"starved", which does not fail at the default --fail-on). Margins are wide; no timing is
asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus
from tests.support.harness import LAUNCHER_VARS, oversub, stress

pytestmark = pytest.mark.integration


def check_on_node(tmp_path: Path, node: str, rank: int, command: list[str]) -> Path:
    path = tmp_path / f"{node}.json"
    env = {
        "OVERSUB_NODE": node,
        "SLURM_JOB_ID": "4242",
        "SLURM_NODEID": str(rank),
        "SLURM_PROCID": str(rank),
        "GROUP_RANK": str(rank),
        "SECRET_TOKEN": "not-for-reports",
        **{name: "" for name in LAUNCHER_VARS},
    }
    flags = ["--interval", "0.5", "--warmup", "0.5", "--json", str(path)]
    result = oversub(["check", *flags, "--", *command], env=env, pin=True)
    assert result.returncode in (ExitStatus.OK, ExitStatus.FOUND), result.stderr
    return path


def test_merge_of_an_oversubscribed_and_a_healthy_node(tmp_path: Path) -> None:
    hot = check_on_node(tmp_path, "node-hot", 0, stress(1, 3, 4))
    calm = check_on_node(tmp_path, "node-calm", 1, stress(1, 1, 3))
    hot_doc, calm_doc = (json.loads(p.read_text()) for p in (hot, calm))
    assert (hot_doc["node"], hot_doc["verdict"]) == ("node-hot", "oversubscribed")
    assert calm_doc["node"] == "node-calm" and calm_doc["verdict"] in {"ok", "starved"}
    assert hot_doc["launcher_env"] == {
        "SLURM_JOB_ID": "4242",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "GROUP_RANK": "0",
    }
    assert "not-for-reports" not in hot.read_text()

    # stress's hashing threads are a warning: the merge gates on any oversubscription, as in
    # docs/fleet.md; the default gate (costly) passes them and says why.
    result = oversub(["merge", str(calm), str(hot)])
    assert result.returncode == ExitStatus.OK, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == (
        "oversub merge: pass: job verdict oversubscribed, the worst of 2 nodes, no costly "
        "finding (--fail-on costly), exit 0"
    )
    result = oversub(["merge", str(calm), str(hot), "--fail-on", "oversubscribed"])
    assert result.returncode == ExitStatus.FOUND, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "oversub merge: 2 reports, 2 nodes; job SLURM_JOB_ID=4242"
    assert lines[-1].startswith(
        "oversub merge: FAIL: job verdict oversubscribed (--fail-on oversubscribed) on 1 of "
        "2 nodes: node-hot"
    ), lines
    [hot_row] = [line for line in lines if line.startswith("node-hot ")]
    assert hot_row.split()[1:2] == ["1"] and "oversubscribed" in hot_row  # N = 1: pinned

    result = oversub(
        ["merge", str(calm), str(hot), "--format", "json", "--fail-on", "oversubscribed"]
    )
    assert result.returncode == ExitStatus.FOUND
    doc = json.loads(result.stdout)
    assert (doc["verdict"], doc["failing_nodes"], doc["job"]) == (
        "oversubscribed",
        ["node-hot"],
        "SLURM_JOB_ID=4242",
    )
    assert [n["node"] for n in doc["nodes"]] == ["node-calm", "node-hot"]
    assert "oversubscribed-threads" in {r["rule"] for r in doc["rules"]}
