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

Workers stop on their own at the deadline, and also as soon as their parent (the root,
`run.stressroot`) is gone, so killing the root with SIGKILL leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple

from oversub.core.plural import count
from oversub.run import stopsignals

if TYPE_CHECKING:
    import threading
    from multiprocessing.connection import Connection

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
