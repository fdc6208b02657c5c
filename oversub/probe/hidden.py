"""Processes of the tree that oversub cannot see: a /proc mounted with `hidepid` lists only
the processes the reader may trace, so another user's child (a setuid program started by
the job) is missing from the scan, not refused.

`hides_processes` tells, once, whether this /proc may hide processes from us (the mount's
`hidepid` option, and we are not root); only then `hidden_children` reads the `children`
file of each thread of the tree (`/proc/PID/task/TID/children`, the pids it forked that
still live) and counts those the scan did not list. Both take the /proc path, so tests use
fake trees; a file that cannot be read counts nothing (the process just went).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from oversub.core.samples import ProcessSample

MAX_MOUNTINFO = 1 << 20
"""Bytes of mountinfo read (a node with thousands of mounts has a few hundred KiB)."""


def hides_processes(proc: str) -> bool:
    """Whether `proc` is mounted with hidepid other than 0 (off) and we are not root."""
    if os.geteuid() == 0:
        return False
    try:
        fd = os.open(f"{proc}/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, MAX_MOUNTINFO)
        finally:
            os.close(fd)
    except OSError:
        return False
    where = os.path.realpath(proc)
    for line in data.decode("utf-8", "replace").splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[4] != where or " - proc " not in line:
            continue
        options = fields[5].split(",") + line.rsplit(" ", 1)[-1].split(",")
        for option in options:
            if option.startswith("hidepid=") and option not in ("hidepid=0", "hidepid=off"):
                return True
    return False


def hidden_children(
    proc: str, processes: Mapping[int, ProcessSample], listed: Iterable[int]
) -> int:
    """Children of the tree's processes that the /proc scan (`listed`) did not show."""
    seen = set(listed)
    hidden: set[int] = set()
    for pid, p in processes.items():
        for t in p.threads:
            try:
                fd = os.open(f"{proc}/{pid}/task/{t.tid}/children", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    data = os.read(fd, 1 << 16)
                finally:
                    os.close(fd)
            except OSError:
                continue
            hidden.update(int(x) for x in data.split() if x.isdigit() and int(x) not in seen)
    return len(hidden)
