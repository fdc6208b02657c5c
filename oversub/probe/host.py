"""Host-wide context for an interval: busy and stolen CPU time, PSI, cgroup throttling.

These say whether something outside the watched tree competes for the CPUs; they are
context, never a verdict about the tree on their own (docs/signals.md, "Host context").
Every reader returns None for what it cannot read instead of failing.
"""

from __future__ import annotations

import os
import time

from oversub.core.samples import HostSample, ThrottleStat
from oversub.probe.procfiles import read_all
from oversub.probe.procstat import ticks_to_ns


def parse_cpu_line(proc_stat: bytes) -> tuple[int, int] | None:
    """(busy_ns, steal_ns) from the aggregate "cpu" line of /proc/stat; None if absent.

    Fields: user nice system idle iowait irq softirq steal guest guest_nice. busy is
    user+nice+system+irq+softirq: idle, iowait and steal are not work done here, and guest
    time is already counted inside user/nice, so adding it would count it twice.
    """
    for line in proc_stat.splitlines():
        fields = line.split()
        if not fields or fields[0] != b"cpu":
            continue
        ticks = [int(f) for f in fields[1:]]
        ticks += [0] * (8 - len(ticks))  # very old kernels stop before steal
        user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
        busy = user + nice + system + irq + softirq
        return ticks_to_ns(busy), ticks_to_ns(steal)
    return None


def parse_psi_some(pressure: bytes) -> int | None:
    """`total=` of the "some" line of /proc/pressure/cpu, in microseconds."""
    for line in pressure.splitlines():
        fields = line.split()
        if fields and fields[0] == b"some":
            for field in fields[1:]:
                if field.startswith(b"total="):
                    return int(field[len(b"total=") :])
    return None


def parse_cpu_stat(cpu_stat: bytes) -> ThrottleStat | None:
    """Throttling counters of a cgroup `cpu.stat`, v2 (throttled_usec) or v1 (throttled_time).

    None when the file has no bandwidth counters (v2 without the cpu controller's quota
    support shows only usage_usec & co).
    """
    values: dict[bytes, int] = {}
    for line in cpu_stat.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].isdigit():
            values[fields[0]] = int(fields[1])
    if b"nr_periods" not in values or b"nr_throttled" not in values:
        return None
    if b"throttled_usec" in values:
        throttled_ns = values[b"throttled_usec"] * 1000
    elif b"throttled_time" in values:
        throttled_ns = values[b"throttled_time"]
    else:
        return None
    return ThrottleStat(
        nr_periods=values[b"nr_periods"],
        nr_throttled=values[b"nr_throttled"],
        throttled_ns=throttled_ns,
    )


def read_host(root: str = "/", throttle_stat_path: str | None = None) -> HostSample:
    """Host counters now. `throttle_stat_path` is the absolute path of a cgroup's cpu.stat
    (root already included), or None when no quota applies. On the real host (`root` "/")
    oversub's own CPU time is read beside /proc/stat, so that it is not blamed on others."""
    busy_ns = steal_ns = None
    # Read next to /proc/stat: the two are subtracted from each other.
    observer_ns = time.process_time_ns() if root == "/" else None
    try:
        cpu = parse_cpu_line(read_all(os.path.join(root, "proc", "stat")))
    except (OSError, ValueError):
        cpu = None
    if cpu is not None:
        busy_ns, steal_ns = cpu

    try:
        psi = parse_psi_some(read_all(os.path.join(root, "proc", "pressure", "cpu")))
    except (OSError, ValueError):
        # Absent without CONFIG_PSI; EOPNOTSUPP when the kernel booted with psi=0.
        psi = None

    throttle = None
    if throttle_stat_path is not None:
        try:
            throttle = parse_cpu_stat(read_all(throttle_stat_path))
        except (OSError, ValueError):
            throttle = None
    return HostSample(
        busy_ns=busy_ns,
        steal_ns=steal_ns,
        psi_some_us=psi,
        throttle=throttle,
        observer_cpu_ns=observer_ns,
    )
