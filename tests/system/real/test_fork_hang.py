"""Fork after OpenMP: `oversub watch` on the hung job must name the hung workers.

examples/fork_after_openmp.py runs an OpenMP region in the parent, forks workers, and they
block forever in their first parallel op (one thread, asleep, 0% CPU). The test waits for
the workers to exist, watches the tree for longer than the idle threshold, and expects a
fork-hang finding naming exactly the workers the example printed.
"""

from __future__ import annotations

import json
import re
import select
import subprocess
import time
from typing import IO

import pytest

from tests.system.real.workloads import OVERSUB, PROCS, example, reaped

pytestmark = pytest.mark.real

# Longer than oversub's default --idle-seconds (3 s), so a hang has time to qualify.
WATCH_S = 6.0
# How long the example keeps its hung workers before killing them itself: longer than any
# watch, since the test kills the whole tree anyway.
HANG_S = 120.0


def read_line(stream: IO[str], timeout: float) -> str:
    """The next line of stream, or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 0.5)
        if ready:
            return stream.readline()
    pytest.fail(f"no output within {timeout:g} s")


def test_watch_names_the_hung_workers() -> None:
    command = example("fork_after_openmp.py", "--workers", str(PROCS), "--seconds", str(HANG_S))
    with reaped(command) as job:
        assert job.proc.stdout is not None
        first = read_line(job.proc.stdout, timeout=60)
        match = re.match(r"parent pid=(\d+) threads=(\d+) workers=([\d,]+)", first)
        assert match, f"unexpected first line: {first!r}"
        workers = {int(pid) for pid in match.group(3).split(",")}
        assert len(workers) == PROCS

        watch = subprocess.run(
            [*OVERSUB, "watch", str(job.proc.pid), "--format", "json", "--duration", str(WATCH_S)],
            capture_output=True,
            text=True,
            timeout=WATCH_S + 60,
        )
        # The workers must still be there: a watch of a tree that already ended proves nothing.
        assert job.proc.poll() is None, "the example ended before the watch did"

    assert watch.returncode == 0, watch.stderr
    summary = json.loads(watch.stdout)
    hangs = [f for f in summary["findings"] if f["rule"] == "fork-hang"]
    assert len(hangs) == 1, json.dumps(summary["findings"], indent=1)
    assert set(hangs[0]["pids"]) == workers, hangs[0]
    assert hangs[0]["severity"] == "critical"
    assert "spawn" in hangs[0]["fix"]
    assert summary["verdict"] in {"at-risk", "starved", "oversubscribed"}, summary["verdict"]
