"""`oversub stress`: the workload's shape seen in /proc, and that it never leaves workers behind."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus
from oversub.run.stressload import run_stress

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

PROCS, THREADS, IDLE = 2, 2, 1
BANNER = re.compile(
    r"oversub stress: root pid (\d+) \((\d+) process(?:es)? x (\d+) busy threads?, (\d+) idle, "
    r"(\S+) s\)"
)


def stat_fields(path: str) -> list[str] | None:
    """Fields 3.. of a stat file (comm stripped), None when gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """Start time of a live (not zombie) process, None when it is gone."""
    fields = stat_fields(f"/proc/{pid}/stat")
    return None if fields is None or fields[0] in ("Z", "X") else int(fields[19])


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """tid -> CPU time consumed, for every thread of `pid` (schedstat, else utime+stime)."""
    cpu: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                cpu[int(tid)] = int(
                    Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]
                )
            except (OSError, IndexError):
                fields = stat_fields(f"/proc/{pid}/task/{tid}/stat")
                if fields is not None:
                    ticks = int(fields[11]) + int(fields[12])
                    cpu[int(tid)] = ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return cpu


def workers_of(root: int) -> list[int]:
    """Children of `root` started by multiprocessing's spawn (not its resource tracker)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(f"/proc/{name}/stat")
        if fields is None or int(fields[1]) != root or fields[0] == "Z":
            continue
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
    return sorted(found)


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


class StressRun:
    """`run_stress` in a child interpreter; on close, kills it and every worker it had."""

    def __init__(self, procs: int, threads: int, idle: int, seconds: float) -> None:
        code = (
            "import sys; from oversub.run.stressload import run_stress; "
            f"sys.exit(run_stress({procs}, {threads}, {idle}, {seconds}))"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stderr=subprocess.PIPE, text=True
        )
        self.workers: dict[int, int] = {}  # pid -> start ticks

    def wait_workers(self, count: int) -> list[int]:
        def started() -> bool:
            for pid in workers_of(self.process.pid):
                ticks = start_ticks(pid)
                if ticks is not None:
                    self.workers.setdefault(pid, ticks)
            return len(self.workers) >= count

        wait_for(started)
        return sorted(self.workers)

    def live_workers(self) -> set[int]:
        return {pid for pid, ticks in self.workers.items() if start_ticks(pid) == ticks}

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()
        for pid in self.live_workers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def stress() -> Iterator[Callable[[int, int, int, float], StressRun]]:
    runs: list[StressRun] = []

    def start(procs: int, threads: int, idle: int, seconds: float) -> StressRun:
        runs.append(StressRun(procs, threads, idle, seconds))
        return runs[-1]

    try:
        yield start
    finally:
        for run in runs:
            run.close()


@pytest.mark.integration
def test_workers_have_busy_and_idle_threads(
    stress: Callable[[int, int, int, float], StressRun],
) -> None:
    run = stress(PROCS, THREADS, IDLE, 120.0)
    workers = run.wait_workers(PROCS)
    assert len(workers) == PROCS
    wait_for(lambda: all(len(thread_cpu_ns(pid)) >= THREADS + IDLE + 1 for pid in workers))
    before = {pid: thread_cpu_ns(pid) for pid in workers}

    def shaped() -> bool:
        """Each worker: THREADS threads that used CPU (>= 20 ms each), IDLE that used next to
        none (< 1 ms: a thread still on its way into Event.wait when `before` was taken may
        use a few microseconds more)."""
        for pid in workers:
            now = thread_cpu_ns(pid)
            used = [now[tid] - before[pid].get(tid, 0) for tid in now]
            busy = sum(1 for ns in used if ns >= 20_000_000)
            idle = sum(1 for ns in used if ns < 1_000_000)
            if busy != THREADS or idle < IDLE:
                return False
        return True

    wait_for(shaped)
    assert run.process.poll() is None


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_stops_root_and_workers(
    stress: Callable[[int, int, int, float], StressRun], sig: signal.Signals
) -> None:
    run = stress(PROCS, THREADS, IDLE, 120.0)
    run.wait_workers(PROCS)
    run.process.send_signal(sig)
    # Every stop signal: run_stress returns 130, like every oversub command a signal stops.
    assert run.process.wait(timeout=30) == ExitStatus.INTERRUPTED
    assert run.live_workers() == set()
    assert "Traceback" not in (run.process.stderr.read() if run.process.stderr else "")


@pytest.mark.integration
def test_workers_exit_when_root_is_killed(
    stress: Callable[[int, int, int, float], StressRun],
) -> None:
    run = stress(PROCS, THREADS, IDLE, 120.0)
    run.wait_workers(PROCS)
    run.process.kill()  # no handler runs: the workers must notice on their own
    run.process.wait(timeout=30)
    wait_for(lambda: run.live_workers() == set())


@pytest.mark.integration
def test_finishes_after_seconds_with_status_zero(
    stress: Callable[[int, int, int, float], StressRun],
) -> None:
    run = stress(1, 1, 2, 0.5)
    _, err = run.process.communicate(timeout=60)
    assert run.process.returncode == 0
    match = BANNER.search(err)
    assert match is not None, err
    assert match.groups() == (str(run.process.pid), "1", "1", "2", "0.5")


@pytest.mark.parametrize(
    "args",
    [(0, 1, 0, 1.0), (1, -1, 0, 1.0), (1, 1, -1, 1.0), (1, 1, 0, 0.0), (1, 1, 0, float("nan"))],
)
def test_invalid_arguments_raise_before_anything_starts(
    args: tuple[int, int, int, float],
) -> None:
    stream = io.StringIO()
    with pytest.raises(ValueError):
        run_stress(*args, stderr=stream)
    assert stream.getvalue() == ""
