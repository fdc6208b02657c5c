"""The dynamic data symbols of an ELF shared object, read strictly and within fixed bounds.

The file is hostile: a watched process chooses what it maps, and can craft any header. So
every field is checked before it is used (exact entry sizes, counts, offsets and sizes
inside the file's real size, string offsets inside the string table, symbol values inside a
loadable segment), every read is bounded by the file's size and by fixed caps, and anything
odd raises `NotReadable` with a short reason: never ZeroDivisionError, OverflowError,
IndexError, struct.error or MemoryError, and never a read larger than `MAX_FILE_READ` bytes.

The reader takes a `pread(length, offset)` function, so that the caller decides how the file
is opened (see `probe.livepools`) and tests can count the bytes it reads.

The cost is bounded too: one read of the ELF header, the program headers and the section
headers (at most `MAX_PHNUM` and `MAX_SHNUM` entries), then `.dynsym` and its `.dynstr` (at
most `MAX_TABLE` bytes each); the names are found with `bytes.find` and the first symbol
whose name starts there with `array.index`, both in C, so a table of the largest size allowed costs
milliseconds.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Callable, Iterable
from typing import NamedTuple

Pread = Callable[[int, int], bytes]
"""`pread(length, offset)`: bytes of the file (fewer at its end)."""

MAX_TABLE = 4 << 20
"""Largest .dynsym or .dynstr read (bytes). NumPy's OpenBLAS has 268 KiB and 234 KiB."""
MAX_PHNUM = 256
"""Most program headers read (NumPy's OpenBLAS has 15)."""
MAX_SHNUM = 4096
"""Most section headers read (real libraries have 25 to 70)."""
MAX_NAME_HITS = 16
"""Most places a wanted name may appear in .dynstr (string merging makes 1 or 2)."""

_EHDR = {False: (52, "HHIIIIIHHHHHH"), True: (64, "HHIQQQIHHHHHH")}
"""Class (wide = 64-bit) -> (e_ehsize, the header after e_ident)."""
_PHDR = {False: (32, "IIIIIIII"), True: (56, "IIQQQQQQ")}
_SHDR = {False: (40, "IIIIIIIIII"), True: (64, "IIQQQQIIQQ")}
_SYM = {False: (16, "IIIBBH"), True: (24, "IBBHQQ")}

MAX_FILE_READ = 64 + MAX_PHNUM * 56 + MAX_SHNUM * 64 + 2 * MAX_TABLE
"""Most bytes read from one file, whatever it says."""

_ET_DYN = 3
_PT_LOAD = 1
_SHT_STRTAB = 3
_SHT_DYNSYM = 11
_STT_OBJECT = 1
_STB_GLOBAL, _STB_WEAK = 1, 2
_SHN_LORESERVE = 0xFF00
_PAGE = 4096
"""Alignment of the load base: segments are mapped at page boundaries (4 KiB at least)."""

_U32 = next(code for code in ("I", "L") if array.array(code).itemsize == 4)


class NotReadable(ValueError):
    """The file is not an ELF shared object this reader trusts; the message says why."""


class ElfSymbol(NamedTuple):
    """Where a data symbol lives in a shared object, relative to its load base."""

    offset: int
    """Symbol value minus the page-aligned virtual address of the segment at file offset 0
    (>= 0, inside a loadable segment)."""
    size: int
    """Symbol size in bytes (4 or 8: an integer)."""
    little: bool
    """Byte order of the file (and so of the value in memory)."""


class _File:
    """Reads of one file, each inside its real size, all together within MAX_FILE_READ."""

    def __init__(self, pread: Pread, size: int) -> None:
        self._pread = pread
        self.size = size
        self.read_bytes = 0

    def read(self, length: int, offset: int, what: str) -> bytes:
        if length < 0 or offset < 0 or offset + length > self.size:
            raise NotReadable(f"{what} outside the file")
        if self.read_bytes + length > MAX_FILE_READ:
            raise NotReadable(f"{what} past the read budget")
        self.read_bytes += length
        try:
            data = self._pread(length, offset)
        except (OSError, OverflowError, ValueError) as exc:
            raise NotReadable(f"{what} unreadable ({type(exc).__name__})") from None
        if len(data) != length:
            raise NotReadable(f"{what} truncated")
        return data


def dynamic_symbols(
    pread: Pread, file_size: int, names: Iterable[str]
) -> dict[str, ElfSymbol | None]:
    """The exported integer data objects `names` of a shared object of `file_size` bytes
    (`os.fstat(fd).st_size`): name -> its place, or None when the file does not define it as
    an integer variable. Raises NotReadable for anything else (see the module docstring)."""
    f = _File(pread, file_size)
    head = f.read(min(64, file_size), 0, "ELF header")
    if len(head) < 16 or head[:4] != b"\x7fELF":
        raise NotReadable("not an ELF file")
    if head[4] not in (1, 2) or head[5] not in (1, 2) or head[6] != 1:
        raise NotReadable("unknown ELF class, byte order or version")
    wide, little = head[4] == 2, head[5] == 1
    end = "<" if little else ">"
    ehsize, ehdr = _EHDR[wide]
    if len(head) < ehsize:
        raise NotReadable("truncated ELF header")
    fields = struct.unpack_from(end + ehdr, head, 16)
    e_type, phoff, shoff, e_ehsize = fields[0], fields[4], fields[5], fields[7]
    phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
    if e_type != _ET_DYN:
        raise NotReadable("not a shared object")
    if e_ehsize != ehsize:
        raise NotReadable("bad e_ehsize")
    segments, base = _segments(f, end, wide, phoff, phentsize, phnum)
    dynsym, dynstr = _tables(f, end, wide, shoff, shentsize, shnum)
    if dynsym is None or dynstr is None:
        return {name: None for name in names}
    symbols, strings = dynsym, dynstr
    found: dict[str, ElfSymbol | None] = {}
    for name in names:
        entry = _lookup(symbols, strings, name.encode(), wide, little)
        found[name] = None if entry is None else _place(entry, segments, base, wide, little)
    return found


def _segments(
    f: _File, end: str, wide: bool, phoff: int, phentsize: int, phnum: int
) -> tuple[list[tuple[int, int]], int]:
    """The loadable segments (vaddr, vaddr + memsz) and the load base's page-aligned vaddr
    (of the PT_LOAD segment at file offset 0)."""
    size, fmt = _PHDR[wide]
    if phentsize != size:
        raise NotReadable("bad e_phentsize")
    if not 1 <= phnum <= MAX_PHNUM:
        raise NotReadable("bad e_phnum")
    raw = f.read(phentsize * phnum, phoff, "program headers")
    limit = 1 << (64 if wide else 32)
    segments: list[tuple[int, int]] = []
    base: int | None = None
    for ph in struct.iter_unpack(end + fmt, raw):
        p_type = ph[0]
        p_offset, p_vaddr, p_memsz = (ph[2], ph[3], ph[6]) if wide else (ph[1], ph[2], ph[5])
        if p_type != _PT_LOAD:
            continue
        if p_vaddr + p_memsz > limit:
            raise NotReadable("segment past the address space")
        segments.append((p_vaddr, p_vaddr + p_memsz))
        if p_offset == 0 and base is None:
            base = p_vaddr & ~(_PAGE - 1)
    if base is None:
        raise NotReadable("no loadable segment at offset 0")
    return segments, base


def _tables(
    f: _File, end: str, wide: bool, shoff: int, shentsize: int, shnum: int
) -> tuple[bytes | None, bytes | None]:
    """The .dynsym section and the string table it links to; (None, None) without one."""
    size, fmt = _SHDR[wide]
    if shentsize != size:
        raise NotReadable("bad e_shentsize")
    if not 1 <= shnum <= MAX_SHNUM:
        raise NotReadable("bad e_shnum")
    headers = list(struct.iter_unpack(end + fmt, f.read(shentsize * shnum, shoff, "sections")))
    sym_size = _SYM[wide][0]
    for sh in headers:
        if sh[1] != _SHT_DYNSYM:
            continue
        offset, length, link, entsize = sh[4], sh[5], sh[6], sh[9]
        if entsize != sym_size or length % sym_size or length > MAX_TABLE:
            raise NotReadable("bad .dynsym size")
        if not 0 < link < shnum or headers[link][1] != _SHT_STRTAB:
            raise NotReadable("bad .dynsym link")
        str_offset, str_length = headers[link][4], headers[link][5]
        if str_length > MAX_TABLE:
            raise NotReadable("bad .dynstr size")
        table = f.read(length, offset, ".dynsym")
        strings = f.read(str_length, str_offset, ".dynstr")
        return table, strings
    return None, None


def _lookup(
    table: bytes, strings: bytes, wanted: bytes, wide: bool, little: bool
) -> tuple[int, ...] | None:
    """The first symbol of `table` named `wanted` (its unpacked fields), None when absent."""
    if not wanted or b"\0" in wanted:
        return None
    # Every offset of .dynstr where the name starts (a longer name may end with it).
    starts: list[int] = []
    at = strings.find(wanted + b"\0")
    while at >= 0:
        if len(starts) == MAX_NAME_HITS:
            raise NotReadable("a symbol name repeated in .dynstr")
        starts.append(at)
        at = strings.find(wanted + b"\0", at + 1)
    if not starts:
        return None
    size, fmt = _SYM[wide]
    # st_name is the first word of every entry: the words at multiples of the entry size.
    words = array.array(_U32, table)
    if little != (sys.byteorder == "little"):
        words.byteswap()
    names = words[:: size // 4]
    hits = [i for i in (_index(names, start) for start in starts) if i is not None]
    best = min(hits, default=None)
    if best is None:
        return None
    return struct.unpack_from(("<" if little else ">") + fmt, table, best * size)


def _index(names: array.array[int], value: int) -> int | None:
    try:
        return names.index(value)
    except ValueError:
        return None


def _place(
    entry: tuple[int, ...], segments: list[tuple[int, int]], base: int, wide: bool, little: bool
) -> ElfSymbol | None:
    """An integer data object's place; None when the entry is no defined integer variable;
    NotReadable when its value lies outside every loadable segment."""
    if wide:
        _, st_info, _, st_shndx, st_value, st_size = entry
    else:
        _, st_value, st_size, st_info, _, st_shndx = entry
    if st_shndx == 0 or st_shndx >= _SHN_LORESERVE:
        return None  # undefined here (imported), or absolute/common: not a variable of it
    if st_info & 0xF != _STT_OBJECT or st_info >> 4 not in (_STB_GLOBAL, _STB_WEAK):
        return None
    if st_size not in (4, 8):
        return None  # not an integer
    if not any(lo <= st_value and st_value + st_size <= hi for lo, hi in segments):
        raise NotReadable("symbol outside the loadable segments")
    if st_value < base:
        raise NotReadable("symbol below the load base")
    return ElfSymbol(st_value - base, st_size, little)
