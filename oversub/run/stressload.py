"""`oversub stress`: a reproducible oversubscribed workload to point oversub at.

M worker processes each run a team of T threads (or T independent busy threads, `hash`
mode) and K idle ones. Every busy thread hashes with hashlib, which releases the GIL for
inputs above 2047 bytes, so the T threads of one process really run in parallel, like the
native thread pools (OpenMP, BLAS) that oversubscribe real jobs.

`team` (the default) behaves like an OpenMP team, the pool that makes oversubscription
costly: its threads work in lockstep rounds (each hashes its share of the round's
`ROUND_BYTES`, then waits at a barrier for the others), and a thread that waits spins for
`SPIN_CPU_S` of CPU time, as libgomp's does, before it blocks. Its threads are named
`stress-team-I` (oversub's catalogue knows them: `core.runtimes`), its size is T = `--threads`,
else `OMP_NUM_THREADS` (the first level), else every usable vCPU, as a default-sized OpenMP
team's, and it prints its throughput, `rounds_per_s=...` on stdout, for `check --metric`
and `tune --metric`. With M*T > N, the round of a team waits for threads that wait for a
CPU that spinning threads hold: it costs multiples (docs/signals.md has the figures).

`hash`: T independent threads that hash a 1 MiB buffer in a loop (the stress of oversub
before its teams). M*T > N gives a known amount of oversubscription: the measured delay
ratio follows 1 - N/(M*T), while the work done hardly changes (docs/signals.md).

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

import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple, TextIO

from oversub.core.errors import ExitStatus
from oversub.core.plural import count, noun
from oversub.run import stopsignals

if TYPE_CHECKING:
    import threading
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

Mode = Literal["team", "hash"]
MODES: tuple[Mode, ...] = ("team", "hash")

_BUFFER_BYTES = 1 << 20
"""Bytes hashed per call in `hash` mode: large enough that the GIL is released for nearly
all the time."""
ROUND_BYTES = 1 << 20
"""Bytes a team hashes per round, shared among its threads (about 1.4 ms of one CPU here)."""
SPIN_CPU_S = 0.003
"""CPU time a team thread spins at the barrier before it blocks: libgomp's default
(GOMP_SPINCOUNT 300,000) burned 3.4 ms here (docs/signals.md)."""
_SPIN_BYTES = 4096
"""Bytes hashed per spin step: above hashlib's 2047-byte threshold, so a spinning thread
burns CPU without holding the GIL (about 5 us a step)."""
TEAM_NAME = "stress-team-"
"""Names of the team's threads, `stress-team-0` ... (`runtimes.RUNTIMES`' `stress` row)."""
TEAM_VARIABLE = "OMP_NUM_THREADS"
"""The variable that sizes a team when `--threads` is not given, as it sizes OpenMP's."""
_COMM_BYTES = 15
"""A thread name's length at most (`/proc/PID/task/TID/comm`, TASK_COMM_LEN - 1)."""
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
DEFAULT_SECONDS = 60.0
"""How long a run lasts unless told: time to copy the root pid into `oversub watch`."""


FLAG = "--threads"


class TeamSize(NamedTuple):
    """The size of each worker's team (or busy threads) and where it came from."""

    threads: int
    source: str
    """FLAG, "OMP_NUM_THREADS=1" or "all 2 usable vCPUs"."""
    note: str | None = None
    """A line for stderr when a variable was set but could not be used."""


def team_size(flag: int | None, env: Mapping[str, str], vcpus: int, mode: Mode) -> TeamSize:
    """T: `--threads` when given; in `team` mode, else the first level of OMP_NUM_THREADS
    when it is a whole number from 1 to MAX_THREADS (otherwise it is ignored with a note,
    as libgomp ignores a value it cannot use); else `vcpus`, the usable vCPUs (at most
    MAX_THREADS)."""
    if flag is not None:
        return TeamSize(flag, FLAG)
    default = TeamSize(vcpus, f"all {count(vcpus, 'usable vCPU')}")
    if vcpus > MAX_THREADS:
        default = TeamSize(MAX_THREADS, f"{MAX_THREADS:,} of the {vcpus:,} usable vCPUs")
    raw = env.get(TEAM_VARIABLE, "").strip() if mode == "team" else ""
    if not raw:
        return default
    first = raw.split(",")[0].strip()
    if first.isascii() and first.isdigit() and 1 <= int(first) <= MAX_THREADS:
        return TeamSize(int(first), f"{TEAM_VARIABLE}={int(first)}")
    shown = ascii(raw[:40] + ("..." if len(raw) > 40 else ""))
    return default._replace(
        note=(
            f"oversub stress: ignoring {TEAM_VARIABLE}={shown} (not a whole number from 1 to "
            f"{MAX_THREADS}), as libgomp ignores a value it cannot use"
        )
    )


def _name_thread(name: str) -> None:
    """Give the calling thread the name `name` in /proc (best effort: without /proc it
    keeps the process's)."""
    import threading

    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name[:_COMM_BYTES])
    except OSError:
        pass


class _Team:
    """One worker's team: `size` threads that meet at a barrier after every round."""

    def __init__(self, size: int, stop: threading.Event) -> None:
        import threading

        self.size = size
        self.stop = stop
        self.cond = threading.Condition()
        self.arrived = 0
        self.generation = 0
        self.rounds = 0

    def arrive(self, spin: bytes) -> None:
        """Wait at the barrier until every thread of the team has arrived: spin (hashing
        `spin`, GIL released) for SPIN_CPU_S of this thread's CPU time, then block."""
        import hashlib

        with self.cond:
            generation = self.generation
            self.arrived += 1
            if self.arrived == self.size:
                self.arrived = 0
                self.generation += 1
                self.rounds += 1
                self.cond.notify_all()
                return
        digest = hashlib.sha256()
        start = time.thread_time()
        while self.generation == generation and time.thread_time() - start < SPIN_CPU_S:
            digest.update(spin)
        with self.cond:
            while self.generation == generation and not self.stop.is_set():
                self.cond.wait(_PARENT_POLL_S)

    def end(self) -> None:
        """Set `stop` and wake every blocked member."""
        with self.cond:
            self.stop.set()
            self.cond.notify_all()


def _member(team: _Team, index: int, share: bytes, spin: bytes) -> None:
    """One team thread: hash its share of a round, meet the others, until the team stops."""
    import hashlib

    _name_thread(f"{TEAM_NAME}{index}")
    digest = hashlib.sha256()
    while not team.stop.is_set():
        digest.update(share)
        team.arrive(spin)


def _busy(stop: threading.Event, buffer: bytes) -> None:
    """Hash `buffer` until `stop` is set: native work that holds a CPU without the GIL."""
    import hashlib

    digest = hashlib.sha256()
    while not stop.is_set():
        digest.update(buffer)


def own_size(threads: int, cap: int, env: Mapping[str, str]) -> int:
    """A worker's team size: its own OMP_NUM_THREADS, read as it starts (as a real runtime
    reads it: a start-up hook such as `oversub run`'s may have set it for this process), else
    `threads`, the root's; at most `cap` (the root's share of MAX_TOTAL_THREADS)."""
    if threads == 0:
        return 0  # `--threads 0`: no team (nothing was exported)
    return min(team_size(None, env, threads, "team").threads, cap)


def stress_worker(
    threads: int,
    idle: int,
    deadline: float,
    parent: int,
    mode: Mode = "hash",
    report: Connection | None = None,
    cap: int = MAX_THREADS,
) -> None:
    """Body of one worker process (module level: spawn imports it by name).

    Runs `threads` busy threads (a team sized by `own_size`, or independent ones: `mode`)
    and `idle` idle threads until the monotonic clock reaches `deadline` (CLOCK_MONOTONIC is
    system-wide, so the root's deadline holds here) or the parent `parent` is gone (the
    worker is then re-parented and getppid() changes). A team sends ("size", its size) on
    `report` once sized, and ("done", rounds, seconds, its size) when it ends.
    """
    import threading

    # Ctrl-C in a terminal reaches the whole foreground group; the root decides when
    # workers stop, so a worker must not die with a traceback of its own. The root spawned
    # it with the stop signals blocked: SIGTERM and SIGHUP end it from now on.
    stopsignals.unblock_in_child(ignore=(signal.SIGINT,))
    stop = threading.Event()
    if mode == "team":
        threads = own_size(threads, cap, os.environ)
        if report is not None:
            with contextlib.suppress(OSError):  # the root died since: nobody reads it
                report.send(("size", threads))
    team = _Team(threads, stop) if mode == "team" and threads else None
    if team is not None:
        share = bytes(max(_SPIN_BYTES, ROUND_BYTES // threads))
        spin = bytes(_SPIN_BYTES)
        pool = [
            threading.Thread(
                target=_member, args=(team, i, share, spin), name=f"{TEAM_NAME}{i}", daemon=True
            )
            for i in range(threads)
        ]
    else:
        buffer = bytes(_BUFFER_BYTES)
        pool = [
            threading.Thread(target=_busy, args=(stop, buffer), name=f"busy-{i}", daemon=True)
            for i in range(threads)
        ]
    pool += [threading.Thread(target=stop.wait, name=f"idle-{i}", daemon=True) for i in range(idle)]
    start = time.monotonic()
    for thread in pool:
        thread.start()
    try:
        while time.monotonic() < deadline and os.getppid() == parent:
            stop.wait(min(_PARENT_POLL_S, max(0.0, deadline - time.monotonic())))
    finally:
        elapsed = time.monotonic() - start
        if team is not None:
            team.end()
        stop.set()
        for thread in pool:
            thread.join()
    if report is not None and os.getppid() == parent:
        with contextlib.suppress(OSError):  # the root died since: nobody reads it
            report.send(("done", team.rounds if team is not None else 0, elapsed, threads))


def _validate(procs: int, threads: int, idle: int, seconds: float, mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
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
            known = f"set to {size.threads} by {FLAG}"
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
        f"{ROUND_BYTES >> 20} MiB by {count(procs, 'process')} x {threads} team "
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
    seconds: float = DEFAULT_SECONDS,
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
    cap = min(MAX_THREADS, MAX_TOTAL_THREADS // procs - idle)
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
                        target=stress_worker,
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
