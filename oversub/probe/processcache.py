"""What a sampler caches per process identity: command line, thread variables, pools, live
pool sizes; and when each is read again.

These are a process's costly files (cmdline, environ and maps, read through the reader
process, `probe.memreader`, and the pool libraries' memory, `probe.livesizes`), cached per
identity (pid, start_ticks). environ is read once (and again after an exec), cmdline and
maps when the thread count or comm changes (libraries load on import and start their
pools; an exec renames) or every `MAPS_REFRESH_S` when the process ran since they were
read (`maps_due`, which `TreeSampler._reusable` asks too). A file refused or a read
abandoned leaves its part unknown, and the signals it feeds unavailable (`note_refused`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from oversub.core import pools
from oversub.core.names import DENIED, Signal
from oversub.probe import native
from oversub.probe.cmdline import read_cmdline
from oversub.probe.livesizes import LiveReader, LiveSizes
from oversub.probe.memreader import Readers, Unreachable
from oversub.probe.procstat import ProcStat

MAPS_REFRESH_S = 5.0
"""Re-read a process's maps at least this often even when its thread count is stable."""


@dataclass
class Known:
    """What is cached about one process identity between samples."""

    cmdline: str
    comm: str
    """comm when cmdline was read: a change means an exec."""
    thread_env: dict[str, str] | None
    pools: tuple[str, ...] | None
    maps_read_at: float
    maps_threads: int
    """Thread count when maps was last read."""
    maps_cpu_ns: int | None = None
    """CPU clock when maps was last read: not run since, nothing can have changed."""
    denied: bool = False
    """maps or environ refused (another user's process): pools and thread_env unknown."""
    live_pools: dict[str, int] | None = None
    """Live pool sizes read with maps (`probe.livesizes`); None = unknown."""
    live_threads: dict[str, int] | None = None
    """Threads those pools run now beside the caller; None = unknown."""
    live_denied: bool = False
    """Its memory may not be read (not root, not its ancestor): live sizes unknown."""
    live_unreadable: bool = False
    """A pool library it maps could not be read safely (`LiveSizes.unreadable`)."""


class ProcessCache:
    """The cached files of every process identity a sampler reads (`Known`), refreshed when
    due (`refresh`); what is read goes through `readers`, the reader process."""

    def __init__(self, root: str, readers: Readers) -> None:
        self.root = root
        self._proc = os.path.join(root, "proc")
        self._readers = readers
        self._live = LiveReader(root, readers)
        self.known: dict[tuple[int, int], Known] = {}
        """(pid, start_ticks) -> what is cached about that process."""

    def keep_only(self, tracked: Mapping[int, int]) -> None:
        """Forget every identity but those of `tracked` (pid -> start_ticks)."""
        for key in [k for k in self.known if tracked.get(k[0]) != k[1]]:
            del self.known[key]

    def refresh(
        self,
        pid: int,
        stat: ProcStat,
        raw_stat: bytes,
        n_threads: int,
        now: float,
        cpu_ns: int | None,
    ) -> Known:
        """Cached cmdline, environment and pools of a process identity, refreshed when due.

        cmdline is read when the process is new, when its comm changed (an exec), and on the
        maps schedule (an exec that kept the name) unless its CPU clock `cpu_ns` did not move
        since; environ again after an exec. A zombie's (or a process's exiting) files read
        empty: keep what was seen while it lived.
        """
        key = (pid, stat.start_ticks)
        known = self.known.get(key)
        if stat.state in ("Z", "X"):
            return known or Known("", stat.comm, None, None, now, n_threads)
        try:
            return self._refresh(pid, stat, raw_stat, n_threads, now, cpu_ns, known)
        except Unreachable:
            # A read of it did not return (`probe.memreader`), or reads stopped: none is made
            # again; its last command line, variables and pools stand (unknown when never
            # read: `denied`), its live sizes are unknown.
            known = known or Known("", stat.comm, None, None, now, n_threads, denied=True)
            known.live_pools = known.live_threads = None
            known.live_unreadable = True
            self.known[key] = known
            return known

    def _refresh(
        self,
        pid: int,
        stat: ProcStat,
        raw_stat: bytes,
        n_threads: int,
        now: float,
        cpu_ns: int | None,
        known: Known | None,
    ) -> Known:
        """`refresh` of a live process; raises `Unreachable` (its memory is not read
        any more)."""
        proc_dir, start = f"{self._proc}/{pid}", stat.start_ticks
        if self._readers.quarantined(proc_dir, start):
            raise Unreachable(proc_dir)

        def read(leaf: str, limit: int) -> bytes:
            return self._readers.read_file(proc_dir, leaf, limit, start)

        key = (pid, start)
        due = known is None or (
            known.comm != stat.comm
            or n_threads != known.maps_threads
            or maps_due(known, cpu_ns, now)
        )
        if not due:
            assert known is not None
            return known
        cmdline = read_cmdline(proc_dir, raw_stat, read)
        if known is None or (cmdline and cmdline != known.cmdline):
            # New process, or it exec'd (new cmdline): environment and libraries changed.
            known = Known(cmdline, stat.comm, None, None, now, n_threads, cpu_ns)
            try:
                known.thread_env = native.read_thread_env(pid, self.root, read)
                self._read_maps(pid, known, read, start)
            except PermissionError:
                known.denied = True
            self.known[key] = known
            return known
        try:
            self._read_maps(pid, known, read, start)
        except PermissionError:
            known.denied = True
        known.comm = stat.comm
        known.maps_read_at = now
        known.maps_threads = n_threads
        known.maps_cpu_ns = cpu_ns
        return known

    def _read_maps(self, pid: int, known: Known, read: native.Read, start: int) -> None:
        """Pools from maps and, for the libraries that export it, their live sizes.

        An exiting process's maps read empty: that must not erase what was seen.
        PermissionError (maps refused) propagates; a refused memory read only marks
        `live_denied`, the pools stand.
        """
        maps = native.read_maps(pid, self.root, read)
        if maps is None or (not maps and known.pools is not None):
            return
        found = native.pools_from_maps(maps)
        if found or known.pools is None:
            known.pools = found
        if not any(pools.POOLS_BY_KEY[k].live_symbol for k in found):
            return
        try:
            live = self._live.read(pid, maps, start)
        except PermissionError:
            known.live_denied = True
            return
        except Unreachable:
            raise
        except Exception:  # the per-process boundary: what one process maps
            # must not stop the sampling of the others (the reader is meant never to raise).
            live = LiveSizes({}, {}, {"": "the live read failed"})
        known.live_unreadable = bool(live.unreadable)
        if live.sizes:
            known.live_pools, known.live_threads = live.sizes, live.extra
        elif live.unreadable and known.live_pools is None:
            # Memory readable, a library's file not: its size is unknown, and then its
            # thread count is no evidence of it (`analysis.poolsize`): an empty reading.
            known.live_pools, known.live_threads = {}, {}


def maps_due(known: Known, cpu_ns: int | None, now: float) -> bool:
    """Maps (and cmdline) are due on their schedule, unless the process did not run since
    they were read (mapping a library, exec'ing, starting a pool: all need it to run)."""
    if now - known.maps_read_at < MAPS_REFRESH_S:
        return False
    return cpu_ns is None or cpu_ns != known.maps_cpu_ns


def note_refused(known: Known, unavailable: list[Signal]) -> None:
    """The signals a process's refused files leave unmeasured, from its cached state."""
    if known.denied:
        unavailable.extend(k for k in DENIED if k not in unavailable)
    if (known.live_denied or known.live_unreadable) and Signal.LIVE_POOLS not in unavailable:
        unavailable.append(Signal.LIVE_POOLS)
