"""Sampled program counters of a process -> the objects, functions and spin loops they lie in.

The PCs come from the kernel (`probe.perfpc`); nothing of the process's memory is read. Its
`/proc/PID/maps` (read once, after the window, at most `MAX_MAPS` bytes) gives the object
whose executable mapping holds each PC. The object's file then gives two facts, read only
where `probe.backing` says its file system answers (no FUSE, no network file system) and
only through a descriptor that is the mapped file itself (`FileAccess.open_library`, by the
`routes` livesizes takes). Where maps are read and files opened is the caller's choice
(`FileAccess`): in this process by default, or in the reader process that a read which never
returns cannot hold (`probe.memreader`).

- the function: the symbol whose code covers the PC, from the file's `.symtab`, else
  `.dynsym`, and its MiniDebugInfo (`probe.elf.function_symbols`, strict and bounded);
  each file's table is kept for later windows, within `MAX_TABLE_BYTES` in all;
- the spin hint: a spin-wait instruction lies in the `LOOP` bytes before the PC: x86's
  PAUSE (`f3 90`: libgomp's barrier loop, 16 bytes with the PAUSE first) or a run of 4
  single-byte NOPs (a deliberate delay: OpenBLAS's YIELDING, in its server's and
  `inner_thread`'s flag loops); AArch64's YIELD, WFE or ISB. A timer interrupt lands after
  the instruction that was running, and a spinning thread spends its time in these. A PC
  up to `LOOP` bytes before a hinted PC of the same window is the head of that loop and
  counts too (docs/signals.md, "Where a busy thread's CPU goes").

Everything read is bounded: maps 16 MiB, `MAX_OBJECTS` objects and `MAX_PCS` distinct PCs
per window, `LOOP` bytes of file per PC; a failure leaves a function unknown, never raises.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from oversub.core.pcprofile import MAX_BUCKETS, ObjectSamples, PcBucket
from oversub.probe.backing import Mounts, OverBudget, device_number, read_mount_types
from oversub.probe.elf import FunctionTable, NotReadable, function_symbols

MAX_MAPS = 16 << 20
"""Bytes of /proc/PID/maps read at most."""
MAX_OBJECTS = 32
"""Objects whose files are opened per window (the rest keep their path and counts)."""
MAX_PCS = 4096
"""Distinct PCs whose hint bytes are read per window (the rest count without a hint)."""
MAX_HINTS = 1 << 16
"""File offsets whose spin hint is remembered between windows (the oldest go first)."""
MAX_TABLE_BYTES = 16 << 20
"""Function tables kept between windows, about this many bytes in all (least recent out)."""
LOOP = 16
"""Bytes before a PC searched for a spin-wait instruction (and before a hinted PC, for the
head of its loop)."""

_O_PATH: int | None = getattr(os, "O_PATH", None)
_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_ARCH = os.uname().machine.lower()
_X86 = _ARCH in ("x86_64", "amd64", "i386", "i686")
_ARM64 = _ARCH in ("aarch64", "arm64")
_X86_HINTS = (b"\xf3\x90", b"\x90\x90\x90\x90")  # PAUSE; four one-byte NOPs
_ARM64_HINTS = (
    b"\x3f\x20\x03\xd5",  # YIELD
    b"\x5f\x20\x03\xd5",  # WFE
    b"\xdf\x3f\x03\xd5",  # ISB SY
)


class FileAccess(Protocol):
    """How the mapper reads a process's maps and opens its objects: in this process
    (`DirectFiles`), or through the reader process that a read which never returns cannot
    hold (`probe.memreader.Readers`, which has these two methods). Both may raise OSError
    (gone, refused) or `OverBudget` (the process is not read any more)."""

    def read_file(self, proc_dir: str, leaf: str, limit: int, start: int | None = None) -> bytes:
        """At most `limit` bytes of `proc_dir`/`leaf`."""
        ...

    def open_library(
        self, proc_dir: str, routes: list[tuple[str, int]], device: int, inode: int
    ) -> tuple[int, int] | str:
        """The first of `routes` ((path, extra open flags)) that is the regular file
        `device`:`inode`, open for reading, and its size; or why none is."""
        ...


class DirectFiles:
    """`FileAccess` in this process: each route first opened with O_PATH (which opens
    nothing: no FIFO to wait on, no device, no terminal), then opened for reading only when
    it is the regular file of maps' device and inode, as `probe.livesizes` opens a
    library."""

    def read_file(self, proc_dir: str, leaf: str, limit: int, start: int | None = None) -> bytes:
        fd = os.open(f"{proc_dir}/{leaf}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
        chunks, total = [], 0
        try:
            while total < limit and (chunk := os.read(fd, min(1 << 20, limit - total))):
                chunks.append(chunk)
                total += len(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks)

    def open_library(
        self, proc_dir: str, routes: list[tuple[str, int]], device: int, inode: int
    ) -> tuple[int, int] | str:
        if _O_PATH is None:
            return "no O_PATH on this system"
        why = []
        for path, flags in routes:
            route = "map_files" if "/map_files/" in path else "path"
            opened = _open_route(path, flags, device, inode)
            if not isinstance(opened, str):
                return opened
            why.append(f"{route}: {opened}")
        return "; ".join(why) or "no way to open it"


class Mapped(NamedTuple):
    """One executable mapping of maps."""

    start: int
    end: int
    offset: int
    """File offset of `start`."""
    device: bytes
    inode: int
    path: str
    """As the process sees it, without " (deleted)"; "[vdso]", "" for anonymous code."""
    deleted: bool
    load: int | None
    """Start of the file's mapping at offset 0 (its load base in memory), None unknown."""


def executable_mappings(maps: bytes) -> list[Mapped]:
    """The executable mappings of a maps text, by address, each with its file's load base.
    Only the executable lines and those at file offset 0 are parsed (a NumPy process maps
    hundreds of files, and reads a window's maps whole)."""
    rows: list[tuple[int, int, int, bytes, int, bytes]] = []
    loads: dict[tuple[bytes, int, bytes], int] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        executable = b"x" in fields[1][:3]
        if not executable and fields[2].strip(b"0"):
            continue  # neither code nor a load base
        lo, _, hi = fields[0].partition(b"-")
        try:
            start, end = int(lo, 16), int(hi, 16)
            offset, inode = int(fields[2], 16), int(fields[4])
        except ValueError:
            continue
        raw = fields[5].strip() if len(fields) == 6 else b""
        if offset == 0 and inode and (fields[3], inode, raw) not in loads:
            loads[(fields[3], inode, raw)] = start
        if executable:
            rows.append((start, end, offset, fields[3], inode, raw))
    found = []
    for start, end, offset, device, inode, raw in rows:
        path = raw.decode("utf-8", "surrogateescape")
        deleted = path.endswith(" (deleted)")
        name = path.removesuffix(" (deleted)")
        load = loads.get((device, inode, raw))
        found.append(Mapped(start, end, offset, device, inode, name, deleted, load))
    found.sort()
    return found


def hint_before(code: bytes, arch: str = _ARCH) -> bool:
    """Does `code` (the bytes that end just before a PC, at most `LOOP` of them) hold a
    spin-wait instruction of `arch`?"""
    if arch in ("x86_64", "amd64", "i386", "i686"):
        return any(h in code for h in _X86_HINTS)
    if arch in ("aarch64", "arm64"):
        # Instructions are 4 bytes, aligned: the words that end at the PC.
        start = len(code) % 4
        return any(code[i : i + 4] in _ARM64_HINTS for i in range(start, len(code), 4))
    return False


class PcMapper:
    """Maps the PCs of one window to `ObjectSamples`; keeps each file's function table."""

    def __init__(
        self,
        root: str = "/",
        files: FileAccess | None = None,
        max_table_bytes: int = MAX_TABLE_BYTES,
    ) -> None:
        self.root = root
        self.files: FileAccess = files if files is not None else DirectFiles()
        self._tables: OrderedDict[tuple[bytes, int, str], FunctionTable | str] = OrderedDict()
        self._held = 0
        self._max = max_table_bytes
        self._host: dict[int, bytes] | None = None
        self._hints: OrderedDict[tuple[tuple[bytes, int, str], int], bool] = OrderedDict()
        """(file, offset) -> a spin hint lies before it: hot PCs repeat from window to window,
        so a later window opens no file when every PC and table is known."""

    def objects(self, pid: int, pcs: Mapping[int, int]) -> tuple[tuple[ObjectSamples, ...], str]:
        """`pcs` (PC -> samples) by object, most samples first, and a note when part of it
        could not be read ("" when all was)."""
        proc = f"{self.root.rstrip('/')}/proc/{pid}"
        try:
            maps = self.files.read_file(proc, "maps", MAX_MAPS)
        except (OSError, OverBudget):
            return (_lump("[unmapped]", pcs),) if pcs else (), "its maps could not be read"
        mappings = executable_mappings(maps)
        starts = [m.start for m in mappings]
        by_object: dict[int, Counter[int]] = {}
        unmapped: Counter[int] = Counter()
        for pc, n in pcs.items():
            i = bisect.bisect_right(starts, pc) - 1
            if i >= 0 and pc < mappings[i].end:
                by_object.setdefault(i, Counter())[pc] += n
            else:
                unmapped[pc] += n
        # One object may have several executable mappings: group by file.
        groups: dict[tuple[bytes, int, str], list[int]] = {}
        for i in by_object:
            m = mappings[i]
            groups.setdefault((m.device, m.inode, m.path), []).append(i)
        ranked = sorted(
            groups.values(), key=lambda ix: -sum(sum(by_object[i].values()) for i in ix)
        )
        self._host = None
        mounts = Mounts(proc, self._host_mounts)
        out: list[ObjectSamples] = []
        budget = [MAX_PCS]
        for rank, indexes in enumerate(ranked):
            parts = [(mappings[i], by_object[i]) for i in indexes]
            first = parts[0][0]
            label = first.path or "[anonymous]"
            if rank >= MAX_OBJECTS or not first.inode:
                out.append(_lump(label, Counter({pc: n for _, c in parts for pc, n in c.items()})))
                continue
            out.append(self._object(proc, mounts, label, parts, budget))
        if unmapped:
            out.append(_lump("[unmapped]", unmapped))
        out.sort(key=lambda o: -o.samples)
        note = "" if len(ranked) <= MAX_OBJECTS else f"only {MAX_OBJECTS} objects' files read"
        return tuple(out), note

    def _object(
        self,
        proc: str,
        mounts: Mounts,
        label: str,
        parts: list[tuple[Mapped, Counter[int]]],
        budget: list[int],
    ) -> ObjectSamples:
        first = parts[0][0]
        if not mounts.readable(first.device):
            why = mounts.refusal(first.device)
            return _lump(label, Counter({pc: n for _, c in parts for pc, n in c.items()}), why)
        key = (first.device, first.inode, first.path)
        offsets = [
            (pc, n, pc - m.start + m.offset) for m, counts in parts for pc, n in counts.items()
        ]
        table = self._tables.get(key)
        known = self._hints
        if table is None or any((key, at) not in known for _, _, at in offsets):
            # Something to read: the table, or the bytes before a PC not seen before.
            device = device_number(first.device)
            try:
                opened = (
                    self.files.open_library(proc, routes(proc, first), device, first.inode)
                    if device is not None
                    else "no device number in maps"
                )
            except (OSError, OverBudget):
                opened = "its files are not opened any more"
            if isinstance(opened, str):
                return _lump(label, Counter({pc: n for pc, n, _ in offsets}), opened)
            fd, size = opened
            try:
                table = self._table(first, fd, size)
                for _, _, at in offsets:
                    if (key, at) in known or budget[0] <= 0:
                        continue
                    budget[0] -= 1
                    back = min(LOOP, at)
                    hint = (_X86 or _ARM64) and 0 < at <= size
                    known[(key, at)] = hint and hint_before(_pread(fd, back, at - back))
                    if len(known) > MAX_HINTS:
                        known.popitem(last=False)
            finally:
                os.close(fd)
        else:
            self._tables.move_to_end(key)
        hinted = [(pc, n, known.get((key, at), False)) for pc, n, at in offsets]
        loops = [pc for pc, _, hint in hinted if hint]
        loops.sort()
        buckets: Counter[tuple[str | None, bool]] = Counter()
        for pc, n, hint in hinted:
            if not hint and loops:
                j = bisect.bisect_left(loops, pc)  # the head of a hinted PC's loop
                hint = j < len(loops) and loops[j] <= pc + LOOP
            name = None
            if isinstance(table, FunctionTable) and first.load is not None:
                name = table.name_at(pc - first.load)
            buckets[(name, hint)] += n
        names = table.source if isinstance(table, FunctionTable) else table
        return ObjectSamples(label, sum(buckets.values()), _buckets(buckets), names)

    def _table(self, m: Mapped, fd: int, size: int) -> FunctionTable | str:
        key = (m.device, m.inode, m.path)
        known = self._tables.get(key)
        if known is not None:
            self._tables.move_to_end(key)
            return known
        try:
            found: FunctionTable | str = function_symbols(lambda n, at: _pread(fd, n, at), size)
        except NotReadable as exc:
            found = f"not a well-formed ELF shared object: {exc}"
        held = found.nbytes if isinstance(found, FunctionTable) else 64
        while self._tables and self._held + held > self._max:
            _, old = self._tables.popitem(last=False)
            self._held -= old.nbytes if isinstance(old, FunctionTable) else 64
        if held <= self._max:
            self._tables[key] = found
            self._held += held
        return found

    def _host_mounts(self) -> dict[int, bytes] | None:
        if self._host is None:
            self._host = read_mount_types(f"{self.root.rstrip('/')}/proc/1/mountinfo")
        return self._host


def routes(proc: str, m: Mapped) -> list[tuple[str, int]]:
    """Where the object of a mapping may be opened: `proc/map_files/START-END` (the object
    itself, root only), else unless deleted `proc/root/PATH` without following a last
    link (a container sees its own paths)."""
    found = [(f"{proc}/map_files/{m.start:x}-{m.end:x}", 0)]
    if not m.deleted and m.path.startswith("/"):
        found.append((f"{proc}/root{m.path}", os.O_NOFOLLOW))
    return found


def _open_route(path: str, flags: int, device: int, inode: int) -> tuple[int, int] | str:
    assert _O_PATH is not None
    try:
        handle = os.open(path, _O_PATH | os.O_CLOEXEC | flags)
    except OSError as exc:
        return os.strerror(exc.errno) if exc.errno else "cannot open"
    try:
        if _other(os.fstat(handle), device, inode):
            return "not the mapped regular file"
        # Reopening the O_PATH descriptor opens that very inode: no second path walk.
        fd = os.open(f"/proc/self/fd/{handle}", _OPEN)
    except OSError as exc:
        return os.strerror(exc.errno) if exc.errno else "cannot open"
    finally:
        os.close(handle)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return "cannot stat"
    if _other(st, device, inode):
        os.close(fd)
        return "not the mapped regular file"
    return fd, st.st_size


def _other(st: os.stat_result, device: int, inode: int) -> bool:
    return not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (device, inode)


def _pread(fd: int, length: int, offset: int) -> bytes:
    try:
        return os.pread(fd, length, offset)
    except (OSError, OverflowError, ValueError):
        return b""


def _lump(label: str, pcs: Mapping[int, int], names: str = "") -> ObjectSamples:
    total = sum(pcs.values())
    return ObjectSamples(label, total, (PcBucket(None, False, total),), names)


def _buckets(counts: Counter[tuple[str | None, bool]]) -> tuple[PcBucket, ...]:
    ranked = [PcBucket(name, hint, n) for (name, hint), n in counts.most_common()]
    if len(ranked) <= MAX_BUCKETS:
        return tuple(ranked)
    kept = ranked[: MAX_BUCKETS - 2]
    rest = ranked[MAX_BUCKETS - 2 :]
    spun = sum(b.samples for b in rest if b.spin_hint)
    others = [
        PcBucket("...", True, spun),
        PcBucket("...", False, sum(b.samples for b in rest) - spun),
    ]
    return tuple(kept + [b for b in others if b.samples])
