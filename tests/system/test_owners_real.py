"""Thread owners read from a real process (`probe.owners`): a worker that never blocks is
named by the code that started it, read from the top of its stack while it runs.

The process runs one pure-Python thread that spins without a pause (it never blocks, so its
`syscall` file always says "running" and no blocked PC names it) beside a main thread that
waits. The Python interpreter started that thread: its owner must be "python", read while it
runs. Linux x86-64 with glibc only (the layout `probe.startroutine` reads).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

from oversub.core.samples import ThreadSample
from oversub.probe.owners import OwnerReader
from tests.support.harness import Spawner, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc",
        reason="the start routine is read for glibc on x86-64",
    ),
]

SPINNER = """
import threading, time
def spin():
    n = 0
    while True:
        n += 1
t = threading.Thread(target=spin, daemon=True)
t.start()
print(t.native_id, flush=True)
time.sleep(600)
"""


def threads_of(pid: int) -> tuple[ThreadSample, ...]:
    out = []
    for name in os.listdir(f"/proc/{pid}/task"):
        stat = Path(f"/proc/{pid}/task/{name}/stat").read_text()
        out.append(ThreadSample(int(name), stat[stat.rfind(")") + 2], 0, 0, 0, 0))
    return tuple(out)


def test_a_worker_that_never_blocks_is_named_by_its_start_routine(spawn: Spawner) -> None:
    proc = spawn([sys.executable, "-c", SPINNER], stdout=-1, text=True)
    assert proc.stdout is not None
    worker = int(proc.stdout.readline())
    syscall = Path(f"/proc/{proc.pid}/task/{worker}/syscall")
    wait_until(lambda: syscall.read_text().startswith("running"), what="the worker runs")
    start = int(Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    owners = OwnerReader().read(proc.pid, start, threads_of(proc.pid))
    assert owners == {proc.pid: "python", worker: "python"}
