"""A process's command line, bounded to its argv area so that no environment byte comes out.

`/proc/PID/cmdline` normally returns the argv strings, NUL-separated. But a process that
rewrites its argv area (setproctitle style) and overwrites the NUL at its end makes the
kernel read on past the area, into the environment, up to the next NUL: `SECRET_TOKEN=…`
would become part of the "command line". The kernel also says where the area is: fields
48-50 of `/proc/PID/stat` (arg_start, arg_end, env_start; zeros when we may not ptrace-read
the process, e.g. another user's as non-root). So:

- with the bounds known, only the bytes of [arg_start, min(arg_end, env_start)) are kept;
  the stat line is read before and after cmdline, and a change (an exec in between) gives
  an unknown command line for this sample rather than one cut by another image's bounds;
- without them, a command line that the kernel returned as one single string (the only
  shape in which it goes past the argv area) is not shown at all.

At most `CMDLINE_READ_MAX` bytes are read and `CMDLINE_MAX` characters kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from oversub.probe.procfiles import read_small

CMDLINE_MAX = 200
"""Characters of a command line kept in a sample."""
CMDLINE_READ_MAX = 4096
"""Bytes of /proc/PID/cmdline read (a page; enough for CMDLINE_MAX characters)."""

# Fields after comm's ")" start at stat field 3; arg_start is field 48.
_ARG_START = 48 - 3


def argv_bounds(stat: bytes) -> tuple[int, int, int] | None:
    """(arg_start, arg_end, env_start) of a /proc/PID/stat line; None when the kernel does not
    show them (zeros: no permission, or no memory map) or the line is too short or malformed."""
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        start, end, env = (int(f) for f in fields[_ARG_START : _ARG_START + 3])
    except ValueError:
        return None
    if not 0 < start < end:
        return None
    return start, end, env


def bound_cmdline(raw: bytes, bounds: tuple[int, int, int] | None) -> str:
    """The text of a raw cmdline read, kept inside the argv area (see the module docstring);
    "" when it cannot be shown safely."""
    if bounds is not None:
        start, end, env = bounds
        raw = raw[: (min(end, env) if env > start else end) - start]
    elif b"\0" not in raw.rstrip(b"\0"):
        # One string and no bounds to check it against: it may run into the environment.
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")[:CMDLINE_MAX]


def read_cmdline(
    proc_dir: str, stat_before: bytes, read: Callable[[str, int], bytes] | None = None
) -> str:
    """The command line of the process at `proc_dir` (e.g. "/proc/42"), whose stat line was
    `stat_before`; "" when it is gone, unreadable or cannot be shown safely. `read(leaf,
    limit)` reads a file of `proc_dir` where given (the reader process of
    `probe.memreader`: the kernel reads a command line from the process's memory, which may
    wait on it); what it raises other than OSError is the caller's."""
    try:
        if read is not None:
            raw = read("cmdline", CMDLINE_READ_MAX)
        else:
            fd = os.open(f"{proc_dir}/cmdline", os.O_RDONLY)
            try:
                raw = os.read(fd, CMDLINE_READ_MAX)
            finally:
                os.close(fd)
        stat_after = read_small(f"{proc_dir}/stat")
    except OSError:
        return ""
    bounds = argv_bounds(stat_before)
    if bounds != argv_bounds(stat_after):
        return ""  # exec'd between the reads: these bounds are not that command line's
    return bound_cmdline(raw, bounds)
