"""What oversubscription costs, measured by `oversub check` itself on the real libraries of
issue 41 (examples/libraries.py, PROCS processes at their default size): the finding's
severity follows the wait share of its busy threads sampled in this run (docs/rules.md,
"What oversubscription costs"): XGBoost's OpenMP team spins at its barrier (critical, the
CI gate fails), tokenizers' and faiss's threads work (a warning, the gate passes). And where
perf events are refused, the finding says "Cost not measured here" and why: another user's
processes watched without root, and `kernel.perf_event_paranoid` 3 where the kernel honours
it (set for the test and restored).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.core.pcprofile import SPIN_SHARE, PcProfile
from oversub.probe import perfpc
from tests.system.real.workloads import PROCS, ROOT, example, reaped, run_check

pytestmark = pytest.mark.real

SPINNING_AT_LEAST = SPIN_SHARE
"""The rule's own line (`core.pcprofile.SPIN_SHARE`): XGBoost's rounds have phases of real
work: one window of a run measured 0.41-0.96, the sum of a 10 s check's four windows
0.66-0.85 in five runs."""
WORKING_AT_MOST = 0.25
"""Measured 0.00-0.05 (docs/pools.md): a wide margin."""
RUN_S = "10"
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
STARTUP_S = 4.0


def _perf_usable() -> None:
    probe = perfpc.start(os.getpid(), [os.getpid()])
    if isinstance(probe, PcProfile):
        pytest.skip(f"perf events not usable here: {probe.why}")
    probe.close()


@pytest.mark.parametrize(
    ("library", "numpy", "severity", "cost", "exit_code"),
    [
        ("xgboost", False, "critical", "spin", 1),
        ("tokenizers", False, "warning", "work", 0),
        ("tokenizers", True, "warning", "work", 0),
        ("faiss", False, "warning", "work", 0),
    ],
)
def test_the_severity_is_the_cost_measured_in_this_run(
    tmp_path: Path,
    figure: Any,
    library: str,
    numpy: bool,
    severity: str,
    cost: str,
    exit_code: int,
) -> None:
    """`numpy`: every process imports NumPy first (a sitecustomize on PYTHONPATH), whose
    OpenBLAS pool sits idle beside the library's: the same finding as without it."""
    _perf_usable()
    env = None
    if numpy:
        (tmp_path / "sitecustomize.py").write_text("import numpy  # idle beside the pool\n")
        env = {"PYTHONPATH": str(tmp_path)}
    command = example("libraries.py", library, "--procs", str(PROCS), "--seconds", RUN_S)
    label = f"{library}-numpy" if numpy else library
    # A 10 s check takes four windows per process (at 0, 1, 3 and 7 s: `perfpc.GAPS_S`),
    # enough to see XGBoost's rounds both working and waiting: one run is judged.
    run = run_check(tmp_path, command, env_update=env, label=label)
    found = [f for f in run.summary["findings"] if f["verdict"] == "oversubscribed"]
    assert len(found) == 1, run.describe()
    f = found[0]
    share = f["evidence"]["wait_share"]
    figure(f"{label} wait share (oversub check)", share)
    if numpy:
        assert "OpenBLAS" in f["evidence"]["owners"] and "idle" in f["evidence"]["owners"], f
    assert (f["severity"], f["evidence"]["cost"]) == (severity, cost), f
    assert f["evidence"]["wait_samples"] >= 50, f
    if cost == "spin":
        assert share >= SPINNING_AT_LEAST and f["evidence"]["wait_runtime"] == "libgomp", f
        assert "Measured here" in f["message"] and "which is costly" in f["message"], f
    else:
        assert share <= WORKING_AT_MOST, f
        assert "on real work" in f["message"] and "costly" not in f["message"], f
    for borrowed in ("10.6x", "3-80x"):
        assert borrowed not in f["message"], f
    assert run.exit_code == exit_code, run.describe()


def _nobody_python() -> list[str]:
    """A Python that user nobody may run, with oversub and its dependencies on its path."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run oversub as another user")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if not system.exists():
        pytest.skip(f"no /usr/bin/{version} (the test venv's Python is not nobody's to run)")
    site = sysconfig.get_paths()["purelib"]
    return [
        "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
        "env", f"PYTHONPATH={ROOT}:{site}", "HOME=/tmp", str(system),
    ]  # fmt: skip


def test_another_users_processes_say_cost_not_measured() -> None:
    """oversub run by nobody on root's OpenBLAS workers: perf_event_open is refused (another
    user's process), and the finding says so instead of guessing a cost."""
    nobody = _nobody_python()
    command = example("numpy_matmul.py", "--procs", str(PROCS), "--seconds", "25")
    with reaped(command) as tree:
        time.sleep(STARTUP_S)  # the workers import NumPy and start their pools
        watch = [*nobody, "-m", "oversub", "watch", str(tree.proc.pid), "--duration", "6"]
        done = subprocess.run([*watch, "--format", "json"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report = json.loads(done.stdout)
    found = [f for f in report["findings"] if f["verdict"] == "oversubscribed"]
    assert len(found) == 1, report["findings"]
    f = found[0]
    assert f["evidence"]["cost"] == "unmeasured" and f["evidence"]["wait_share"] is None, f
    assert "Cost not measured here (not root, and process" in f["message"], f
    assert "another user's" in f["message"] and "oversub tune" in f["message"], f


@contextlib.contextmanager
def paranoid(level: int) -> Iterator[None]:
    """`kernel.perf_event_paranoid` at `level`, restored after."""
    try:
        before = PARANOID.read_text()
        PARANOID.write_text(f"{level}\n")
    except OSError as exc:
        pytest.skip(f"cannot set {PARANOID}: {exc}")
    try:
        yield
    finally:
        PARANOID.write_text(before)


PROBE = """
import os, sys, threading, time
from oversub.probe import perfpc
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
time.sleep(0.2)
tids = [int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")]
got = perfpc.start(os.getpid(), tids)
print(getattr(got, "unmeasured", None) or "measured", getattr(got, "why", ""), sep="|")
"""


def test_paranoid_3_says_why_where_the_kernel_honours_it() -> None:
    """Debian's kernels refuse perf events to users at level 3; others treat 3 as 2."""
    nobody = _nobody_python()
    with paranoid(3):
        done = subprocess.run([*nobody, "-c", PROBE], capture_output=True, timeout=60, text=True)
    assert done.returncode == 0, done.stderr
    kind, why = done.stdout.strip().split("|", 1)
    if kind == "measured":
        pytest.skip("this kernel treats perf_event_paranoid 3 as 2 (no Debian patch)")
    assert kind == "perf-paranoid", done.stdout
    assert "kernel.perf_event_paranoid is 3: perf events need CAP_PERFMON or root" in why
