"""What the hook reads in /proc: a process's children, command line, parent and start time.

Every read is bounded and non-blocking; a process that is gone reads as empty. The command
lines of other processes are compared, never shown.
"""

from __future__ import annotations

import os

HELPERS: tuple[bytes, ...] = (
    b"multiprocessing.resource_tracker",
    b"multiprocessing.semaphore_tracker",
    b"multiprocessing.forkserver",
    b"loky.backend.resource_tracker",
)
"""Command-line marks of processes that start beside the workers and compute nothing."""

FORKSERVER = b"multiprocessing.forkserver"
"""The forkserver's mark, which its children keep (they are forked, not exec'd)."""

MAX_CHILDREN = 4096
"""Children of one process counted at most."""


def read(path: str, limit: int = 4096) -> bytes:
    """The first `limit` bytes of `path` (OSError when it cannot be read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def children(pid: int) -> list[int]:
    """The live children of `pid` (every thread's children file), at most MAX_CHILDREN."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks[:MAX_CHILDREN]:
        try:
            text = read(f"/proc/{pid}/task/{tid}/children", 65536)
        except OSError:
            continue
        found += [int(word) for word in text.split() if word.isdigit()]
        if len(found) >= MAX_CHILDREN:
            break
    return found


def cmdline(pid: int) -> bytes:
    """The first 4 KiB of `pid`'s command line (empty when it is gone)."""
    try:
        return read(f"/proc/{pid}/cmdline")
    except OSError:
        return b""


def _stat_fields(pid: int | str) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (field 3 on), or []."""
    try:
        stat = read(f"/proc/{pid}/stat", 1024)
        return stat[stat.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return []


def parent(pid: int) -> int | None:
    """`pid`'s parent (field 4 of /proc/PID/stat), None when it is gone."""
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def start_ticks() -> int | None:
    """This process's start time (field 22 of /proc/self/stat): with the pid, its identity."""
    fields = _stat_fields("self")
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def is_helper(line: bytes) -> bool:
    """Whether a command line is one of multiprocessing's or loky's helper processes."""
    return any(mark in line for mark in HELPERS)
