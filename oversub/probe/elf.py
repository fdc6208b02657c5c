"""The dynamic data symbols and the function symbols of an ELF shared object, read strictly
and within fixed bounds.

The file is hostile: a watched process chooses what it maps, and can craft any header. So
every field is checked before it is used (exact entry sizes, counts, offsets and sizes
inside the file's real size, string offsets inside the string table, symbol values inside a
loadable segment), every read is bounded by the file's size and by fixed caps, and anything
odd raises `NotReadable` with a short reason: never ZeroDivisionError, OverflowError,
IndexError, struct.error or MemoryError, and never a read larger than `MAX_FILE_READ` bytes.

The reader takes a `pread(length, offset)` function, so that the caller decides how the file
is opened (see `probe.livesizes`) and tests can count the bytes it reads.

The cost is bounded too: one read of the ELF header, the program headers and the section
headers (at most `MAX_PHNUM` and `MAX_SHNUM` entries), then `.dynsym` and its `.dynstr` (at
most `MAX_TABLE` bytes each); the names are found with `bytes.find` and the first symbol
whose name starts there with `array.index`, both in C, so a table of the largest size allowed costs
milliseconds.

`function_symbols` reads, with the same checks, which function holds a code address (for
`probe.pcmap`): the `.symtab` when the file has one, else the `.dynsym`, and the `.symtab`
of its MiniDebugInfo (`.gnu_debugdata`, xz, decompressed within a bound), at most
`MAX_FUNCTION_READ` bytes in all; a symbol outside every loadable segment names nothing.
"""

from __future__ import annotations

import array
import bisect
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

    def __init__(self, pread: Pread, size: int, budget: int = MAX_FILE_READ) -> None:
        self._pread = pread
        self.size = size
        self.budget = budget
        self.read_bytes = 0

    def read(self, length: int, offset: int, what: str) -> bytes:
        if length < 0 or offset < 0 or offset + length > self.size:
            raise NotReadable(f"{what} outside the file")
        if self.read_bytes + length > self.budget:
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
    h = _header(f)
    segments, base = _segments(f, h.end, h.wide, h.phoff, h.phentsize, h.phnum)
    dynsym, dynstr = _tables(f, h.end, h.wide, h.shoff, h.shentsize, h.shnum)
    if dynsym is None or dynstr is None:
        return {name: None for name in names}
    symbols, strings = dynsym, dynstr
    found: dict[str, ElfSymbol | None] = {}
    for name in names:
        entry = _lookup(symbols, strings, name.encode(), h.wide, h.little)
        found[name] = None if entry is None else _place(entry, segments, base, h.wide, h.little)
    return found


class _Header(NamedTuple):
    wide: bool
    little: bool
    end: str
    phoff: int
    shoff: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int


def _header(f: _File) -> _Header:
    """The ELF header of a shared object (ET_DYN), checked."""
    head = f.read(min(64, f.size), 0, "ELF header")
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
    if fields[0] != _ET_DYN:
        raise NotReadable("not a shared object")
    if fields[7] != ehsize:
        raise NotReadable("bad e_ehsize")
    return _Header(wide, little, end, fields[4], fields[5], *fields[8:13])


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


# Function symbols: which function a code address lies in (`probe.pcmap`).

MAX_FUNCTIONS = 1 << 18
"""Function symbols kept from one table (a larger table keeps its first ones)."""
MAX_NAME = 256
"""Bytes of a function name kept (C++ and Rust names can be thousands of bytes long)."""
MAX_SECTION_NAMES = 1 << 16
"""Largest section-name table read (real libraries have a few hundred bytes)."""
MAX_DEBUGDATA = 1 << 20
"""Largest `.gnu_debugdata` read (libgomp's: 6 KiB), and 8 times it decompressed."""
_XZ_MEMLIMIT = 16 << 20
"""Most memory the xz decoder of `.gnu_debugdata` may use (its dictionary and state)."""
MAX_FUNCTION_READ = MAX_FILE_READ + MAX_SECTION_NAMES + MAX_DEBUGDATA
"""Most bytes `function_symbols` reads from one file, whatever it says."""
_SHT_SYMTAB = 2
_SHT_NOBITS = 8
_STT_FUNC, _STT_GNU_IFUNC = 2, 10


class FunctionTable:
    """The function symbols of one shared object, by their place relative to its load base
    (as `ElfSymbol.offset`): `name_at(offset)` is the function whose code holds it."""

    __slots__ = ("_parts", "nbytes", "source")

    def __init__(self, parts: list[tuple[array.array[int], array.array[int], list[bytes]]],
                 source: str) -> None:  # fmt: skip
        self._parts = parts
        self.source = source
        """Where the names come from: ".symtab", ".dynsym", "+.gnu_debugdata", or ""."""
        self.nbytes = sum(
            s.itemsize * len(s) * 2 + sum(len(n) + 40 for n in names) for s, _, names in parts
        )
        """About the memory the table holds (for a cache's bound)."""

    def __len__(self) -> int:
        return sum(len(starts) for starts, _, _ in self._parts)

    def name_at(self, offset: int) -> str | None:
        """The name of the function whose [start, start + size) holds `offset`; None when
        no symbol covers it (a hidden function of a stripped file)."""
        for starts, ends, names in self._parts:
            i = bisect.bisect_right(starts, offset) - 1
            # A few symbols back: a small function may lie inside a larger one's range.
            for j in range(i, max(-1, i - 8), -1):
                if offset < ends[j]:
                    return names[j].decode("utf-8", "replace")
        return None


def function_symbols(pread: Pread, file_size: int) -> FunctionTable:
    """The function symbols of a shared object of `file_size` bytes: its `.symtab` when it
    has one (an unstripped library, Rust's), else its `.dynsym`, and the `.symtab` of its
    MiniDebugInfo (`.gnu_debugdata`: an xz-compressed ELF file, as GCC's vendored libgomp
    carries) where the `lzma` module exists. Every read is bounded as `dynamic_symbols`'s
    (at most MAX_FUNCTION_READ bytes in all); NotReadable for anything else."""
    f = _File(pread, file_size, MAX_FUNCTION_READ)
    h = _header(f)
    segments, base = _segments(f, h.end, h.wide, h.phoff, h.phentsize, h.phnum)
    headers = _section_headers(f, h)
    parts = []
    table = _symbol_table(f, h, headers, _SHT_SYMTAB) or _symbol_table(f, h, headers, _SHT_DYNSYM)
    source = ""
    if table is not None:
        parts.append(_functions(table[0], table[1], h, segments, base))
        source = ".symtab" if table[2] == _SHT_SYMTAB else ".dynsym"
    packed = _named_section(f, h, headers, b".gnu_debugdata")
    if packed is not None:
        inner = _debugdata(packed)
        g = _File(lambda n, at: inner[at : at + n], len(inner))
        ih = _header(g)
        if (ih.wide, ih.little) != (h.wide, h.little):
            raise NotReadable(".gnu_debugdata of another ELF class")
        found = _symbol_table(g, ih, _section_headers(g, ih), _SHT_SYMTAB)
        if found is not None:
            parts.append(_functions(found[0], found[1], ih, segments, base))
            source += "+.gnu_debugdata"
    return FunctionTable(parts, source)


def _section_headers(f: _File, h: _Header) -> list[tuple[int, ...]]:
    size, fmt = _SHDR[h.wide]
    if h.shentsize != size:
        raise NotReadable("bad e_shentsize")
    if not 1 <= h.shnum <= MAX_SHNUM:
        raise NotReadable("bad e_shnum")
    raw = f.read(h.shentsize * h.shnum, h.shoff, "sections")
    return list(struct.iter_unpack(h.end + fmt, raw))


def _symbol_table(
    f: _File, h: _Header, headers: list[tuple[int, ...]], kind: int
) -> tuple[bytes, bytes, int] | None:
    """The first section of type `kind` with its linked string table (None without one)."""
    sym_size = _SYM[h.wide][0]
    for sh in headers:
        if sh[1] != kind:
            continue
        offset, length, link, entsize = sh[4], sh[5], sh[6], sh[9]
        if entsize != sym_size or length % sym_size or length > MAX_TABLE:
            raise NotReadable("bad symbol table size")
        if not 0 < link < len(headers) or headers[link][1] != _SHT_STRTAB:
            raise NotReadable("bad symbol table link")
        str_offset, str_length = headers[link][4], headers[link][5]
        if str_length > MAX_TABLE:
            raise NotReadable("bad string table size")
        return f.read(length, offset, "symbols"), f.read(str_length, str_offset, "names"), kind
    return None


MAX_RODATA = 8 << 20
"""Most bytes of `.rodata` read (`read_only_data`): OpenCV's has 6 MiB, tokenizers' 1.3."""


def read_only_data(pread: Pread, file_size: int, limit: int = MAX_RODATA) -> bytes:
    """The first `limit` bytes of a shared object's `.rodata` (its constant strings: the
    variables it reads are named there); b"" when it has none. Checked and bounded as
    `function_symbols` (NotReadable for anything else)."""
    f = _File(pread, file_size, MAX_FILE_READ + MAX_SECTION_NAMES + limit)
    h = _header(f)
    return _named_section(f, h, _section_headers(f, h), b".rodata", limit) or b""


def _named_section(
    f: _File, h: _Header, headers: list[tuple[int, ...]], wanted: bytes, cap: int = 0
) -> bytes | None:
    """The bytes of the section named `wanted` (None when the file has none); with `cap`,
    its first `cap` bytes whatever its size (else a size above MAX_DEBUGDATA is refused)."""
    if not 0 < h.shstrndx < len(headers) or headers[h.shstrndx][1] != _SHT_STRTAB:
        return None
    names_at, names_size = headers[h.shstrndx][4], headers[h.shstrndx][5]
    if names_size > MAX_SECTION_NAMES:
        raise NotReadable("bad section name table size")
    names = f.read(names_size, names_at, "section names")
    for sh in headers:
        if names[sh[0] : sh[0] + len(wanted) + 1] != wanted + b"\0":
            continue
        if sh[1] == _SHT_NOBITS or (not cap and sh[5] > MAX_DEBUGDATA):
            raise NotReadable(f"bad {wanted.decode()} size")
        return f.read(min(sh[5], cap) if cap else sh[5], sh[4], wanted.decode())
    return None


def _debugdata(packed: bytes) -> bytes:
    """MiniDebugInfo decompressed, at most 8 x MAX_DEBUGDATA bytes."""
    try:
        import lzma
    except ImportError:  # a Python built without it: no hidden names, nothing else lost
        raise NotReadable("no lzma module to read .gnu_debugdata") from None
    # memlimit: a crafted header may ask for a dictionary of up to 4 GiB, which the
    # decoder would allocate before the first byte came out; libgomp's asks for 8 KiB.
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=_XZ_MEMLIMIT)
    try:
        data = decompressor.decompress(packed, max_length=8 * MAX_DEBUGDATA)
    except (lzma.LZMAError, EOFError, ValueError, MemoryError):
        raise NotReadable("bad .gnu_debugdata") from None
    if not decompressor.eof:
        raise NotReadable(".gnu_debugdata too large or truncated")
    return data


def _functions(
    table: bytes,
    strings: bytes,
    h: _Header,
    segments: list[tuple[int, int]],
    base: int,
) -> tuple[array.array[int], array.array[int], list[bytes]]:
    """The defined function symbols of a table lying in a loadable segment, sorted by
    start, relative to `base`: (starts, ends, names). Odd entries are skipped: they name
    nothing a sampled address can be in."""
    fmt = _SYM[h.wide][1]
    found: list[tuple[int, int, int]] = []
    for entry in struct.iter_unpack(h.end + fmt, table):
        if h.wide:
            st_name, st_info, _, st_shndx, st_value, st_size = entry
        else:
            st_name, st_value, st_size, st_info, _, st_shndx = entry
        if st_info & 0xF not in (_STT_FUNC, _STT_GNU_IFUNC) or not st_size:
            continue
        if st_shndx == 0 or st_shndx >= _SHN_LORESERVE or st_value < base:
            continue
        if not any(lo <= st_value and st_value + st_size <= hi for lo, hi in segments):
            continue
        found.append((st_value - base, st_value - base + st_size, st_name))
        if len(found) == MAX_FUNCTIONS:
            break
    found.sort()
    names = []
    for _, _, at in found:
        stop = strings.find(b"\0", at, at + MAX_NAME)
        names.append(strings[at : stop if stop >= 0 else at + MAX_NAME] or b"?")
    starts = array.array("Q", (s for s, _, _ in found))
    return starts, array.array("Q", (e for _, e, _ in found)), names
