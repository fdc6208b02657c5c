"""`oversub run --procs auto -- python job.py` against the library's own fix (issue 42).

Each workload runs unchanged under `oversub run`, and with the fix its docs give (the
variable or the knob at floor(N/M), `--fix` for the DataLoader jobs), paired and alternated
(fix, run, fix, run, fix, run); the fix runs under `oversub check`, the same sampling loop.
For every run the test samples the tree itself: each thread's /proc/PID/task/TID/schedstat
(running + waiting ns) gives the runnable threads per second, independently of oversub.
Asserted: the cure keeps the runnable threads at N (within oversub's margin) where the fix
does, oversub's closing verdict is not oversubscribed, and the best run's throughput is at
least 0.9 of the best fix's. Other load on a shared machine only ever lowers a throughput,
and a burst of it landed on some pairs and not others (numexpr's paired ratios 0.62, 0.62,
1.17, 0.61, 1.14 at a load average of 4): the best of each side is what its setting allows,
as a benchmark takes the fastest run. Such a burst also raises a run's runnable threads (a
thread that works, then waits for its pool, spends longer runnable when others hold the
CPUs: polars' 3.99 in a run at 27 ops/s against 3.37-3.42 in the others, at a load average
of 4), so the runnable threads are judged by their median over the runs. The median of the
paired ratios is reported beside the best. Figures go to the terminal summary
(docs/workloads.md).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.harness import OVERSUB
from tests.system.real.workloads import (
    PROCS,
    VCPUS,
    WORKLOAD_S,
    example,
    reaped,
    recommended_env,
)

pytestmark = pytest.mark.real

PAIRS = 3
"""Three pairs: the best of three per side, and a median that one burst of load cannot move."""
MARGIN = 0.15
"""oversub's default margin: demand may exceed N by this fraction (measurement noise)."""
T = max(1, VCPUS // PROCS)


class Runnable:
    """The tree's runnable threads per second, from each thread's schedstat, sampled every
    0.5 s by a thread of the test while the tree runs."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.rates: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def reading(self) -> dict[tuple[int, int], int]:
        out: dict[tuple[int, int], int] = {}
        try:
            procs = [psutil.Process(self.root), *psutil.Process(self.root).children(True)]
        except psutil.Error:
            return out
        for p in procs:
            try:
                tids = os.listdir(f"/proc/{p.pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{p.pid}/task/{tid}/schedstat") as f:
                        run, wait, _ = f.read().split()
                except (OSError, ValueError):
                    continue
                out[(p.pid, int(tid))] = int(run) + int(wait)
        return out

    def loop(self) -> None:
        before, t0 = self.reading(), time.monotonic()
        while not self.stop.wait(0.5):
            now, t1 = self.reading(), time.monotonic()
            ns = sum(v - before[k] for k, v in now.items() if k in before)
            self.rates.append(ns / 1e9 / (t1 - t0))
            before, t0 = now, t1

    def result(self) -> float:
        self.stop.set()
        self.thread.join()
        steady = self.rates[4:-2] or self.rates  # not the imports, not the exit
        return statistics.mean(steady) if steady else 0.0


def measured(args: list[str], metric: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    full = {**os.environ, **(env or {})}
    with reaped(args, env=full) as tree:
        sampler = Runnable(tree.proc.pid)
        stdout, stderr = tree.communicate(timeout=WORKLOAD_S + 240)
        runnable = sampler.result()
    assert tree.proc.returncode in (0, 1), f"{args}\n{stdout}\n{stderr}"  # check: 1 = FAIL
    value = [float(m) for m in re.findall(rf"^{metric}=([0-9.]+)$", stdout, re.M)][-1]
    return {"value": value, "runnable": runnable, "stderr": stderr}


def cured(command: list[str], metric: str) -> dict[str, Any]:
    out = measured([*OVERSUB, "run", "--procs", "auto", "--", *command], metric)
    closing = out["stderr"].strip().splitlines()[-1]
    assert closing.startswith("oversub run: "), out["stderr"]
    out["verdict"] = closing.removeprefix("oversub run: ").split(":", 1)[0]
    return out


def checked(command: list[str], metric: str, env: dict[str, str] | None) -> dict[str, Any]:
    """The fix, under `oversub check`: the same sampling loop as `run` (the ratio compares
    the settings, not oversub's own cost on a 2-vCPU machine)."""
    out = measured([*OVERSUB, "check", "--", *command], metric, env)
    found = re.findall(r"verdict ([a-z-]+)", out["stderr"])
    out["verdict"] = found[-1] if found else None
    return out


def compare(
    figure: Any,
    label: str,
    command: list[str],
    fixed: list[str],
    metric: str,
    env: dict[str, str] | None = None,
) -> None:
    fixes, runs = [], []
    for _ in range(PAIRS):
        fixes.append(checked(fixed, metric, env))
        runs.append(cured(command, metric))
    ratios = [r["value"] / f["value"] for r, f in zip(runs, fixes, strict=True)]
    figure(f"{label} fix {metric}", " ".join(f"{f['value']:.1f}" for f in fixes))
    figure(f"{label} run {metric}", " ".join(f"{r['value']:.1f}" for r in runs))
    best = max(r["value"] for r in runs) / max(f["value"] for f in fixes)
    figure(f"{label} run/fix median", f"{statistics.median(ratios):.3f}")
    figure(f"{label} best run/best fix", f"{best:.3f}")
    figure(f"{label} runnable fix", " ".join(f"{f['runnable']:.2f}" for f in fixes))
    figure(f"{label} runnable run", " ".join(f"{r['runnable']:.2f}" for r in runs))
    figure(f"{label} run verdicts", " ".join(r["verdict"] for r in runs))
    figure(f"{label} fix verdicts", " ".join(str(f["verdict"]) for f in fixes))
    # The cure does what the fix does: N runnable threads at most, unless the job's shape is
    # above N even with the fix (2 ranks and 4 workers on 2 vCPUs; polars' waiting caller).
    ceiling = max(VCPUS * (1 + MARGIN), max(f["runnable"] for f in fixes) * 1.1)
    assert statistics.median(r["runnable"] for r in runs) <= ceiling, (label, runs, fixes)
    fix_over = any(f["verdict"] == "oversubscribed" for f in fixes)
    for r in runs:
        assert fix_over or r["verdict"] != "oversubscribed", r["stderr"]
        assert "escaped" not in r["stderr"], r["stderr"]
    assert best >= 0.9, (label, best, ratios)


def test_numpy_processes(figure: Any) -> None:
    job = example("numpy_matmul.py", "--procs", str(PROCS), "--seconds", str(WORKLOAD_S))
    compare(figure, "numpy", job, job, "matmuls_per_s", env=recommended_env(PROCS))


@pytest.mark.parametrize(
    ("name", "knob"),
    [
        ("pyarrow", "OMP_NUM_THREADS"),
        ("numexpr", "NUMEXPR_NUM_THREADS"),
        ("polars", "POLARS_MAX_THREADS"),
        ("numba", "NUMBA_NUM_THREADS"),
        ("onnxruntime", ""),
    ],
)
def test_runtimes(figure: Any, name: str, knob: str) -> None:
    job = example("runtimes.py", name, "--procs", str(PROCS), "--seconds", str(WORKLOAD_S))
    if knob:
        compare(figure, name, job, job, "ops_per_s", env={knob: str(T)})
    else:
        compare(figure, name, job, [*job, "--intra-op", str(T)], "ops_per_s")


def test_dataloader_with_numpy_workers(figure: Any) -> None:
    job = example("dataloader_numpy.py", "--seconds", str(WORKLOAD_S))
    compare(figure, "dataloader", job, [*job, "--fix"], "steps_per_s")


@pytest.mark.parametrize("workers", ["fork", "spawn"])
def test_three_levels(figure: Any, workers: str) -> None:
    job = example("three_level.py", "--worker-method", workers, "--seconds", str(WORKLOAD_S))
    # On 2 vCPUs, 2 ranks and 4 workers are more processes than CPUs at 1 thread each.
    compare(figure, f"three levels ({workers})", job, [*job, "--fix"], "steps_per_s")


def test_a_setting_in_the_programs_code_is_kept_and_reported(tmp_path: Path) -> None:
    job = example("runtimes.py", "onnxruntime", "--procs", str(PROCS), "--seconds", "3")
    done = subprocess.run(
        [*OVERSUB, "run", "--", *job, "--intra-op", str(T + 1)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    kept = [line for line in done.stderr.splitlines() if line.startswith("oversub run: kept: ")]
    assert kept and all("ONNX Runtime" in line for line in kept), done.stderr
    # The hook's record of the setting; with T + 1 threads the tree may be oversubscribed,
    # and the pool sampling saw above the plan is then a second kept line, the program's.
    hooked = f": SessionOptions.intra_op_num_threads {T + 1} in pid"
    assert any(hooked in line for line in kept), done.stderr
    assert not [line for line in done.stderr.splitlines() if "escaped" in line], done.stderr
