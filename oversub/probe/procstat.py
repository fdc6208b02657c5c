"""The `/proc/PID/stat` line, one parser for every reader, and a process's CPU clock.

The sampler, `run.runner`, `probe.threads` and doctor's `probe.census` read a process's (or
a thread's) stat line through `parse_stat`; `start_of` tells a reused pid apart without
parsing the rest. Its CPU times count clock ticks (`ticks_to_ns`); `process_cpu_ns` reads
the kernel's per-process CPU clock instead, in nanoseconds, without opening a file.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

# Clock ticks per second of /proc times (USER_HZ, 100 nearly everywhere). Windows has no
# sysconf; nothing there reads /proc, the fallback only keeps imports working.
CLK_TCK: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def ticks_to_ns(ticks: int) -> int:
    """Clock ticks (/proc/stat, stat utime/stime) to nanoseconds."""
    return ticks * 1_000_000_000 // CLK_TCK


class ProcStat(NamedTuple):
    """The fields of a `/proc/PID/stat` (or `task/TID/stat`) line that oversub reads (the
    sampler and `run.runner`, one parser for both)."""

    comm: str
    """Executable name (field 2), without the parentheses; may hold spaces and ')'."""
    state: str
    """One letter (field 3): R, S, D, Z, T, ..."""
    ppid: int
    """Parent pid (field 4)."""
    pgrp: int
    """Process group id (field 5)."""
    session: int
    """Session id (field 6)."""
    utime_ticks: int
    """User CPU time in clock ticks (field 14)."""
    stime_ticks: int
    """System CPU time in clock ticks (field 15)."""
    children_ticks: int
    """CPU time of waited-for children, user + system (fields 16 and 17)."""
    start_ticks: int
    """Start time in clock ticks after boot (field 22)."""
    threads: int = 0
    """Number of threads (field 20)."""

    @property
    def alive(self) -> bool:
        """Not dead yet: a zombie has died, and only its parent (perhaps init) removes it."""
        return self.state not in ("Z", "X", "x")


def _after_comm(data: bytes) -> tuple[int, list[bytes]]:
    """Index of comm's closing ')' and the fields after it (field 3 onwards).

    comm is chosen by the program (prctl, exec name) and may contain spaces and ')', so the
    only safe separator is the LAST ')' of the line.
    """
    close = data.rfind(b")")
    if close < 0:
        raise ValueError("no ')' in stat line")
    return close, data[close + 2 :].split()


_CPUCLOCK_SCHED = 2
"""The CPU clock that counts the scheduler's runtime (linux/posix-timers.h)."""


def process_cpu_ns(pid: int) -> int | None:
    """CPU time of every thread of process `pid`, living and exited, in nanoseconds; None
    when the process is gone (or the platform has no such clock).

    The process's CPU clock (clock_gettime of the id glibc's clock_getcpuclockid(pid) makes,
    `(~pid << 3) | CPUCLOCK_SCHED`): the sum of its threads' scheduler runtime, the field 1
    of each thread's schedstat, at nanosecond resolution, where stat's utime + stime count
    clock ticks. The kernel allows it for any process of the caller's pid namespace (no
    ptrace check; the sampler refuses a /proc of another namespace) and answers EINVAL for a
    pid without a process. One system call, about 1 µs from Python.
    """
    try:
        return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED)
    except (OSError, OverflowError, AttributeError):
        return None


def parse_stat(data: bytes) -> ProcStat:
    """Parse a stat line; raises ValueError when it is truncated or malformed."""
    close, rest = _after_comm(data)
    if len(rest) < 20:
        raise ValueError("stat line has too few fields")
    comm = data[data.find(b"(") + 1 : close].decode("utf-8", "replace")
    # rest[0] is field 3, so field k is rest[k - 3].
    return ProcStat(
        comm=comm,
        state=rest[0].decode("ascii", "replace"),
        ppid=int(rest[1]),
        pgrp=int(rest[2]),
        session=int(rest[3]),
        utime_ticks=int(rest[11]),
        stime_ticks=int(rest[12]),
        children_ticks=int(rest[13]) + int(rest[14]),
        start_ticks=int(rest[19]),
        threads=int(rest[17]),
    )


def start_of(raw: bytes) -> int | None:
    """start_ticks of a raw stat line (field 22), None when malformed; cheaper than
    `parse_stat` for a line read only to tell a reused pid apart."""
    close = raw.rfind(b")")
    if close < 0:
        return None
    try:
        return int(raw[close + 2 :].split(None, 20)[19])
    except (ValueError, IndexError):
        return None
