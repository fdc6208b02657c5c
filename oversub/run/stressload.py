"""`oversub stress`: a reproducible oversubscribed workload to point oversub at.

M worker processes each run T busy threads and K idle ones. A busy thread hashes a 1 MiB
buffer in a loop: hashlib releases the GIL for inputs above 2047 bytes, so the T threads
of one process really run in parallel, like the native thread pools (OpenMP, BLAS) that
oversubscribe real jobs. M*T > N gives a known amount of oversubscription: the measured
delay ratio follows 1 - N/(M*T) (docs/signals.md).

Workers are started with the "spawn" start method: forking a threaded parent is itself a
hazard oversub reports, and the stress tool must not commit it. Besides the workers,
multiprocessing starts its resource tracker, one sleeping single-thread child of the root.

Workers stop on their own at the deadline, and also as soon as their parent (the root, pid
printed on stderr) is gone, so killing the root with SIGKILL leaves nothing running.

SIGINT, SIGTERM and SIGHUP end the root like every oversub command (exit 130, workers
stopped and reaped). They stay pending while a worker is being spawned: a spawn cut in the
middle leaves a child that dies reading half of its instructions (an EOFError traceback).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING, TextIO

from oversub.core.errors import ExitStatus
from oversub.core.plural import count
from oversub.run import stopsignals

if TYPE_CHECKING:
    import threading
    from multiprocessing.process import BaseProcess


_BUFFER_BYTES = 1 << 20
"""Bytes hashed per call: large enough that the GIL is released for nearly all the time."""
_PARENT_POLL_S = 0.1
"""How often a worker checks that its parent is still there and the deadline not reached."""
_STOP_GRACE_S = 2.0
"""How long the root waits for a worker after SIGTERM before it sends SIGKILL."""
_LATE_S = 5.0
"""How long after the deadline the root waits for workers before it stops them itself."""
MAX_PROCS = 256
"""Worker processes at most (`--procs`)."""
MAX_THREADS = 1024
"""Per worker, for busy and for idle threads each (`--threads`, `--idle`)."""
MAX_TOTAL_THREADS = 16384
"""Busy and idle threads of all workers together: far beyond any useful oversubscription,
far below what makes a machine unusable. (The CLI reads these bounds at start-up: this
module imports threading, hashlib and multiprocessing only when it runs.)"""


def _busy(stop: threading.Event, buffer: bytes) -> None:
    """Hash `buffer` until `stop` is set: native work that holds a CPU without the GIL."""
    import hashlib

    digest = hashlib.sha256()
    while not stop.is_set():
        digest.update(buffer)


def stress_worker(threads: int, idle: int, deadline: float, parent: int) -> None:
    """Body of one worker process (module level: spawn imports it by name).

    Runs `threads` busy and `idle` idle threads until the monotonic clock reaches
    `deadline` (CLOCK_MONOTONIC is system-wide, so the root's deadline holds here) or the
    parent `parent` is gone (the worker is then re-parented and getppid() changes).
    """
    import threading

    # Ctrl-C in a terminal reaches the whole foreground group; the root decides when
    # workers stop, so a worker must not die with a traceback of its own. The root spawned
    # it with the stop signals blocked: SIGTERM and SIGHUP end it from now on.
    stopsignals.unblock_in_child(ignore=(signal.SIGINT,))
    stop = threading.Event()
    buffer = bytes(_BUFFER_BYTES)
    pool = [
        threading.Thread(target=_busy, args=(stop, buffer), name=f"busy-{i}", daemon=True)
        for i in range(threads)
    ]
    pool += [threading.Thread(target=stop.wait, name=f"idle-{i}", daemon=True) for i in range(idle)]
    for thread in pool:
        thread.start()
    try:
        while time.monotonic() < deadline and os.getppid() == parent:
            stop.wait(min(_PARENT_POLL_S, max(0.0, deadline - time.monotonic())))
    finally:
        stop.set()
        for thread in pool:
            thread.join()


def _validate(procs: int, threads: int, idle: int, seconds: float) -> None:
    if not 1 <= procs <= MAX_PROCS:
        raise ValueError(f"procs must be 1 to {MAX_PROCS}, got {procs}")
    if not 0 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be 0 to {MAX_THREADS}, got {threads}")
    if not 0 <= idle <= MAX_THREADS:
        raise ValueError(f"idle must be 0 to {MAX_THREADS}, got {idle}")
    if procs * (threads + idle) > MAX_TOTAL_THREADS:
        raise ValueError(
            f"at most {MAX_TOTAL_THREADS} threads in all, got {procs * (threads + idle)}"
        )
    if not seconds > 0:  # also rejects NaN
        raise ValueError(f"seconds must be > 0, got {seconds}")


def _stop_workers(workers: list[BaseProcess]) -> None:
    """SIGTERM every live worker, SIGKILL those still there after a grace, reap them all."""
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()
            worker.join()


def run_stress(
    procs: int,
    threads: int,
    idle: int = 0,
    seconds: float = 10.0,
    *,
    stderr: TextIO | None = None,
) -> ExitStatus:
    """Run `procs` worker processes x `threads` busy threads (+ `idle` idle) for `seconds`.

    Returns the exit status: 0 when every worker finished, 3 when one failed (the
    message is on `stderr`), 130 (ExitStatus.INTERRUPTED) when the root was sent SIGINT,
    SIGTERM or SIGHUP. In every case the workers are stopped and reaped before this returns.
    """
    _validate(procs, threads, idle, seconds)
    out = stderr if stderr is not None else sys.stderr
    print(
        f"oversub stress: root pid {os.getpid()} ({count(procs, 'process')} x "
        f"{count(threads, 'busy thread')},"
        f" {idle} idle, {seconds:g} s)",
        file=out,
        flush=True,
    )
    # Imported here: multiprocessing costs start-up time every other command does not need.
    import multiprocessing
    from multiprocessing import resource_tracker

    # Started now, not by the first spawn: starting it unblocks SIGINT and SIGTERM (its
    # finally clause), which would reopen the window `blocked()` closes below.
    resource_tracker.ensure_running()

    context = multiprocessing.get_context("spawn")
    deadline = time.monotonic() + seconds
    workers: list[BaseProcess] = []
    with stopsignals.interrupt():
        try:
            for i in range(procs):
                # Atomic for stop signals: the new worker reads its instructions whole.
                with stopsignals.blocked():
                    started = context.Process(
                        target=stress_worker,
                        args=(threads, idle, deadline, os.getpid()),
                        name=f"oversub-stress-{i}",
                    )
                    started.start()
                    workers.append(started)
            for worker in workers:
                worker.join(max(0.0, deadline - time.monotonic()) + _LATE_S)
        except KeyboardInterrupt:
            return ExitStatus.INTERRUPTED
        finally:
            with stopsignals.deferred():
                _stop_workers(workers)
    failed = [w for w in workers if w.exitcode != 0]
    for failure in failed:
        print(
            f"oversub stress: worker pid {failure.pid} exited with status {failure.exitcode}",
            file=out,
        )
    return ExitStatus.UNOBSERVABLE if failed else ExitStatus.OK
