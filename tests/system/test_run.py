"""`oversub run` on real process trees without the real libraries: who the hook could not
reach is named, and a failing hook leaves the program running (tests/system/real/test_run.py
has the libraries)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oversub.probe.budget import read_budget
from tests.support.harness import LAUNCHER_VARS, OVERSUB

pytestmark = pytest.mark.integration


def test_a_python_with_capital_i_and_a_shell_are_reported(tmp_path: Path) -> None:
    job = tmp_path / "job.sh"
    job.write_text(
        f"{sys.executable} -I -c 'import time; time.sleep(3)' &\n"
        f"{sys.executable} -c 'import time; time.sleep(3)' &\n"
        "sleep 3; wait\n"
    )
    done = subprocess.run(
        [*OVERSUB, "run", "--", "sh", str(job)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    [unreached] = [line for line in lines if "not reached by the hook" in line]
    assert "-I" in unreached and "ignores PYTHONPATH" in unreached, unreached
    [other] = [line for line in lines if "the thread variables only (not Python)" in line]
    assert "(sh " in other and "(sleep" in other, other
    # The Python without -I ran the hook (it imported no library, so it sized nothing):
    # only the other one is named.
    assert unreached.count(" -I ") == 1 and "pid " in unreached and "pids " not in unreached


def test_a_broken_plan_or_hook_never_stops_the_program(tmp_path: Path) -> None:
    done = subprocess.run(
        [*OVERSUB, "run", "--", sys.executable, "-c", "import os; print(os.environ['X'])"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "X": "through", "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0 and done.stdout == "through\n", done.stderr


def test_stress_workers_that_import_no_library_get_their_share(tmp_path: Path) -> None:
    # Each spawned worker of `oversub stress` sizes its team from its own OMP_NUM_THREADS and
    # imports nothing the hook watches: it decides its share when its target starts.
    n, procs = read_budget().vcpus, 2
    if n < procs:
        pytest.skip(f"{procs} processes on {n} vCPU: more processes than CPUs")
    share = n // procs
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    for name in LAUNCHER_VARS:
        env.pop(name, None)
    stress = [*OVERSUB, "stress", "--procs", str(procs), "--seconds", "8"]
    done = subprocess.run(
        [*OVERSUB, "run", "--procs", "auto", "--", *stress],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    teams = re.findall(r"by (\d+) processes x (\S+) team threads?", done.stdout)
    assert teams == [(str(procs), str(share))], done.stdout
    lines = done.stderr.splitlines()
    [team] = [line for line in lines if "oversub stress team" in line]
    assert team.startswith("oversub run: sized: "), done.stderr
    assert f"the plan {share} in pids " in team, team
    assert not [line for line in lines if "escaped" in line], done.stderr
    closing = lines[-1]
    assert closing.startswith("oversub run: ") and "exit 0" in closing, done.stderr
    assert not closing.startswith("oversub run: oversubscribed"), done.stderr


def test_a_child_that_decided_no_share_is_not_said_to_have_a_plan(tmp_path: Path) -> None:
    # Children started with subprocess that import no library the hook sizes never decide
    # their share: each team took the OMP_NUM_THREADS it inherited (the root's N). The
    # verification said "sized: ... the plan N" for them; they had no plan of their own.
    n = read_budget().vcpus
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    for name in LAUNCHER_VARS:
        env.pop(name, None)
    child = (
        "import os, time; from oversub.run.stressload import stress_worker; "
        "stress_worker(int(os.environ['OMP_NUM_THREADS']), 0, time.monotonic() + 3, "
        "os.getppid(), 'team')"
    )
    job = tmp_path / "job.py"
    job.write_text(
        "import subprocess, sys\n"
        f"children = [subprocess.Popen([sys.executable, '-c', {child!r}]) for _ in range(2)]\n"
        "sys.exit(max(c.wait() for c in children))\n"
    )
    done = subprocess.run(
        [*OVERSUB, "run", "--procs", "auto", "--", sys.executable, str(job)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    [team] = [line for line in done.stderr.splitlines() if "oversub stress team" in line]
    assert "the plan" not in team, team
    assert f"judged against its OMP_NUM_THREADS={n}" in team, team
    assert "its hook saw no library it sizes imported" in team, team
    assert re.match(r"oversub run: (no share of its own|escaped): ", team), team
