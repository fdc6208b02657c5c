"""`oversub doctor` on the real libraries of `make test-real`: the thread count it reports
for each runtime under a 1-CPU quota and on the host is the one the runtime really starts,
counted independently here (a plain child that lists `/proc/self/task` before the import and
after the operation, started under the same budget), and what it says each follows is what
those counts show: OpenBLAS, torch and Arrow follow affinity and ignore a quota, polars
follows its N, ONNX Runtime and numexpr the machine's CPUs.

Needs root (a cgroup with a CPU quota) and 2 vCPUs or more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from oversub.core.checkups import CHECKUPS, CHECKUPS_BY_KEY
from oversub.probe import poolstart
from tests.support.cgroup_sandbox import quota_cgroup

pytestmark = [pytest.mark.real, pytest.mark.integration]

RUNTIMES = ("numpy", "torch", "polars", "pyarrow", "onnxruntime", "numexpr")
FOLLOWS = {
    "numpy": ("affinity", True),
    "torch": ("affinity", True),
    "pyarrow": ("affinity", True),
    "polars": ("affinity+quota", False),
    "onnxruntime": ("cores", True),
    "numexpr": ("cores", True),
}
"""sized_from and ignores_quota measured on this machine (docs/cli.md, `oversub doctor`)."""

COUNT = """
import importlib, importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("poolstart", {probe!r})
poolstart = importlib.util.module_from_spec(spec)
spec.loader.exec_module(poolstart)
check = json.loads(sys.argv[1])
for need in check["needs"]:
    if importlib.util.find_spec(need.split(".")[0]) is not None:
        importlib.import_module(need)
before = set(os.listdir("/proc/self/task"))
module = importlib.import_module(check["module"])
step, _ = poolstart.OPERATIONS[check["key"]](module)
step()
time.sleep(0.2)
new = set(os.listdir("/proc/self/task")) - before
print(len([t for t in new if open(f"/proc/self/task/{{t}}/comm").read() != "jemalloc_bg_thd\\n"]))
"""


def own_count(key: str, cgroup: str | None = None) -> int:
    """New threads of the runtime, counted by the child itself, in `cgroup` if given."""
    check = CHECKUPS_BY_KEY[key]
    spec = json.dumps({"key": key, "module": check.module, "needs": list(check.needs)})
    code = COUNT.format(probe=poolstart.__file__)
    argv = [sys.executable, "-c", code, spec]
    if cgroup is not None:
        argv = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    return int(done.stdout.strip().splitlines()[-1])


def doctor(*args: str) -> dict[str, Any]:
    only = [a for key in RUNTIMES for a in ("-r", key)]
    done = subprocess.run(
        [sys.executable, "-m", "oversub", "doctor", *only, "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")},
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.fixture(scope="module")
def under_one_cpu() -> dict[str, Any]:
    if os.geteuid() != 0:
        pytest.skip("a CPU quota needs a cgroup: root")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs or more")
    return doctor("--cpus", "1")


def _total(runtime: dict[str, Any], kind: str) -> int:
    """The threads of pools doctor counted (jemalloc's background threads, whose number
    depends on which threads happened to allocate, are no pool's)."""
    m = next(m for m in runtime["measurements"] if m["kind"] == kind)
    assert m["status"] == "measured", m
    assert m["threads"] == sum(
        n for o, n in m["started"].items() if o not in ("jemalloc", "python")
    )
    return int(m["threads"])


@pytest.mark.parametrize("key", RUNTIMES)
def test_the_counts_are_what_the_runtime_starts(under_one_cpu: dict[str, Any], key: str) -> None:
    runtime = next(r for r in under_one_cpu["runtimes"] if r["runtime"] == key)
    assert runtime["installed"], key
    with quota_cgroup(1.0) as (_mount, directory, _inner):
        assert _total(runtime, "budget") == own_count(key, directory)
    assert _total(runtime, "host") == own_count(key)


@pytest.mark.parametrize("key", RUNTIMES)
def test_what_each_follows(under_one_cpu: dict[str, Any], key: str) -> None:
    runtime = next(r for r in under_one_cpu["runtimes"] if r["runtime"] == key)
    assert (runtime["sized_from"], runtime["ignores_quota"]) == FOLLOWS[key]
    budget = next(m for m in runtime["measurements"] if m["kind"] == "budget")
    assert (budget["vcpus"], budget["quota_cpus"]) == (1, 1.0)
    # M = N = 1: every runtime that runs more than one thread at once oversubscribes
    assert runtime["oversubscribes"] is (runtime["width"] > 1)


def test_every_installed_runtime_is_listed(under_one_cpu: dict[str, Any]) -> None:
    assert under_one_cpu["vcpus"] == 1 and under_one_cpu["procs"] == 1
    listed = [r["runtime"] for r in under_one_cpu["runtimes"] if r["installed"]]
    assert listed == [c.key for c in CHECKUPS if c.key in RUNTIMES]
