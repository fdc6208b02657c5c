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

from tests.support.cgroup_sandbox import pinned_cgroup, quota_cgroup, write
from tests.support.harness import OVERSUB, Spawner, busy_workers, wait_until

pytestmark = pytest.mark.integration

AFFINITY = sorted(os.sched_getaffinity(0))


def _start(spawn: Spawner, joins: list[str], procs: int, threads: int) -> subprocess.Popen[Any]:
    """`oversub stress` whose shell joins the cgroup before exec, so the whole tree is in it."""
    join = " && ".join(f"echo $$ > {path}" for path in joins)
    script = (
        f'{join} && exec "$0" -m oversub stress --procs {procs} --threads {threads} --seconds 90 '
        "--mode hash"
    )
    return spawn(
        ["sh", "-c", script, sys.executable], stderr=subprocess.DEVNULL, start_new_session=True
    )


def _launch(args: list[str], cpu: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*OVERSUB, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )


def _result(run: subprocess.Popen[str]) -> Any:
    try:
        out, err = run.communicate(timeout=90)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 0, err
    return json.loads(out)


def _set_quota(version: int, directory: str, cpus: float) -> None:
    period = 100_000
    if version == 1:
        write(os.path.join(directory, "cpu.cfs_quota_us"), str(round(cpus * period)))
    else:
        write(os.path.join(directory, "cpu.max"), f"{round(cpus * period)} {period}")


def _oversub(args: list[str], cpu: int) -> Any:
    return _result(_launch(args, cpu))


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


def test_cgroup_and_all_agree_on_one_cgroup_under_outside_load(spawn: Spawner) -> None:
    """`watch --cgroup` and `watch --all` side by side on the same cgroup over the same
    interval, 6 times, with a busy loop outside it: 2 processes x 2 busy threads under a
    CPU quota of 1 % of a CPU, so each process runs a few milliseconds per interval, less
    than one clock tick in most, while its threads wait all the time. Node mode once reused
    such a process's reading (no tick moved) and lost its waiting: the cgroup --cgroup
    judged oversubscribed was starved, or not seen, for --all, in 2 runs of 3 (6 runs all
    agree by chance 1 time in 700; the fake-/proc test of the rule fails every time)."""
    judged = ["--duration", "3", "--interval", "0.5", "--format", "json"]
    # The tree starts under a whole CPU (Python's start-up at 1 % would take half a minute)
    # and is stopped under it again (a killed process must run to exit).
    with quota_cgroup(1.0) as (mount, directory, _):
        busy = mount.root.rstrip("/") + directory[len(mount.mount_point) :]
        job = _start(spawn, [os.path.join(directory, "cgroup.procs")], 2, 2)
        outside = spawn(
            [*OVERSUB, "stress", "-M", "1", "-T", "1", "-S", "120", "--mode", "hash"],
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        runs = []
        try:
            wait_until(lambda: busy_workers(job.pid, 2, 2), what="the oversubscribed tree")
            wait_until(lambda: busy_workers(outside.pid, 1, 1), what="the busy loop outside")
            _set_quota(mount.version, directory, 0.01)
            for _ in range(6):
                one = _launch(["watch", "--cgroup", busy, *judged], AFFINITY[-1])
                node = _launch(["watch", "--all", *judged], AFFINITY[-1])
                alone, everything = _result(one), _result(node)
                seen = {t["cgroup"]: t for t in everything["targets"]}.get(busy)
                runs.append(
                    (
                        alone["verdict"],
                        alone["totals"]["demand"],
                        None if seen is None else seen["verdict"],
                        None if seen is None else seen["totals"]["demand"],
                    )
                )
        finally:
            _set_quota(mount.version, directory, 1.0)
            for proc in (job, outside):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    # (verdict, demand) of --cgroup, then of --all, per run.
    print(runs)
    assert [r for r in runs if r[0] != r[2]] == [], runs
    assert all(r[0] == "oversubscribed" for r in runs), runs
    # The same demand too, within what two runs a few milliseconds apart differ by (20 % at
    # most in 30 measured pairs; node mode's reuse lost 40-75 % of it).
    assert all(abs(r[3] - r[1]) <= 0.35 * r[1] for r in runs), runs
