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
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from typing import NamedTuple

from oversub import pools

_MAX_TABLE = 64 << 20
"""Largest .dynsym or .dynstr read (bytes): a bigger one is not a real library's."""
_MAX_CACHE = 256
"""Library files remembered; the cache is emptied when it would grow past this."""
_MAX_THREADS = 1 << 16
"""A live value outside 1..this is not a thread count (uninitialised or a wrong symbol)."""
_SHT_DYNSYM = 11
_PT_LOAD = 1
_ET_DYN = 3
_STT_OBJECT = 1


@dataclass(frozen=True)
class ElfSymbol:
    """Where a data symbol lives in a shared object, relative to its load base."""

    offset: int
    """Symbol value minus the page-aligned virtual address of the segment at file offset 0."""
    size: int
    """Symbol size in bytes (4 for an int)."""
    little: bool
    """Byte order of the file (and so of the value in memory)."""


@dataclass(frozen=True)
class MappedLibrary:
    """One pool library as mapped by a process (from its maps file)."""

    key: str
    """Pool key (`pools.POOL_KINDS`)."""
    path: str
    """Path as the process sees it (inside its mount namespace)."""
    start: int
    """Start address of the mapping with file offset 0."""
    end: int
    """End address of that mapping (for /proc/PID/map_files)."""
    device: str
    """maps' device field (major:minor, hex)."""
    inode: int


def _fields(fmt: str, data: bytes, offset: int = 0) -> tuple[int, ...]:
    return struct.unpack_from(fmt, data, offset)


def elf_symbol(fd: int, name: str) -> ElfSymbol | None:
    """The exported data object `name` of the shared object open on `fd`; None when absent.

    Reads the ELF header, the program headers (for the segment at offset 0), the section
    headers and the .dynsym/.dynstr pair they point to. Raises ValueError for a file that is
    not a well-formed ELF shared object, OSError when it cannot be read.
    """
    head = os.pread(fd, 64, 0)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise ValueError("not an ELF file")
    wide = head[4] == 2
    end = "<" if head[5] == 1 else ">"
    if wide:
        e_type, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = _fields(
            end + "HHIQQQIHHHHHH", head, 16
        )
    else:
        e_type, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = _fields(
            end + "HHIIIIIHHHHHH", head, 16
        )
    if e_type != _ET_DYN or not shoff or not shnum or not phnum:
        raise ValueError("not a shared object with sections")
    base_vaddr = _first_load_vaddr(fd, end, wide, phoff, phentsize, phnum)
    sections = os.pread(fd, shentsize * shnum, shoff)
    if len(sections) < shentsize * shnum:
        raise ValueError("truncated section headers")
    shdr = end + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
    headers = [_fields(shdr, sections, i * shentsize) for i in range(shnum)]
    for sh in headers:
        if sh[1] != _SHT_DYNSYM:
            continue
        sym_off, sym_size, link, entsize = sh[4], sh[5], sh[6], sh[9]
        if link >= shnum or sym_size > _MAX_TABLE or entsize < (24 if wide else 16):
            raise ValueError("bad .dynsym")
        str_off, str_size = headers[link][4], headers[link][5]
        if str_size > _MAX_TABLE:
            raise ValueError("bad .dynstr")
        strings = os.pread(fd, str_size, str_off)
        table = os.pread(fd, sym_size, sym_off)
        return _find(table, entsize, strings, name.encode(), end, wide, base_vaddr)
    return None


def _first_load_vaddr(fd: int, end: str, wide: bool, phoff: int, size: int, count: int) -> int:
    """Page-aligned virtual address of the PT_LOAD segment that starts at file offset 0."""
    raw = os.pread(fd, size * count, phoff)
    fmt = end + ("IIQQQQQQ" if wide else "IIIIIIII")
    for i in range(min(count, len(raw) // size)):
        ph = _fields(fmt, raw, i * size)
        p_type, p_offset, p_vaddr = (ph[0], ph[2], ph[3]) if wide else (ph[0], ph[1], ph[2])
        if p_type == _PT_LOAD and p_offset == 0:
            return p_vaddr & ~(mmap.PAGESIZE - 1)
    raise ValueError("no loadable segment at offset 0")


def _find(
    table: bytes,
    entsize: int,
    strings: bytes,
    wanted: bytes,
    end: str,
    wide: bool,
    base_vaddr: int,
) -> ElfSymbol | None:
    fmt = end + ("IBBHQQ" if wide else "IIIBBH")
    target = wanted + b"\0"
    for i in range(len(table) // entsize):
        fields = _fields(fmt, table, i * entsize)
        if wide:
            st_name, st_info, _, st_shndx, st_value, st_size = fields
        else:
            st_name, st_value, st_size, st_info, _, st_shndx = fields
        if not strings.startswith(target, st_name):
            continue
        if st_shndx == 0 or st_info & 0xF != _STT_OBJECT or st_size not in (4, 8):
            return None  # undefined here, or not an integer variable
        return ElfSymbol(st_value - base_vaddr, st_size, end == "<")
    return None


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


def maps_libraries(maps: bytes) -> list[MappedLibrary]:
    """Pool libraries with a live symbol in a maps file, each at its mapping of offset 0."""
    found: dict[tuple[str, int], MappedLibrary] = {}
    for match in _CANDIDATE.finditer(maps):
        line = maps[maps.rfind(b"\n", 0, match.start()) + 1 : match.end()]
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith(b"/") or parts[2].strip(b"0"):
            continue  # anonymous, pseudo ("[heap]") or not the segment at file offset 0
        path = parts[5].decode("utf-8", "surrogateescape")
        if path.endswith(" (deleted)"):
            continue
        key = pools.classify_library(os.path.basename(path))
        if key is None or pools.POOLS_BY_KEY[key].live_symbol is None:
            continue
        lo, _, hi = parts[0].partition(b"-")
        device, inode = parts[3].decode("ascii", "replace"), int(parts[4])
        start, stop = int(lo, 16), int(hi, 16)
        seen = found.get((device, inode))
        if seen is None or start < seen.start:
            found[(device, inode)] = MappedLibrary(key, path, start, stop, device, inode)
    return list(found.values())


class LiveSizes(NamedTuple):
    """What one read of a process found, per pool key."""

    sizes: dict[str, int]
    """Threads the pool is set to now (the largest, when several copies are mapped)."""
    extra: dict[str, int]
    """Threads its started pools run beside the calling thread, summed over the copies (0
    for a copy whose threads do not exist now, e.g. a forked child before its first call)."""


class LiveReader:
    """Reads live pool sizes of processes; remembers each library's symbols between calls.

    `read(pid, maps)` returns the sizes (and existing threads) of the pools of `maps` whose
    library exports its setting; raises PermissionError when the kernel refuses to let us
    read the process's memory (not root, not its ancestor).
    """

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self._symbols: dict[tuple[str, int, str, str], ElfSymbol | None] = {}

    def read(self, pid: int, maps: bytes) -> LiveSizes:
        found = LiveSizes({}, {})
        libraries = maps_libraries(maps)
        if not libraries:
            return found
        wanted: list[tuple[MappedLibrary, ElfSymbol, ElfSymbol | None]] = []
        for lib in libraries:
            kind = pools.POOLS_BY_KEY[lib.key]
            size = self._symbol(pid, lib, kind.live_symbol)
            if size is not None:
                wanted.append((lib, size, self._symbol(pid, lib, kind.live_started)))
        if not wanted:
            return found
        try:
            fd = os.open(f"{self.root.rstrip('/')}/proc/{pid}/mem", os.O_RDONLY)
        except PermissionError:
            raise
        except OSError:
            return found  # gone
        try:
            for lib, size_symbol, started_symbol in wanted:
                value = _read_int(fd, lib.start, size_symbol)
                if value is None or not 1 <= value <= _MAX_THREADS:
                    continue  # unmapped since, gone, uninitialised or not a thread count
                started = 1 if started_symbol is None else _read_int(fd, lib.start, started_symbol)
                found.sizes[lib.key] = max(found.sizes.get(lib.key, 0), value)
                found.extra[lib.key] = found.extra.get(lib.key, 0) + (value - 1 if started else 0)
        finally:
            os.close(fd)
        return found

    def _symbol(self, pid: int, lib: MappedLibrary, name: str | None) -> ElfSymbol | None:
        if name is None:
            return None
        cache_key = (lib.device, lib.inode, lib.path, name)
        if cache_key in self._symbols:
            return self._symbols[cache_key]
        fd = self._open_library(pid, lib)
        if fd is None:
            return None  # not cached: a process of another namespace may open it later
        try:
            symbol = elf_symbol(fd, name)
        except (OSError, ValueError, struct.error):
            symbol = None
        finally:
            os.close(fd)
        if len(self._symbols) >= _MAX_CACHE:
            self._symbols.clear()
        self._symbols[cache_key] = symbol
        return symbol

    def _open_library(self, pid: int, lib: MappedLibrary) -> int | None:
        """The library file as the process maps it: through its root (containers see
        their own paths), else through map_files; the inode must match maps."""
        proc = f"{self.root.rstrip('/')}/proc/{pid}"
        candidates = (f"{proc}/root{lib.path}", f"{proc}/map_files/{lib.start:x}-{lib.end:x}")
        for path in candidates:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            if os.fstat(fd).st_ino == lib.inode:
                return fd
            os.close(fd)
        return None


def _read_int(fd: int, base: int, symbol: ElfSymbol) -> int | None:
    """The integer at `base + symbol.offset` in the memory file `fd`; None when unreadable."""
    try:
        raw = os.pread(fd, symbol.size, base + symbol.offset)
    except OSError:
        return None
    if len(raw) != symbol.size:
        return None
    return int.from_bytes(raw, "little" if symbol.little else "big", signed=True)
