"""The identity every JSON report carries: the node's name and the launcher's ids, read from
oversub's own environment through an allow-list, each value checked for its form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oversub.analysis.launcher import IDENTITY_VARS, launcher_identity
from oversub.cli.identity import read_identity
from oversub.core.errors import UsageError
from oversub.core.origin import NodeIdentity
from oversub.probe.nodename import MAX_NODE, node_name
from oversub.render import WatchFormat, render_watch_summary
from oversub.render.serialize import identity_dict
from tests.support.builders import make_summary
from tests.support.harness import run_cli

SLURM = {
    "SLURM_JOB_ID": "812345",
    "SLURM_STEP_ID": "0",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NNODES": "2",
    "SLURMD_NODENAME": "gpu-07",
    "SLURM_JOB_NODELIST": "gpu-[06-07],cpu01",
}
TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job-42",
    "RANK": "5",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
}
MPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "PMI_RANK": "3",
    "PMI_SIZE": "4",
    "MPI_LOCALRANKID": "1",
}


@pytest.mark.parametrize("env", [SLURM, TORCHRUN, MPI, {**SLURM, **TORCHRUN}])
def test_launcher_ids_are_kept(env: dict[str, str]) -> None:
    assert launcher_identity({**env, "HOME": "/root"}) == env


def test_order_is_the_allow_lists() -> None:
    found = launcher_identity({**TORCHRUN, **SLURM})
    assert list(found) == [name for name in IDENTITY_VARS if name in found]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLURM_JOB_ID", ""),
        ("SLURM_JOB_ID", "12a"),
        ("SLURM_JOB_ID", " 12"),
        ("SLURM_JOB_ID", "12\n"),
        ("SLURM_JOB_ID", "1" * 11),
        ("SLURM_JOB_ID", "١٢"),  # Arabic-Indic digits: str.isdigit() takes them
        ("RANK", "-1"),
        ("SLURM_STEP_ID", "x" * 65),
        ("SLURM_STEP_ID", "-rf"),
        ("SLURMD_NODENAME", "a b"),
        ("SLURMD_NODENAME", "node\x1b[2J"),
        ("SLURM_JOB_NODELIST", "n" * 257),
        ("SLURM_JOB_NODELIST", "n[1-2];rm"),
        ("TORCHELASTIC_RUN_ID", "id$(id)"),
    ],
)
def test_malformed_values_are_left_out(name: str, value: str) -> None:
    assert launcher_identity({name: value}) == {}


def test_only_allow_listed_names() -> None:
    env = {
        "SLURM_JOB_NAME": "secret",
        "SLURM_JOB_ACCOUNT": "secret",
        "MASTER_ADDR": "10.0.0.1",
        "OMPI_MCA_secret": "1",
        "PMI_FD": "3",
        "rank": "1",
    }
    assert launcher_identity(env) == {}


def test_non_string_values_from_a_file_are_left_out() -> None:
    assert launcher_identity({"RANK": 1, "WORLD_SIZE": None, "LOCAL_RANK": ["0"]}) == {}


def test_node_name_is_the_host_name_unless_overridden() -> None:
    assert node_name({}, hostname="gpu-07") == "gpu-07"
    assert node_name({"OVERSUB_NODE": ""}, hostname="gpu-07") == "gpu-07"
    assert node_name({"OVERSUB_NODE": "rank0.example"}, hostname="x") == "rank0.example"
    assert node_name({}, hostname="") == "unknown"
    assert node_name({}, hostname="h" * 500) == "h" * MAX_NODE
    assert node_name({}) != ""  # the kernel's


@pytest.mark.parametrize(
    "value", ["a b", "-rf", "node\n", "x\x1b[2J", "n" * (MAX_NODE + 1), "nœud", "a/b"]
)
def test_a_bad_override_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError) as raised:
        node_name({"OVERSUB_NODE": value}, hostname="h")
    message = str(raised.value)
    assert message.startswith("OVERSUB_NODE=") and "\n" not in message
    assert len(message) < 200


def test_read_identity() -> None:
    identity = read_identity({"OVERSUB_NODE": "n1", **SLURM, "SECRET": "x"})
    assert identity == NodeIdentity(node="n1", launcher_env=SLURM)
    assert identity_dict(identity) == {"node": "n1", "launcher_env": SLURM}


def test_watch_json_formats_end_with_the_identity() -> None:
    summary = make_summary()
    identity = NodeIdentity(node="n1", launcher_env={"RANK": "0"})
    doc = json.loads(str(render_watch_summary(summary, WatchFormat.JSON, identity=identity)))
    assert (doc["node"], doc["launcher_env"]) == ("n1", {"RANK": "0"})
    assert list(doc)[-2:] == ["node", "launcher_env"]
    line = render_watch_summary(summary, WatchFormat.NDJSON, timestamp="t", identity=identity)
    record = json.loads(str(line))
    assert (record["type"], record["node"]) == ("summary", "n1")
    without = json.loads(str(render_watch_summary(summary, WatchFormat.JSON)))
    assert "node" not in without  # the keys before them are unchanged
    assert list(without) == list(doc)[:-2]


def test_check_json_carries_the_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in IDENTITY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OVERSUB_NODE", "node-a")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("RANK", "not-a-rank")
    report = tmp_path / "r.json"
    argv = ["check", "--procs", "1", "--threads", "1", "--cpus", "2", "--json", str(report)]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    doc = json.loads(report.read_text())
    assert (doc["node"], doc["launcher_env"]) == ("node-a", {"SLURM_JOB_ID": "77"})
    assert list(doc)[-2:] == ["node", "launcher_env"]


def test_a_bad_override_stops_check_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OVERSUB_NODE", "bad node\x1b[2J")
    report = tmp_path / "r.json"
    code, out, err = run_cli(["check", "--json", str(report), "--", "true"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("oversub: error: OVERSUB_NODE=") and err.count("\n") == 1
    assert "\x1b" not in err and not report.exists()
    code, _, err = run_cli(["watch", "1", "--once", "--format", "json"], capsys)
    assert code == 2 and "OVERSUB_NODE" in err
