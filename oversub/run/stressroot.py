"""`oversub stress`'s root: it starts the workers (`run.stressload`), says what sized their
teams, waits for them, stops and reaps them, and prints the teams' throughput.

Workers are started with the "spawn" start method: forking a threaded parent is itself a
hazard oversub reports, and the stress tool must not commit it. Besides the workers,
multiprocessing starts its resource tracker, one sleeping single-thread child of the root.

SIGINT, SIGTERM and SIGHUP end the root like every oversub command (exit 130, workers
stopped and reaped). They stay pending while a worker is being spawned: a spawn cut in the
middle leaves a child that dies reading half of its instructions (an EOFError traceback).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from oversub.core.errors import ExitStatus
from oversub.core.plural import count, noun
from oversub.run import stopsignals
from oversub.run import stressload as load
from oversub.run.stressload import FLAG, TEAM_VARIABLE, Mode, TeamSize

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

_STOP_GRACE_S = 2.0
"""How long the root waits for a worker after SIGTERM before it sends SIGKILL."""
_LATE_S = 5.0
"""How long after the deadline the root waits for workers before it stops them itself."""


def _validate(procs: int, threads: int, idle: int, seconds: float, mode: str) -> None:
    if mode not in load.MODES:
        raise ValueError(f"mode must be one of {', '.join(load.MODES)}, got {mode!r}")
    if not 1 <= procs <= load.MAX_PROCS:
        raise ValueError(f"procs must be 1 to {load.MAX_PROCS}, got {procs}")
    if not 0 <= threads <= load.MAX_THREADS:
        raise ValueError(f"threads must be 0 to {load.MAX_THREADS}, got {threads}")
    if not 0 <= idle <= load.MAX_THREADS:
        raise ValueError(f"idle must be 0 to {load.MAX_THREADS}, got {idle}")
    if procs * (threads + idle) > load.MAX_TOTAL_THREADS:
        raise ValueError(
            f"at most {load.MAX_TOTAL_THREADS} threads in all, got {procs * (threads + idle)}"
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


def banner(procs: int, size: TeamSize, idle: int, seconds: float, mode: Mode, pid: int) -> str:
    """The first line on stderr: the root pid, the shape, and for a team what sizes it.

    A team's size is not the root's to state: each worker reads its own OMP_NUM_THREADS as
    it starts (`own_size`), which a start-up hook such as `oversub run`'s sets per process.
    The banner says so, with what the root knows (its own value, or the default when a
    worker has none); `teams_line` then gives the sizes the workers took."""
    if mode == "hash":
        shape = f"{count(procs, 'process')} x {count(size.threads, 'busy thread')}"
        return f"oversub stress: root pid {pid} ({shape}, {idle} idle, {seconds:g} s)"
    if size.threads == 0:
        shape = f"{count(procs, 'process')}, no team ({FLAG} 0)"
    else:
        if size.source == FLAG:
            known = f"{FLAG} asks for {size.threads}"
        elif size.source.startswith(f"{TEAM_VARIABLE}="):
            known = f"the root's is {size.threads}"
        else:
            known = f"else {size.source}"
        shape = f"{count(procs, 'process')}, each a team sized by its own {TEAM_VARIABLE} ({known})"
    return f"oversub stress: root pid {pid} ({shape}, {idle} idle, {seconds:g} s); Ctrl-C stops it"


_LISTED_PIDS = 8
"""Pids a line of `teams_line` lists for one size at most; more are counted."""


def teams_line(sizes: Mapping[int, int], procs: int) -> str:
    """The team sizes the workers took (worker pid -> size), grouped by size, the smallest
    first: "oversub stress: teams started: 1 thread in pids 101, 102". A worker that has not
    reported (it failed, or the run ended first) is counted as such."""
    by_size: dict[int, list[int]] = {}
    for pid, threads in sizes.items():
        by_size.setdefault(threads, []).append(pid)
    parts = []
    for threads, pids in sorted(by_size.items()):
        pids.sort()
        if len(pids) <= _LISTED_PIDS:
            where = f"{noun(len(pids), 'pid')} {', '.join(map(str, pids))}"
        else:
            where = count(len(pids), "worker")
        parts.append(f"{count(threads, 'thread')} in {where}")
    missing = procs - len(sizes)
    if missing > 0:
        parts.append(f"{count(missing, 'worker')} did not report")
    return f"oversub stress: teams started: {'; '.join(parts)}"


def throughput_line(results: list[tuple[int, float, int]], procs: int) -> str:
    """The teams' figure for `--metric`: the workers' rounds per second, summed; each
    result is a worker's (rounds, seconds, team size)."""
    rate = sum(rounds / seconds for rounds, seconds, _ in results if seconds > 0)
    rounds = sum(r for r, _, _ in results)
    longest = max((s for _, s, _ in results), default=0.0)
    sizes = sorted({t for _, _, t in results}) or [0]
    threads = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    return (
        f"oversub stress: rounds_per_s={rate:.1f} ({rounds:,} rounds of "
        f"{load.ROUND_BYTES >> 20} MiB by {count(procs, 'process')} x {threads} team "
        f"{noun(sizes[-1], 'thread')} in {longest:.1f} s)"
    )


def _message(reader: Connection) -> tuple[object, ...] | None:
    """The next message of a worker, None at its end or when it is not one of ours."""
    try:
        message = reader.recv()
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return message if isinstance(message, tuple) and message else None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sizes(readers: dict[int, Connection], until: float) -> dict[int, int]:
    """Each worker's team size (worker pid -> threads), as each reports it once sized; waits
    for all of them, until the monotonic clock reaches `until` at most."""
    from multiprocessing.connection import wait

    sizes: dict[int, int] = {}
    waiting = {id(reader): (pid, reader) for pid, reader in readers.items()}
    while waiting:
        left = until - time.monotonic()
        if left <= 0:
            break
        for ready in wait([reader for _, reader in waiting.values()], left):
            pid, reader = waiting.pop(id(ready))
            message = _message(reader)
            if message is not None and len(message) == 2 and message[0] == "size":
                size = _whole(message[1])
                if size is not None:
                    sizes[pid] = size
    return sizes


def _collect(readers: list[Connection]) -> list[tuple[int, float, int]] | None:
    """Each worker's (rounds, seconds, team size), or None when one sent nothing. A size
    message the root did not read before (`_sizes`) is skipped."""
    results = []
    for reader in readers:
        while True:
            try:
                if not reader.poll(0):
                    return None
            except (OSError, EOFError, ValueError):
                return None
            message = _message(reader)
            if message is None:
                return None
            if message[0] == "done" and len(message) == 4:
                rounds, size, seconds = _whole(message[1]), _whole(message[3]), message[2]
                if rounds is None or size is None or not isinstance(seconds, float):
                    return None
                results.append((rounds, seconds, size))
                break
    return results


def run_stress(
    procs: int,
    threads: int,
    idle: int = 0,
    seconds: float = load.DEFAULT_SECONDS,
    *,
    mode: Mode = "hash",
    size: TeamSize | None = None,
    stderr: TextIO | None = None,
    stdout: TextIO | None = None,
) -> ExitStatus:
    """Run `procs` worker processes x `threads` busy threads (+ `idle` idle) for `seconds`,
    as teams or independent hashing threads (`mode`); `size` says what sized them (the
    banner's words; default: "--threads").

    Returns the exit status: 0 when every worker finished (a team's throughput then on
    `stdout`), 3 when one failed (the message is on `stderr`), 130
    (ExitStatus.INTERRUPTED) when the root was sent SIGINT, SIGTERM or SIGHUP. In every case
    the workers are stopped and reaped before this returns.
    """
    _validate(procs, threads, idle, seconds, mode)
    out = stderr if stderr is not None else sys.stderr
    shown = size if size is not None else TeamSize(threads, FLAG)
    print(banner(procs, shown, idle, seconds, mode, os.getpid()), file=out, flush=True)
    # Imported here: multiprocessing costs start-up time every other command does not need.
    import multiprocessing
    from multiprocessing import resource_tracker

    # Started now, not by the first spawn: starting it unblocks SIGINT and SIGTERM (its
    # finally clause), which would reopen the window `blocked()` closes below.
    resource_tracker.ensure_running()

    if mode == "team" and shown.source == FLAG and threads:
        # The flag wins over an inherited OMP_NUM_THREADS: exported to the workers, as a
        # launcher's export is, it sizes their teams, and oversub reads there what did.
        os.environ[TEAM_VARIABLE] = str(threads)
    # A worker sizes its team from its own environment (`own_size`): never past its share.
    cap = min(load.MAX_THREADS, load.MAX_TOTAL_THREADS // procs - idle)
    context = multiprocessing.get_context("spawn")
    deadline = time.monotonic() + seconds
    team = mode == "team" and threads > 0
    workers: list[BaseProcess] = []
    readers: list[Connection] = []
    with stopsignals.interrupt():
        try:
            for i in range(procs):
                reader, writer = context.Pipe(duplex=False) if team else (None, None)
                # Atomic for stop signals: the new worker reads its instructions whole.
                with stopsignals.blocked():
                    started = context.Process(
                        target=load.stress_worker,
                        args=(threads, idle, deadline, os.getpid(), mode, writer, cap),
                        name=f"oversub-stress-{i}",
                    )
                    started.start()
                    workers.append(started)
                if reader is not None and writer is not None:
                    writer.close()
                    readers.append(reader)
            if team:
                # Each worker sized its team from its own environment: say what they took.
                pids = {
                    w.pid: r for w, r in zip(workers, readers, strict=True) if w.pid is not None
                }
                sizes = _sizes(pids, deadline)
                print(teams_line(sizes, procs), file=out, flush=True)
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
    if failed:
        return ExitStatus.UNOBSERVABLE
    if team:
        results = _collect(readers)
        if results is None:
            print("oversub stress: a worker did not report its rounds", file=out)
            return ExitStatus.UNOBSERVABLE
        line = throughput_line(results, procs)
        print(line, file=stdout if stdout is not None else sys.stdout, flush=True)
    return ExitStatus.OK
