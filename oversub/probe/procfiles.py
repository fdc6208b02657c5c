"""How oversub reads /proc files: whole, bounded, and held open between samples.

A small file generated in one go comes in one read (`read_small`), a seq_file that the
kernel hands out a page at a time is read to its end (`read_all`), and a held descriptor
is re-read from offset 0 with pread (`pread_all`: procfs regenerates the file on each
pass). The sampler holds its per-thread files open between samples (`HeldFiles`), within
one budget of descriptors shared with `probe.proctree.StatScanner` (`descriptor_budget`,
from the soft RLIMIT_NOFILE that `oversub` raises at start: `run.fdlimit`).
"""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Hashable

NO_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
"""errno of an open refused for want of file descriptors (this process's limit, or the
system's): what was not opened was not seen, which is not the same as gone."""


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


def pread_all(fd: int, size: int = 16384) -> bytes:
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
"""Bytes a held file is read with first (`pread_all`'s default): more than any status."""


PROGRAM_FDS = 512
"""Descriptors of the soft RLIMIT_NOFILE left to the rest of the program (streams, pipes,
`serve`'s connections, reports), never held: at most this many, and under a low limit
three eighths of it."""
HELD_MAX = 1 << 17
"""The most per-thread files held open at once, however high the limit: about 400 bytes of
kernel memory each (measured), so 50 MiB at this bound (65,536 threads read every sample)."""


def descriptor_budget() -> int:
    """Descriptors one sampler may hold open between samples: the soft RLIMIT_NOFILE but what
    `PROGRAM_FDS` leaves the rest of the program, at most `HELD_MAX` and its
    `proctree.StatScanner` share; 0 where the limit is unknown. `oversub.launch` raises the
    soft limit to the hard one first (`run.fdlimit`): at a soft limit of 1,024 this is 640,
    at 20,000 it is 19,488. `proctree.StatScanner` may hold a fifth of it, `HeldFiles` the
    rest of it (`TreeSampler` gives the thread files whatever the scanner does not hold)."""
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
                    data = pread_all(fd, _HELD_READ)
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
            data = os.pread(fd, _HELD_READ, 0)  # pread_all inlined: one call less per file
            if len(data) == _HELD_READ:
                data = pread_all(fd, _HELD_READ)
        except BaseException:
            os.close(fd)
            raise
        if data and self._room > 0:
            self._kept[path] = fd
            self._room -= 1
        else:
            os.close(fd)
        return data
