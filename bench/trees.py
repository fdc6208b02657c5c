"""Synthetic process trees for the benchmarks: PROCS processes of THREADS idle threads each.

The root is one Python process started in its own session; it forks the other members
before it starts any thread (forking a threaded process is unsafe), so 250 members start in
well under a second instead of paying 250 interpreter start-ups. Every member starts its
idle threads (the cost of sampling depends on how many threads there are, not on what they
do, and busy threads would only add noise on a small shared machine) and then writes its pid
to a "ready" pipe; `tree()` returns once every member has done so.

Clean-up is belt and braces: leaving `tree()` (normally, on an exception or on Ctrl-C)
SIGKILLs the whole process group; and every member's main thread blocks on reading an
"alive" pipe whose only write end this process holds, so even if the benchmark itself is
SIGKILLed the members see end-of-file and exit.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from oversub.run.stopsignals import interrupt as stop_signals_interrupt

__all__ = ["INTERRUPTED", "Tree", "print_until_stopped", "tree"]

INTERRUPTED = "interrupted: every process the benchmark started has been stopped"

# argv: procs, threads, ready fd (write end), alive fd (read end).
_ROOT = r"""
import os, struct, sys, threading
procs, threads, ready, alive = (int(a) for a in sys.argv[1:5])

def member():
    for _ in range(threads - 1):
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    os.write(ready, struct.pack("i", os.getpid()))
    os.read(alive, 1)  # returns b"" once the benchmark closes its end (or dies)
    os._exit(0)

for _ in range(procs - 1):
    if os.fork() == 0:
        member()
member()
"""


@dataclass(frozen=True)
class Tree:
    """A running synthetic tree."""

    root_pid: int
    pids: tuple[int, ...]
    """Every member, the root first."""
    threads: int
    """Threads counted in /proc once every member said it was ready."""

    @property
    def procs(self) -> int:
        return len(self.pids)


def _count_threads(pids: tuple[int, ...]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{pid}/task"))
    return total


def _read_pids(fd: int, count: int, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    buf = b""
    while len(buf) < 4 * count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"only {len(buf) // 4} of {count} tree processes started")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4 * count - len(buf))
            if not chunk:
                raise RuntimeError("the tree's root exited before every member was up")
            buf += chunk
    return [pid for (pid,) in struct.iter_unpack("i", buf)]


@contextlib.contextmanager
def tree(procs: int, threads: int, timeout_s: float = 60.0) -> Iterator[Tree]:
    """Start a tree of `procs` processes x `threads` threads; kill all of it on exit."""
    ready_r, ready_w = os.pipe()
    alive_r, alive_w = os.pipe()
    root: subprocess.Popen[bytes] | None = None
    try:
        argv = [sys.executable, "-c", _ROOT, str(procs), str(threads), str(ready_w), str(alive_r)]
        root = subprocess.Popen(argv, pass_fds=(ready_w, alive_r), start_new_session=True)
        os.close(ready_w)
        os.close(alive_r)
        ready_w = alive_r = -1
        pids = _read_pids(ready_r, procs, timeout_s)
        pids.sort(key=lambda pid: pid != root.pid)
        members = tuple(pids)
        yield Tree(root_pid=root.pid, pids=members, threads=_count_threads(members))
    finally:
        for fd in (ready_r, ready_w, alive_r, alive_w):
            if fd >= 0:
                os.close(fd)
        if root is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(root.pid, signal.SIGKILL)
            root.wait()


def print_until_stopped(measure: Callable[[], Iterable[str]]) -> int:
    """Run `measure` and print each text it yields; 130 with a line on stderr when the run
    is stopped (Ctrl-C, SIGTERM, SIGHUP raise KeyboardInterrupt inside, so every tree's
    `finally` clean-up runs first). A callable, so that all the measuring happens inside."""
    try:
        with stop_signals_interrupt():
            for text in measure():
                print(text, flush=True)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    return 0
