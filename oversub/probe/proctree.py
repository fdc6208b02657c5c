"""Find a process tree with one pass over `/proc/*/stat`.

psutil's `children(recursive=True)` walks the tree one process at a time (4.1 ms for 51
processes, docs/signals.md); one scan of every `/proc/PID/stat` costs 1.8 ms and also hands
the sampler each process's stat line, which it would otherwise read again.

Everything takes `root` (default "/") prefixed to `/proc`, so tests can build fake trees.
"""

from __future__ import annotations

import errno
import os
import time
import weakref
from collections.abc import Hashable, Iterable, Mapping
from typing import NamedTuple

# Clock ticks per second of /proc times (USER_HZ, 100 nearly everywhere). Windows has no
# sysconf; nothing there reads /proc, the fallback only keeps imports working.
CLK_TCK: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


NO_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
"""errno of an open refused for want of file descriptors (this process's limit, or the
system's): what was not opened was not seen, which is not the same as gone."""


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


def read_small(path: str, dir_fd: int | None = None, size: int = 8192) -> bytes:
    """Whole content of a small /proc file with os.open/os.read (faster than open().read()).

    For files generated in one go (stat, status, schedstat, cmdline of a small process): a
    short read is the whole file. Multi-page seq_files (maps, environ) need `read_all`.
    Raises OSError like os.open.
    """
    fd = os.open(path, os.O_RDONLY, dir_fd=dir_fd)
    try:
        data = os.read(fd, size)
        if len(data) < size:
            return data
        chunks = [data]
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_all(path: str) -> bytes:
    """Whole content of a /proc file that the kernel hands out a page at a time.

    maps, environ and /proc/stat are seq_files: a read may return less than the buffer even
    though more follows, so (unlike `read_small`) read until end of file.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def scan_stats(root: str = "/") -> dict[int, bytes]:
    """pid -> raw `/proc/PID/stat` line for every process that could be read.

    Processes that vanish or deny access during the scan are left out silently.
    """
    proc = os.path.join(root, "proc")
    stats: dict[int, bytes] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            data = read_small(f"{proc}/{name}/stat")
        except OSError:
            continue
        if data:
            stats[int(name)] = data
    return stats


def _close_held(box: list[dict[str, int]], main: dict[int, int]) -> None:
    for fd in [*box[0].values(), *main.values()]:
        os.close(fd)
    box[0] = {}
    main.clear()


class StatScanner:
    """`scan_stats` for a sampler that scans every second: each `/proc/PID/stat` stays open
    between scans and is re-read with pread (procfs regenerates it on each read), which
    spares the open and the close of every process on the node at every sample (about 1.9
    against 0.9 ms for 250 processes, measured).

    A descriptor pins its process: once that process is reaped it reads ESRCH (or nothing),
    and the path is opened again, since the pid may now name another process. Descriptors
    of pids that left the listing are closed at each scan. At most `max_fds` are held
    (default: a fifth of `descriptor_budget`); beyond that the files are opened for each
    scan. `close()` (or garbage collection) closes them all.
    `reread` holds descriptors of its own, within the same `max_fds`.
    """

    def __init__(self, root: str = "/", max_fds: int | None = None) -> None:
        self._proc = os.path.join(root, "proc")
        self.max_fds = descriptor_budget() // 5 if max_fds is None else max_fds
        self.missed = False
        """The last scan left a process out: no descriptor to open its stat with."""
        self._box: list[dict[str, int]] = [{}]
        """[pid as listed -> held descriptor], a box the finalizer shares."""
        self._main: dict[int, int] = {}
        """pid -> held descriptor of its main thread's stat line (`reread`)."""
        self._finalizer = weakref.finalize(self, _close_held, self._box, self._main)

    def __len__(self) -> int:
        return len(self._box[0])

    def holding(self) -> int:
        """Descriptors held now: the scan's and `reread`'s."""
        return len(self._box[0]) + len(self._main)

    def scan(self) -> dict[int, bytes]:
        """pid -> raw stat line for every process that could be read (`scan_stats`);
        `missed` tells whether one was left out for want of file descriptors."""
        self.missed = False
        old = self._box[0]
        names = os.listdir(self._proc)
        held: dict[str, int] = {}
        stats: dict[int, bytes] = {}
        try:
            self._scan(names, old, held, stats)
        except BaseException:  # interrupted: every descriptor stays closable
            old.update(held)
            raise
        for fd in old.values():
            os.close(fd)  # processes that left the listing
        self._box[0] = held
        for pid in self._main.keys() - stats.keys():
            os.close(self._main.pop(pid))  # and their main threads' (`reread`)
        return stats

    def reread(self, tracked: Mapping[int, int]) -> dict[int, bytes] | None:
        """pid -> the stat line of the main thread of each `tracked` process (pid -> start
        time), without listing /proc (`TreeSampler`: when no process of the tree can have
        started one); None when one is gone, is no longer the process tracked, or cannot
        be held: then `scan`.

        The main thread's line (`/proc/PID/task/PID/stat`) shows what the process's shows
        but for the CPU and fault counters, which are that thread's own: the state (a
        process's is its main thread's), comm, parent, thread count, reaped children's
        time, start time and argv bounds. The kernel does not add up every thread's
        counters for it: 7.8 against 12.1 µs for a process of 20 threads (measured). Each
        descriptor is opened once and checked to be the tracked process (the pid may have
        been reused since the scan); from then on it pins that process, as `scan`'s do."""
        main = self._main
        for pid in main.keys() - tracked.keys():
            os.close(main.pop(pid))  # no longer tracked
        stats: dict[int, bytes] = {}
        for pid, start in tracked.items():
            fd = main.get(pid)
            try:
                if fd is None:
                    if len(self._box[0]) + len(main) >= self.max_fds:
                        return None
                    fd = main[pid] = os.open(f"{self._proc}/{pid}/task/{pid}/stat", os.O_RDONLY)
                    data = os.pread(fd, 4096, 0)
                    if start_of(data) != start:
                        os.close(main.pop(pid))
                        return None  # another process now
                else:
                    data = os.pread(fd, 4096, 0)
            except OSError:
                return None
            if not data or len(data) >= 4096:
                return None
            stats[pid] = data
        self.missed = False
        return stats

    def _scan(
        self, names: list[str], old: dict[str, int], held: dict[str, int], stats: dict[int, bytes]
    ) -> None:
        # Runs for every process on the node at every sample: keep it lean.
        proc, room = self._proc, self.max_fds
        pread, close, pop = os.pread, os.close, old.pop
        for name in names:
            fd = pop(name, None)
            if fd is not None:
                try:
                    data = pread(fd, 4096, 0)
                except OSError:
                    data = b""
                if data and len(data) < 4096:
                    held[name] = fd
                    stats[int(name)] = data
                    continue
                close(fd)  # reaped (the pid may name another process now), or a long line
            elif not name.isdigit():
                continue
            try:
                fd = os.open(f"{proc}/{name}/stat", os.O_RDONLY)
            except OSError as exc:
                if exc.errno in NO_DESCRIPTORS:
                    self.missed = True
                continue
            try:
                data = _pread_all(fd, 4096)
            except OSError:
                close(fd)
                continue
            except BaseException:
                close(fd)
                raise
            if data and len(data) < 4096 and len(held) < room:
                held[name] = fd
            else:
                close(fd)
            if data:
                stats[int(name)] = data

    def close(self) -> None:
        """Close every held descriptor (a later `scan` opens them again)."""
        _close_held(self._box, self._main)


def ppids_of(stats: Mapping[int, bytes]) -> dict[int, int]:
    """pid -> ppid from raw stat lines (malformed lines are left out)."""
    ppids: dict[int, int] = {}
    for pid, data in stats.items():
        close = data.rfind(b")")  # after comm, which may hold ')' (see _after_comm)
        if close < 0:
            continue
        try:
            ppids[pid] = int(data[close + 2 :].split(None, 2)[1])  # field 4, split no further
        except (ValueError, IndexError):
            continue
    return ppids


def read_ppids(root: str = "/") -> dict[int, int]:
    """pid -> ppid for every process on the system, from one scan of `/proc/*/stat`."""
    return ppids_of(scan_stats(root))


def _walk(seeds: Iterable[int], ppids: Mapping[int, int]) -> set[int]:
    """`seeds` and everything below them in the parent -> child graph of `ppids`."""
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(seeds)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue  # a pid reached from two seeds (sticky orphans) is walked once
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def subtree(roots: Iterable[int], ppids: Mapping[int, int]) -> set[int]:
    """The pids of `roots` that exist in `ppids`, plus all their descendants."""
    return _walk((pid for pid in roots if pid in ppids), ppids)


def descendants(root_pid: int, ppids: Mapping[int, int]) -> set[int]:
    """Children, grandchildren, ... of `root_pid` (not `root_pid` itself)."""
    found = _walk([root_pid], ppids)
    found.discard(root_pid)
    return found


def _pread_all(fd: int, size: int = 16384) -> bytes:
    """Whole content of a procfs file from offset 0 (procfs regenerates it on each pass)."""
    data = os.pread(fd, size, 0)
    if len(data) < size:
        return data
    chunks = [data]
    offset = len(data)
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


_HELD_READ = 16384
"""Bytes a held file is read with first (`_pread_all`'s default): more than any status."""


PROGRAM_FDS = 512
"""Descriptors of the soft RLIMIT_NOFILE left to the rest of the program (streams, pipes,
`serve`'s connections, reports), never held: at most this many, and under a low limit
three eighths of it."""
HELD_MAX = 1 << 17
"""The most per-thread files held open at once, however high the limit: about 400 bytes of
kernel memory each (measured), so 50 MiB at this bound (65,536 threads read every sample)."""


def descriptor_budget() -> int:
    """Descriptors one sampler may hold open between samples: the soft RLIMIT_NOFILE but what
    `PROGRAM_FDS` leaves the rest of the program, at most `HELD_MAX` and its `StatScanner`
    share; 0 where the limit is unknown. `oversub.launch` raises the soft limit to the hard
    one first (`run.fdlimit`): at a soft limit of 1,024 this is 640, at 20,000 it is
    19,488. `StatScanner` may hold a fifth of it, `HeldFiles` the rest of it
    (`TreeSampler` gives the thread files whatever the scanner does not hold)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    spare = soft - min(soft * 3 // 8, PROGRAM_FDS)
    return max(0, min(spare, HELD_MAX + HELD_MAX // 4))


def _default_max_fds() -> int:
    """`HeldFiles`' default: four fifths of `descriptor_budget`."""
    return descriptor_budget() * 4 // 5


def _close_all(groups: dict[Hashable, dict[str, int]]) -> None:
    for fds in groups.values():
        for fd in fds.values():
            os.close(fd)
    groups.clear()


class HeldFiles:
    """File descriptors of per-thread /proc files kept open between samples, by group (a
    process: its identity, e.g. (pid, start_ticks)) and path (e.g. "TID/schedstat").

    `pread(fd, 0)` makes procfs regenerate a file: about half the cost of open+read+close
    (7.7 vs 15 µs per thread for status + schedstat, measured). A descriptor pins its task,
    so once the thread has exited it reads ESRCH, and a reused tid is never read through an
    old descriptor. At most `max_fds` stay open between readings (default:
    `_default_max_fds`; while a group is read, the files it held and does not read again
    stay open until its reading ends). Past the cap it degrades a group at a time, never for
    the whole sample: the groups read after it was reached open, read and close their files
    at each reading, while those that hold theirs keep them, and a group's place follows
    the files it reads (a thread that ran reads `status` where it read `stat`: the one
    takes the other's place).

    A group is read through `files(group, dir_fd, hold)`: what it reads is held (when
    `hold`), and when it is done, whatever it held and did not read (an exited thread's, a
    file it read the last time only) is closed. `end_sample()` closes the groups neither
    read nor `keep`t since the previous call: a kept group costs nothing, however many
    files it holds.
    """

    def __init__(self, max_fds: int | None = None) -> None:
        self.max_fds = _default_max_fds() if max_fds is None else max_fds
        self._groups: dict[Hashable, dict[str, int]] = {}
        """group -> path -> descriptor."""
        self._count = 0
        self._touched: set[Hashable] = set()
        """The groups read or kept in this sample."""
        # Closes the descriptors when the owner forgets to call close().
        self._finalizer = weakref.finalize(self, _close_all, self._groups)

    def __len__(self) -> int:
        return self._count

    def files(self, group: Hashable, dir_fd: int | None = None, hold: bool = True) -> GroupFiles:
        """The reader of `group`'s files, relative to `dir_fd`; use it in a `with` block.
        `hold`: keep what it opens (within `max_fds`); otherwise it opens, reads and
        closes."""
        held = self._groups.pop(group, None) or {}
        self._count -= len(held)
        # Room for every file of this reading, those it held included: a file it held and
        # does not read again (a thread gone, or read through another file now) leaves its
        # place to one it reads instead, and no other group's place is taken.
        room = self.max_fds - self._count if hold else 0
        return GroupFiles(self, group, dir_fd, held, room)

    def _give_back(self, group: Hashable, kept: dict[str, int], stale: dict[str, int]) -> None:
        for fd in stale.values():
            os.close(fd)
        self._touched.add(group)
        if kept:
            self._groups[group] = kept
            self._count += len(kept)

    def keep(self, group: Hashable) -> None:
        """Count every file of `group` as read in this sample: its descriptors stay open
        although the owner reused an earlier reading instead of reading them again."""
        self._touched.add(group)

    def end_sample(self) -> None:
        """Close the descriptors of the groups neither read nor kept since the last call."""
        for group in [g for g in self._groups if g not in self._touched]:
            fds = self._groups.pop(group)
            self._count -= len(fds)
            for fd in fds.values():
                os.close(fd)
        self._touched.clear()

    def close(self) -> None:
        """Close every held descriptor."""
        _close_all(self._groups)
        self._count = 0
        self._touched.clear()


class GroupFiles:
    """One group's files while it is read (`HeldFiles.files`): `read(path)` goes through
    the descriptor held for `path`, or opens it. Leaving the `with` block gives back what
    is to be held and closes the rest, also when the block raised."""

    __slots__ = ("_dir_fd", "_group", "_held", "_kept", "_owner", "_room")

    def __init__(
        self, owner: HeldFiles, group: Hashable, dir_fd: int | None, held: dict[str, int], room: int
    ) -> None:
        self._owner = owner
        self._group = group
        self._dir_fd = dir_fd
        self._held = held
        """Descriptors held from the last reading and not read yet."""
        self._kept: dict[str, int] = {}
        """Descriptors read in this one, to hold."""
        self._room = room

    def __enter__(self) -> GroupFiles:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._owner._give_back(self._group, self._kept, self._held)
        self._held = self._kept = {}

    def read(self, path: str) -> bytes:
        """Content of `path`. Raises OSError like os.open when it cannot be opened."""
        fd = self._held.pop(path, None)
        if fd is not None:
            try:
                data = os.pread(fd, _HELD_READ, 0)
                if len(data) == _HELD_READ:
                    data = _pread_all(fd, _HELD_READ)
            except OSError:
                data = b""
            if data:
                if self._room > 0:
                    self._kept[path] = fd
                    self._room -= 1
                else:
                    os.close(fd)  # the group reads more files than it may hold now
                return data
            # The task behind the old descriptor is gone; the path may name a new one.
            os.close(fd)
        fd = os.open(path, os.O_RDONLY, dir_fd=self._dir_fd)
        try:
            data = os.pread(fd, _HELD_READ, 0)  # _pread_all inlined: one call less per file
            if len(data) == _HELD_READ:
                data = _pread_all(fd, _HELD_READ)
        except BaseException:
            os.close(fd)
            raise
        if data and self._room > 0:
            self._kept[path] = fd
            self._room -= 1
        else:
            os.close(fd)
        return data
