"""What backs another process's memory, and which of its bytes oversub may read.

A read of `/proc/PID/mem` faults in the pages it touches as the process's own access would:
a page of a file mapping that is not in memory is read from its file system then, and the
reader waits for that file system. A FUSE file system is served by a user's process, which
may never answer: the reader then sleeps uninterruptibly (state D: not even SIGKILL ends it)
for as long as that server lives; a network file system (NFS, CIFS, 9p, Ceph, Lustre) may
hang as long as its server is away (issue 38). So before any read of another process's
memory (`probe.owners`, `probe.startroutine`, `probe.livesizes`), every byte it touches must
lie in memory whose faults wait for no one oversub does not trust:

- anonymous memory (maps' device 00:00: heaps, thread stacks, anonymous mappings). A range a
  process registered with userfaultfd fails at once with EIO instead of waiting for its
  handler: the kernel's remote-access path (`access_remote_vm`) does not allow the fault to
  be retried, which userfaultfd needs to wait (measured on Linux 6.18, as root, whose
  userfaultfd may handle kernel faults whatever `vm.unprivileged_userfaultfd` says);
- a file mapping whose device (maps' major:minor) is a local disk or memory file system
  (`LOCAL_FILE_SYSTEMS`) in the process's `/proc/PID/mountinfo`, read after its maps: a
  mapping holds its file system, so its device cannot name another one in between. A device
  that namespace does not list (a container's libraries on its host's disk) is looked up in
  the mount namespace of the host's init (`/proc/1/mountinfo`). An overlay (a container's
  root) only when the host's namespace mounts it, which only root can do: a user can mount
  one over a FUSE directory of its own in a user namespace.

Anything else is never read: FUSE (`fuse`, `fuseblk`, `fuse.*`), network file systems,
devices, shared memory objects (memfd, SysV: no mount lists them), unknown types, a device
of neither namespace, and every mapping of a process whose mountinfo exceeds its bound. A read
is cut where readable bytes end. The same rule decides which mapped files may be opened
(`probe.livesizes` reads a library's symbols): an open or a stat on FUSE waits as a read does.

What this cannot see: a mapping replaced between the reading of maps and the read itself
(the reads are made by `probe.memreader`'s reader process, which oversub abandons when a read
does not return), and a local file system on a device a user serves (a loop device of a
FUSE file, NBD: docs/security.md, "Limits").
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable

LOCAL_FILE_SYSTEMS = frozenset(
    {
        b"ext2",
        b"ext3",
        b"ext4",
        b"xfs",
        b"btrfs",
        b"f2fs",
        b"jfs",
        b"reiserfs",
        b"nilfs2",
        b"bcachefs",
        b"zfs",
        b"squashfs",
        b"erofs",
        b"iso9660",
        b"udf",
        b"vfat",
        b"msdos",
        b"exfat",
        b"ntfs3",
        b"hfsplus",
        b"tmpfs",
        b"ramfs",
    }
)
"""File systems whose pages come from a local disk or from memory, never from a server."""
OVERLAY = b"overlay"
MOUNTINFO_MAX = 4 << 20
"""Bytes of a mountinfo file read at most; a larger one makes every file mapping unreadable."""
_ANONYMOUS = b"00:00"

Mapping = tuple[int, int, bytes, bytes, bytes]
"""One line of maps: (start, end, permissions, device "major:minor" in hex, path or b"")."""


class OverBudget(Exception):
    """The reads allowed for this process in this sample are spent (or its reader gave up
    on it: `probe.memreader.Unreachable`)."""


def parse_maps(maps: bytes) -> list[Mapping]:
    """Every well-formed line of a maps file, in its order (by address)."""
    out: list[Mapping] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        lo, _, hi = fields[0].partition(b"-")
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            continue
        path = fields[5].strip() if len(fields) == 6 else b""
        out.append((start, end, fields[1], fields[3], path))
    return out


def mappings_from(maps: bytes, at: int, lines: int = 64) -> list[Mapping]:
    """`parse_maps` of at most `lines` lines from byte `at` (a line's start) on: the mappings
    that follow one (a library's segments follow its first line), without parsing the rest."""
    end = at
    for _ in range(lines):
        end = maps.find(b"\n", end) + 1
        if end == 0:
            end = len(maps)
            break
    return parse_maps(maps[at:end])


def mount_types(mountinfo: bytes) -> dict[int, bytes]:
    """st_dev -> file system type of every mount of a mountinfo text (a device mounted twice
    has one type: its superblock's)."""
    found: dict[int, bytes] = {}
    for line in mountinfo.split(b"\n"):
        head, sep, tail = line.partition(b" - ")
        fields = head.split()
        kind = tail.split(maxsplit=1)
        if not sep or len(fields) < 3 or not kind:
            continue
        major, _, minor = fields[2].partition(b":")
        try:
            found[os.makedev(int(major), int(minor))] = kind[0]
        except (ValueError, OverflowError):
            continue
    return found


def read_mount_types(path: str) -> dict[int, bytes] | None:
    """`mount_types` of a mountinfo file; None when it is larger than `MOUNTINFO_MAX` (its
    mounts cannot all be known), empty when it cannot be read (gone, or a fake tree)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return {}
    chunks, total = [], 0
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            total += len(chunk)
            if total > MOUNTINFO_MAX:
                return None
    except OSError:
        return {}
    finally:
        os.close(fd)
    return mount_types(b"".join(chunks))


def device_number(field: bytes | str) -> int | None:
    """st_dev of maps' "major:minor" (hex); None when it does not parse."""
    major, _, minor = (field.encode() if isinstance(field, str) else field).partition(b":")
    try:
        return os.makedev(int(major, 16), int(minor, 16))
    except (ValueError, OverflowError):
        return None


class Mounts:
    """Judges the devices of one process's file mappings against its mount namespace and the
    host's. `proc_dir` is /proc/PID; `host` gives the host's `mount_types` (read once per
    sample by its caller). The process's mountinfo is read at the first judgement, so after
    the maps being judged were read."""

    def __init__(
        self, proc_dir: str, host: Callable[[], dict[int, bytes] | None] | None = None
    ) -> None:
        self._path = f"{proc_dir}/mountinfo"
        self._host = host
        self._own: dict[int, bytes] | None = None
        self._too_many = False
        self._judged: dict[bytes, bool] = {}

    def readable(self, device: bytes) -> bool:
        """May a file mapping on `device` (maps' field) be read or opened?"""
        known = self._judged.get(device)
        if known is None:
            if len(self._judged) >= 4096:  # the devices are the process's to choose
                self._judged.clear()
            known = self._judged[device] = self._judge(device)
        return known

    def refusal(self, device: bytes) -> str:
        """Why a file on `device` is not touched (for `readable` False)."""
        self.readable(device)  # its mountinfo read
        number = device_number(device)
        if self._too_many:
            return "its mounts could not all be known (mountinfo over its bound)"
        kind = (self._own or {}).get(number) if number is not None else None
        if kind is None:
            return "on a file system no mount table lists"
        name = kind.decode("ascii", "replace")
        if kind in (b"fuse", b"fuseblk") or kind.startswith(b"fuse."):
            return f"on a FUSE file system ({name}: its server decides when a read returns)"
        return f"on a file system that may not answer ({name})"

    def _judge(self, device: bytes) -> bool:
        number = device_number(device)
        if number is None:
            return False
        host = self._host() if self._host is not None else None
        if os.major(number) != 0 and host and host.get(number) in LOCAL_FILE_SYSTEMS:
            # A disk's file system is the same in every namespace (a block device holds one
            # superblock): the host's table, read once per sample, says what it is.
            return True
        if self._own is None and not self._too_many:
            own = read_mount_types(self._path)
            self._too_many = own is None
            self._own = own or {}
        if self._too_many:
            return False
        assert self._own is not None
        kind = self._own.get(number)
        if kind in LOCAL_FILE_SYSTEMS:
            return True
        if kind is not None and kind != OVERLAY:
            return False
        host_kind = host.get(number) if host else None
        if kind is None:
            return host_kind in LOCAL_FILE_SYSTEMS or host_kind == OVERLAY
        return host_kind == OVERLAY  # an overlay the host's namespace mounts: root's


class AddressSpace:
    """The mappings of one reading of a process's maps, and which bytes of them may be read."""

    def __init__(self, mappings: list[Mapping], mounts: Mounts) -> None:
        self._mappings = sorted(mappings)  # the kernel's order already: a linear pass
        self._starts = [m[0] for m in self._mappings]
        self._mounts = mounts

    def span(self, address: int, length: int) -> int:
        """How many bytes from `address` (at most `length`) may be read: they all lie in
        readable mappings with no gap between them; 0 when the first byte does not."""
        mappings = self._mappings
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0:
            return 0
        start, end, _, device, _ = mappings[i]
        stop = address + length
        if address >= end or (device != _ANONYMOUS and not self._mounts.readable(device)):
            return 0
        if stop <= end:
            return length  # the usual case: one mapping holds it all
        at = end
        i += 1
        while at < stop and i < len(mappings):
            start, end, _, device, _ = mappings[i]
            if not start <= at < end:
                break
            if device != _ANONYMOUS and not self._mounts.readable(device):
                break
            at = end
            i += 1
        return max(0, min(at, stop) - address)


Fetch = Callable[[list[tuple[int, int]]], list[bytes]]
"""Reads of a process's memory, as a batch: the bytes at each (address, length), b"" where
a read failed. The readers give one that reads in the reader process (`probe.memreader`):
what this module allows is judged from maps read a moment before, and the process may have
remapped those addresses since."""


class Memory:
    """Reads of one process's memory through `fetch` that touch only what `space` allows,
    within budgets of bytes and of reads (for one sample of that process; `OverBudget` past
    them, or when `fetch` can no longer read it)."""

    def __init__(self, fetch: Fetch, space: AddressSpace, max_bytes: int, max_reads: int) -> None:
        self._fetch = fetch
        self.space = space
        self.bytes_left = max_bytes
        self.reads_left = max_reads
        self._ahead: dict[tuple[int, int], bytes] = {}

    def prefetch(self, wanted: list[tuple[int, int]]) -> None:
        """Read now, in one batch, each (address, length) of `wanted` as `read` would, in
        order while the budgets last; `read` of the same (address, length) then gives those
        bytes (once) without reading again."""
        batch: list[tuple[int, int, int]] = []
        for address, length in wanted:
            if address < 0 or length <= 0:
                continue
            n = self.space.span(address, length)
            if n == 0:
                continue
            if self.reads_left <= 0 or self.bytes_left < n:
                break
            self.reads_left -= 1
            self.bytes_left -= n
            batch.append((address, n, length))
        if batch:
            try:
                got = self._fetch([(a, n) for a, n, _ in batch])
            except OSError:  # gone: each `read` then fails as it would have
                got = [b""] * len(batch)
            for (address, _, length), data in zip(batch, got, strict=False):
                self._ahead[(address, length)] = data

    def read(self, address: int, length: int) -> bytes:
        """The readable bytes from `address` (fewer than `length` where they end: none when
        the first one may not be read, or the read fails)."""
        ahead = self._ahead.pop((address, length), None)
        if ahead is not None:
            return ahead
        if address < 0 or length <= 0:
            return b""
        n = self.space.span(address, length)
        if n == 0:
            return b""
        if self.reads_left <= 0 or self.bytes_left < n:
            raise OverBudget
        self.reads_left -= 1
        self.bytes_left -= n
        try:
            return self._fetch([(address, n)])[0]
        except OverBudget:
            raise
        except (OSError, IndexError):
            return b""
