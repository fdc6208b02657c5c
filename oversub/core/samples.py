"""Samples: cumulative counters of a process tree and the host at one instant (probe output)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.names import Signal, WaitKind
from oversub.core.pcprofile import WaitShare


class ThreadSample(NamedTuple):
    """Cumulative counters of one thread at one instant (the probe makes one per thread per
    reading, 5,000 at a time)."""

    tid: int
    state: str
    """One letter from /proc/.../stat: R running/runnable, S sleeping, D disk, Z zombie, ..."""
    cpu_ns: int
    """CPU time consumed (schedstat field 1, else utime+stime)."""
    run_delay_ns: int | None
    """Time spent runnable but waiting for a CPU (schedstat field 2); None without schedstat."""
    voluntary_ctx: int | None
    """Voluntary context switches (task status); None when unreadable."""
    involuntary_ctx: int | None
    """Involuntary context switches (task status); None when unreadable."""
    start_ticks: int | None = None
    """When the thread started (task stat field 22, clock ticks after boot): whether it
    existed when a child was forked; None when unknown, or not read: the probe reads it
    only where it is used (`probe.threads`)."""


class ProcessSample(NamedTuple):
    """One process of the watched tree at one instant."""

    pid: int
    ppid: int
    name: str
    """comm (up to 15 characters)."""
    cmdline: str
    """Command line, arguments joined by spaces, truncated to 200 characters."""
    start_ticks: int
    """Start time in clock ticks after boot (stat field 22): tells a reused pid apart."""
    threads: tuple[ThreadSample, ...]
    """Threads that could be read (some may have vanished while reading)."""
    pools: tuple[str, ...] | None
    """Native thread-pool libraries mapped (e.g. "libgomp", "openblas"); None = unknown."""
    thread_env: Mapping[str, str] | None
    """Thread-related environment variables only (OMP_*, MKL_*, ...); None = unknown."""
    children_cpu_ns: int = 0
    """CPU time of children this process has already reaped (stat cutime + cstime): work of
    children that lived and died between two samples, which no sample saw."""
    live_pools: Mapping[str, int] | None = None
    """Pool key -> threads the pool is set to right now, read from the process's memory
    (`oversub.probe.livesizes`), for the pools whose library exports it; None = unknown."""
    live_threads: Mapping[str, int] | None = None
    """Pool key -> threads those pools run now beside the calling thread (0 while a pool's
    threads do not exist, e.g. in a forked child before its first call); None = unknown."""
    wait: WaitKind | None = None
    """What a single-thread sleeping process with OpenMP mapped is blocked in (see
    `oversub.probe.waits`, `names.WaitKind`); None = not looked."""
    owners: Mapping[int, str] | None = None
    """tid -> the runtime that owns the thread (`oversub.core.runtimes` key, or "unattributed"),
    read from outside by `oversub.probe.owners`; None = not read."""
    wait_share: WaitShare | None = None
    """Where its busy threads' CPU went in the windows measured so far (`run.waitcost`:
    sampled while its target is oversubscribed); None = never measured."""


class ThrottleStat(NamedTuple):
    """cgroup CPU bandwidth counters (cpu.stat), cumulative."""

    nr_periods: int
    nr_throttled: int
    throttled_ns: int


class HostSample(NamedTuple):
    """Host-wide counters at one instant, cumulative."""

    busy_ns: int | None
    """CPU time spent busy by all CPUs of the host (/proc/stat, not idle/iowait/steal)."""
    steal_ns: int | None
    """Time stolen by the hypervisor, all CPUs."""
    psi_some_us: int | None
    """PSI cpu `some total` in microseconds; None without PSI."""
    throttle: ThrottleStat | None
    """Throttling of the cgroup that holds the target's quota; None without a quota."""
    observer_cpu_ns: int | None = None
    """CPU time used by oversub itself (every thread of its process), which `busy_ns` counts
    too: subtracted from "outside the tree". None when the sample is not of the real host."""


class TreeSample(NamedTuple):
    """The watched tree and the host at one instant."""

    t: float
    """Monotonic seconds, taken by the probe (analysis never reads a clock)."""
    root_pid: int
    processes: Mapping[int, ProcessSample]
    """pid -> process, the root and all its descendants that could be read."""
    host: HostSample
    unavailable: tuple[Signal, ...] = ()
    """Signals not measured: not provided by this platform/kernel ("schedstat", "psi"), or
    refused (`names.DENIED`, "live_pools")."""
    gone: bool = False
    """A target without a root process (`root_pid` 0: a cgroup) no longer exists: its
    cgroup was removed. A process tree is gone when its root is (`targets.Target.gone`)."""
