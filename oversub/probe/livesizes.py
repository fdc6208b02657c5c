"""Live pool sizes of another process, read from its memory without stopping it.

Settings made in code (`threadpoolctl.threadpool_limits(1)`, `openblas_set_num_threads`)
never reach `/proc/PID/environ`. Where a pool library keeps its size in an exported data
symbol, the live value is at `load base + symbol value`: the load base is where the
library's first segment is mapped (`/proc/PID/maps`), the symbol's value comes from the
ELF dynamic symbol table of the file, and 4 bytes of `/proc/PID/mem` at that address are
the current setting. Nothing else of the process's memory is ever read.

Which pools can be read this way (see docs/pools.md for the evidence): OpenBLAS
(`blas_cpu_number`, also in NumPy's `libscipy_openblas64_*`). GNU OpenMP keeps its ICVs in
hidden symbols, BLIS 0.9 in a static runtime object, MKL and torch's intra-op pool are
linked inside libtorch_cpu without an exported variable: those stay invisible.

Why `/proc/PID/mem` rather than `process_vm_readv`: the kernel checks the same ptrace
permission for both (root, or an ancestor under Yama's ptrace_scope 1, or the same user
with ptrace_scope 0), but the file needs no ctypes and takes the probes' `root=` prefix, so
tests can use fake trees. The ELF work is done once per library file (keyed by the device
and inode `maps` gives), so a refresh costs one open, one pread and one close per process.

A process chooses what it maps and, in its own mount namespace, what a mapped path leads to:
a FIFO, a pty, a device, another file, a crafted ELF, a file of its own FUSE server. So a
mapped object is opened only when `probe.backing` says its file system answers (no FUSE, no
network file system) and only in ways that cannot block, acquire a terminal or open a device
(`_open_library`); it is parsed by the strict, bounded `probe.elf`; the live value is read
only when every byte of it lies in memory `probe.backing` allows (a library followed by a
FUSE page where `base + symbol` lands is not read); and what could not be read is named in
`LiveSizes.unreadable`, never raised (docs/security.md, "Files a watched process maps").
The process may remap between its maps and those reads: the reads and the opening are made by
the reader process (`probe.memreader`), which oversub abandons when one does not return; the
opened file comes back as a descriptor that this process parses (`_open_library`).
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from oversub.core import pools
from oversub.probe.backing import (
    AddressSpace,
    Memory,
    Mounts,
    OverBudget,
    device_number,
    mappings_from,
    read_mount_types,
)
from oversub.probe.elf import MAX_FILE_READ, ElfSymbol, NotReadable, dynamic_symbols
from oversub.probe.memreader import Readers, service

_MAX_CACHE = 256
"""Library files remembered; the cache is emptied when it would grow past this."""
_MAX_THREADS = 1 << 16
"""A live value outside 1..this is not a thread count (uninitialised or a wrong symbol)."""
MAX_LIBRARIES = 16
"""Pool libraries read per process (distinct files; a real process maps 1 to 3)."""
MAX_READ_PER_PROCESS = 2 * MAX_FILE_READ
"""Bytes of library files parsed for one process in one read (NumPy's and SciPy's OpenBLAS
together take about 1 MiB); a file past it is named unreadable until a later read."""
_MAX_ADDRESS = (1 << 63) - 1
"""Largest offset of /proc/PID/mem a pread takes (off_t is signed)."""


_O_PATH: int | None = getattr(os, "O_PATH", None)
"""A mapped object is opened with O_PATH first (which opens nothing), and for reading only
once that showed the regular file maps names: never waiting (O_NONBLOCK), never becoming
a controlling terminal, never leaking into a child (`probe.readerloop`)."""
QUARANTINED = "its memory is not read any more: a read of it did not return (docs/security.md)"


class MappedLibrary(NamedTuple):
    """One pool library as mapped by a process (from its maps file)."""

    key: str
    """Pool key (`pools.POOL_KINDS`)."""
    path: str
    """Path as the process sees it (inside its mount namespace), without " (deleted)"."""
    start: int
    """Start address of the mapping with file offset 0."""
    end: int
    """End address of that mapping (for /proc/PID/map_files)."""
    device: str
    """maps' device field (major:minor, hex)."""
    inode: int
    deleted: bool = False
    """maps says "(deleted)": the file was replaced or removed since it was mapped, so its
    path names another file or none; only /proc/PID/map_files opens the mapped object."""
    line: int = 0
    """Where its maps line starts in the maps text (the lines of its segments follow)."""


# Lines of maps that map a library with a live symbol (cheap pre-filter: a NumPy process maps
# hundreds of files, and only these few lines need splitting).
_CANDIDATE = re.compile(
    rb"/(?:"
    + b"|".join(
        re.escape(prefix.encode())
        for kind in pools.POOL_KINDS
        if kind.live_symbol is not None
        for prefix in kind.prefixes
    )
    + rb")[^/\n]*$",
    re.MULTILINE,
)


_DELETED = " (deleted)"


def maps_libraries(maps: bytes) -> list[MappedLibrary]:
    """Pool libraries with a live symbol in a maps file, each at its mapping of offset 0."""
    found: dict[tuple[str, int], MappedLibrary] = {}
    for match in _CANDIDATE.finditer(maps):
        at = maps.rfind(b"\n", 0, match.start()) + 1
        line = maps[at : match.end()]
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith(b"/") or parts[2].strip(b"0"):
            continue  # anonymous, pseudo ("[heap]") or not the segment at file offset 0
        path = parts[5].decode("utf-8", "surrogateescape")
        deleted = path.endswith(_DELETED)
        path = path.removesuffix(_DELETED)
        key = pools.classify_library(os.path.basename(path))
        if key is None or pools.POOLS_BY_KEY[key].live_symbol is None:
            continue
        lo, _, hi = parts[0].partition(b"-")
        try:
            device, inode = parts[3].decode("ascii"), int(parts[4])
            start, stop = int(lo, 16), int(hi, 16)
        except ValueError:
            continue  # not the kernel's format (a fake tree's mistake)
        seen = found.get((device, inode))
        if seen is None or start < seen.start:
            found[(device, inode)] = MappedLibrary(
                key, path, start, stop, device, inode, deleted, at
            )
    return list(found.values())


class LiveSizes(NamedTuple):
    """What one read of a process found, per pool key."""

    sizes: dict[str, int]
    """Threads the pool is set to now (the largest, when several copies are mapped)."""
    extra: dict[str, int]
    """Threads its started pools run beside the calling thread, summed over the copies (0
    for a copy whose threads do not exist now, e.g. a forked child before its first call)."""
    unreadable: dict[str, str] = {}  # noqa: RUF012 (never mutated: `read` gives its own)
    """Path of each mapped pool library whose file could not be read safely -> why (a short
    reason): replaced and map_files refused, not a regular file, another file than the one
    mapped, not a well-formed ELF shared object, over a bound. Its live size is unknown."""


_Symbols = dict[str, ElfSymbol | None]


class LiveReader:
    """Reads live pool sizes of processes; remembers each library's symbols between calls.

    `read(pid, maps)` returns the sizes (and existing threads) of the pools of `maps` whose
    library exports its setting, and the libraries it could not read; raises PermissionError
    when the kernel refuses to let us read the process's memory (not root, not its ancestor).
    Nothing a process maps makes it block, raise or read more than `MAX_READ_PER_PROCESS`
    bytes of files (docs/security.md).
    """

    def __init__(self, root: str = "/", readers: Readers | None = None) -> None:
        self.root = root
        self._readers = readers if readers is not None else service()
        self._symbols: dict[tuple[str, int, str], _Symbols | str] = {}
        self._mounts: Mounts | None = None
        """What the file systems of the process being read are (`probe.backing`): read
        again for each process read, after its maps (mounts come and go)."""
        self._host: dict[int, bytes] | None = None

    def read(self, pid: int, maps: bytes, start: int | None = None) -> LiveSizes:
        """`start`: the process's start time, where known (the reader's quarantine is per
        process)."""
        found = LiveSizes({}, {}, {})
        libraries = maps_libraries(maps)
        if not libraries:
            return found
        proc = f"{self.root.rstrip('/')}/proc/{pid}"
        self._host = None
        self._mounts = Mounts(proc, self._host_mounts)
        # The memory first: when it is refused, nothing of the files matters (and a library
        # that could not be read then says nothing about what could be read of the process).
        readers, session = self._readers, self._readers.session()
        try:
            readers.read_memory(proc, session, [], start)
        except PermissionError:
            raise
        except OverBudget:  # quarantined (`memreader.Unreachable`)
            found.unreadable.update((lib.path, QUARANTINED) for lib in libraries)
            return found
        except OSError:
            return found  # gone

        def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
            return readers.read_memory(proc, session, ranges, start)

        for lib, size_symbol, started_symbol in self._wanted(pid, libraries, found):
            # The bytes of its maps lines from its own on: a symbol lies in its segments.
            space = AddressSpace(mappings_from(maps, lib.line), self._mounts)
            memory = Memory(fetch, space, 16, 2)  # two integers at most
            symbols = [size_symbol] if started_symbol is None else [size_symbol, started_symbol]
            try:
                memory.prefetch([(lib.start + sym.offset, sym.size) for sym in symbols])
            except OverBudget:  # its reader was abandoned: quarantined from now on
                found.unreadable[lib.path] = QUARANTINED
                break
            value = _read_int(memory, lib.start, size_symbol)
            if value is None and space.span(lib.start + size_symbol.offset, 1) == 0:
                found.unreadable[lib.path] = _NOT_THERE
                continue
            if value is None or not 1 <= value <= _MAX_THREADS:
                continue  # unmapped since, gone, uninitialised or not a thread count
            started = 1 if started_symbol is None else _read_int(memory, lib.start, started_symbol)
            found.sizes[lib.key] = max(found.sizes.get(lib.key, 0), value)
            found.extra[lib.key] = found.extra.get(lib.key, 0) + (value - 1 if started else 0)
        return found

    def _host_mounts(self) -> dict[int, bytes] | None:
        if self._host is None:
            self._host = read_mount_types(f"{self.root.rstrip('/')}/proc/1/mountinfo")
        return self._host

    def _wanted(
        self, pid: int, libraries: list[MappedLibrary], found: LiveSizes
    ) -> list[tuple[MappedLibrary, ElfSymbol, ElfSymbol | None]]:
        """Each library's size symbol (and started symbol); the libraries whose file could
        not be read go to `found.unreadable`."""
        wanted: list[tuple[MappedLibrary, ElfSymbol, ElfSymbol | None]] = []
        budget = [MAX_READ_PER_PROCESS]
        for i, lib in enumerate(libraries):
            kind = pools.POOLS_BY_KEY[lib.key]
            assert kind.live_symbol is not None  # maps_libraries keeps only those
            if i >= MAX_LIBRARIES:
                found.unreadable[lib.path] = f"more than {MAX_LIBRARIES} pool libraries mapped"
                continue
            names = [kind.live_symbol, *([kind.live_started] if kind.live_started else [])]
            symbols = self._symbols_of(pid, lib, names, budget)
            if isinstance(symbols, str):
                found.unreadable[lib.path] = symbols
                continue
            size = symbols.get(kind.live_symbol)
            if size is not None:
                avail = symbols.get(kind.live_started) if kind.live_started else None
                wanted.append((lib, size, avail))
        return wanted

    def _symbols_of(
        self, pid: int, lib: MappedLibrary, names: list[str], budget: list[int]
    ) -> _Symbols | str:
        """The symbols `names` of the library's file, or why it could not be read. A file
        that was opened is remembered either way (its content is what its inode holds); one
        that could not be opened is not (a process of another namespace may open it later)."""
        cache_key = (lib.device, lib.inode, lib.path)
        cached = self._symbols.get(cache_key)
        if cached is not None and (isinstance(cached, str) or all(n in cached for n in names)):
            return cached
        opened = self._open_library(pid, lib)
        if isinstance(opened, str):
            return opened
        fd, size = opened
        if min(size, MAX_FILE_READ) > budget[0]:
            os.close(fd)
            return "past this process's read budget"
        read = [0]

        def pread(length: int, offset: int) -> bytes:
            read[0] += length
            return os.pread(fd, length, offset)

        result: _Symbols | str
        try:
            result = dynamic_symbols(pread, size, names)
        except NotReadable as exc:
            result = f"not a well-formed ELF shared object: {exc}"
        finally:
            os.close(fd)
            budget[0] -= read[0]
        if len(self._symbols) >= _MAX_CACHE:
            self._symbols.clear()
        self._symbols[cache_key] = result
        return result

    def _open_library(self, pid: int, lib: MappedLibrary) -> tuple[int, int] | str:
        """The mapped object, open for reading, and its size; or why it could not be opened.

        First `/proc/PID/map_files/START-END`: the object itself, even replaced or deleted
        (the kernel allows it to root only). Else, unless maps says "(deleted)", the path
        through `/proc/PID/root` (a container sees its own paths), without following a link
        in its last component. Either is first opened with O_PATH, which opens nothing (no
        FIFO to wait on, no terminal, no device's open), and is opened for reading only when
        it is a regular file with the device and inode maps gives for the mapping. The
        reader process opens it (`probe.readerloop`): both routes are the process's to
        change meanwhile (a remap, a mount over a directory of the path)."""
        if _O_PATH is None:
            return "no O_PATH on this system"
        proc = f"{self.root.rstrip('/')}/proc/{pid}"
        mounts = self._mounts if self._mounts is not None else Mounts(proc, self._host_mounts)
        if not mounts.readable(lib.device.encode("ascii", "replace")):
            return mounts.refusal(lib.device.encode("ascii", "replace"))
        device = device_number(lib.device)
        if device is None:
            return "on a file system no mount table lists"
        routes = [(f"{proc}/map_files/{lib.start:x}-{lib.end:x}", 0)]
        if not lib.deleted:
            routes.append((f"{proc}/root{lib.path}", os.O_NOFOLLOW))
        try:
            opened = self._readers.open_library(proc, routes, device, lib.inode)
        except OverBudget:
            return QUARANTINED
        if isinstance(opened, str) and lib.deleted:
            return f"{opened}; replaced or deleted since it was mapped"
        return opened


_NOT_THERE = "its live value lies in memory that may not be read (FUSE, network, unknown)"


def _read_int(memory: Memory, base: int, symbol: ElfSymbol) -> int | None:
    """The integer at `base + symbol.offset` in the process's memory; None when it may not be
    read, or could not be."""
    address = base + symbol.offset
    if address + symbol.size > _MAX_ADDRESS:
        return None
    try:
        raw = memory.read(address, symbol.size)
    except OverBudget:
        return None
    if len(raw) != symbol.size:
        return None
    return int.from_bytes(raw, "little" if symbol.little else "big", signed=True)
