"""The threads of one process, read from outside: who they are, what they cost so far.

`oversub doctor` counts the threads a runtime started in its child (`probe.poolstart`) by
listing `/proc/PID/task` at each of the child's stops, and tells whose they are with the
sampler's own attribution (`probe.owners`); to see which of them work while the operation
runs in a loop it reads each thread's CPU time and run delay (`schedstat`, else `stat`
without the delay) at both ends. A thread that exits while it is read is left out; every
read is bounded (`procfiles.read_small`).
"""

from __future__ import annotations

import os

from oversub.core.samples import ThreadSample
from oversub.probe.procfiles import read_small
from oversub.probe.procstat import parse_stat, ticks_to_ns


def task_ids(pid: int, root: str = "/") -> frozenset[int] | None:
    """The thread ids of `pid` now; None when the process is gone or may not be read."""
    try:
        names = os.listdir(os.path.join(root, "proc", str(pid), "task"))
    except OSError:
        return None
    return frozenset(int(name) for name in names if name.isdigit())


def process_start(pid: int, root: str = "/") -> int | None:
    """The process's start time (clock ticks after boot): its identity beside the pid."""
    try:
        return parse_stat(read_small(os.path.join(root, "proc", str(pid), "stat"))).start_ticks
    except (OSError, ValueError):
        return None


def read_threads(pid: int, root: str = "/") -> tuple[ThreadSample, ...]:
    """Every thread of `pid` with its state, CPU time, run delay (None without schedstat)
    and start time; the switch counters are not read (None)."""
    base = os.path.join(root, "proc", str(pid), "task")
    found: list[ThreadSample] = []
    for tid in sorted(task_ids(pid, root) or ()):
        where = os.path.join(base, str(tid))
        try:
            stat = parse_stat(read_small(os.path.join(where, "stat")))
        except (OSError, ValueError):
            continue  # gone since the listing
        cpu_ns = ticks_to_ns(stat.utime_ticks + stat.stime_ticks)
        delay_ns: int | None = None
        try:
            fields = read_small(os.path.join(where, "schedstat")).split()
            cpu_ns, delay_ns = int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            pass  # a kernel without CONFIG_SCHED_INFO: CPU time from stat, no delay
        found.append(ThreadSample(tid, stat.state, cpu_ns, delay_ns, None, None, stat.start_ticks))
    return tuple(found)
