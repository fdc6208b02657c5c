"""`watch --cgroup` and `watch --all` on a node with two real cgroups, each pinned to its own
CPU: one runs 2 processes x 2 busy threads on its one CPU (oversubscribed), the other one
busy thread on its one CPU (ok). Each is judged against its own budget, not oversub's.

oversub itself runs pinned to the first cgroup's CPU, and the healthy cgroup has the highest
CPU weight, so nothing else on the shared machine makes its thread wait (a busy loop pinned
beside it does not). The runs start after both workloads are up (judged windows we control).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.cgroup_sandbox import pinned_cgroup
from tests.harness import OVERSUB, Spawner, busy_workers, wait_until

pytestmark = pytest.mark.integration

AFFINITY = sorted(os.sched_getaffinity(0))


def _start(spawn: Spawner, joins: list[str], procs: int, threads: int) -> subprocess.Popen[Any]:
    """`oversub stress` whose shell joins the cgroup before exec, so the whole tree is in it."""
    join = " && ".join(f"echo $$ > {path}" for path in joins)
    script = (
        f'{join} && exec "$0" -m oversub stress --procs {procs} --threads {threads} --seconds 90'
    )
    return spawn(
        ["sh", "-c", script, sys.executable], stderr=subprocess.DEVNULL, start_new_session=True
    )


def _oversub(args: list[str], cpu: int) -> Any:
    out = subprocess.run(
        [*OVERSUB, *args],
        capture_output=True,
        text=True,
        timeout=90,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(len(AFFINITY) < 2, reason="two cgroups on their own CPUs need two CPUs")
def test_each_cgroup_is_judged_against_its_own_budget(spawn: Spawner) -> None:
    busy_cpu, calm_cpu = AFFINITY[0], AFFINITY[1]
    with (
        pinned_cgroup(busy_cpu) as (busy, busy_joins),
        pinned_cgroup(calm_cpu, favoured=True) as (calm, calm_joins),
    ):
        jobs = [_start(spawn, busy_joins, 2, 2), _start(spawn, calm_joins, 1, 1)]
        try:
            wait_until(lambda: busy_workers(jobs[0].pid, 2, 2), what="the oversubscribed tree")
            wait_until(lambda: busy_workers(jobs[1].pid, 1, 1), what="the healthy tree")
            judged = ["--duration", "3", "--interval", "0.5", "--format", "json"]
            one = {
                path: _oversub(["watch", "--cgroup", path, *judged], busy_cpu)
                for path in (busy, calm)
            }
            node = _oversub(["watch", "--all", *judged], busy_cpu)
        finally:
            for job in jobs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.pid, signal.SIGKILL)
                job.wait(timeout=10)

    # --cgroup: the cgroup's own budget (its cpuset: one CPU), every process in it.
    for path, doc in one.items():
        assert doc["budget"]["cgroup"] == path
        assert (doc["vcpus"], doc["budget"]["limited_by"]) == (1, "cpuset"), doc["budget"]
        assert doc["root_pid"] == 0
    assert one[busy]["verdict"] == "oversubscribed", one[busy]["findings"]
    assert one[busy]["totals"]["demand"] > 3.0
    assert {p["pid"] for p in one[busy]["processes"]} >= {jobs[0].pid}
    assert one[calm]["verdict"] == "ok", one[calm]["findings"]
    assert 0.5 < one[calm]["totals"]["demand"] < 1.5

    # --all: the same verdicts from one scan of the node, plus the node's totals.
    assert node["type"] == "node-summary"
    targets = {t["cgroup"]: t for t in node["targets"]}
    assert targets[busy]["verdict"] == "oversubscribed", targets[busy]["findings"]
    assert targets[calm]["verdict"] == "ok", targets[calm]["findings"]
    assert targets[busy]["vcpus"] == targets[calm]["vcpus"] == 1
    assert node["node"]["vcpus"] >= len(AFFINITY)
    assert node["node"]["totals"]["demand"] >= targets[busy]["totals"]["demand"]
