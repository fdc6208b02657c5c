"""Crafted ELF shared objects with function symbols and code, for the PC-mapping tests
(`probe.elf.function_symbols`, `probe.pcmap`): one loadable segment from file offset 0 at
virtual address `LOAD_VADDR`, code bytes at `CODE_AT`, a symbol table (`.symtab` or
`.dynsym`) with its string table, a section-name table and, optionally, a `.gnu_debugdata`
section holding an xz-compressed ELF file with a `.symtab` of its own (MiniDebugInfo).

    data = elf_with_functions([("work", 0x1000, 0x40)], code=b"\\x90" * 64)
"""

from __future__ import annotations

import lzma
import struct

CODE_AT = 0x1000
"""File offset and virtual address (load base 0) where the code bytes start."""
SEGMENT = 0x4000
"""Memory size of the one loadable segment."""
STT_FUNC, STT_OBJECT = 2, 1
STB_LOCAL, STB_GLOBAL = 0, 1

Function = tuple[str, int, int]
"""(name, value, size): a defined global function symbol."""


def _section(
    name: int, kind: int, offset: int, size: int, link: int = 0, entsize: int = 0
) -> bytes:
    return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, link, 0, 1, entsize)


def elf_with_functions(
    functions: list[Function],
    code: bytes = b"",
    *,
    table: str = ".symtab",
    debugdata: bytes | None = None,
    symbols: list[tuple[str, int, int, int, int]] | None = None,
) -> bytes:
    """A shared object whose `table` (".symtab" or ".dynsym") defines `functions` (global,
    in section 1) and any raw `symbols` (name, info, shndx, value, size); `debugdata` is the
    content of a `.gnu_debugdata` section (see `minidebuginfo`)."""
    entries = [(n, (STB_GLOBAL << 4) | STT_FUNC, 1, v, s) for n, v, s in functions]
    entries += symbols or []
    strings = bytearray(b"\0")
    packed = [bytes(24)]
    for name, info, shndx, value, size in entries:
        at = len(strings)
        strings += name.encode() + b"\0"
        packed.append(struct.pack("<IBBHQQ", at, info, 0, shndx, value, size))
    symtab = b"".join(packed)
    names = b"\0" + table.encode() + b"\0.strtab\0.shstrtab\0.gnu_debugdata\0"
    n_table, n_str = 1, 1 + len(table) + 1
    n_shstr = n_str + len(".strtab") + 1
    n_debug = n_shstr + len(".shstrtab") + 1
    body = bytearray(CODE_AT) + code

    def place(blob: bytes) -> int:
        while len(body) % 8:
            body.append(0)
        at = len(body)
        body.extend(blob)
        return at

    sym_at, str_at, names_at = place(symtab), place(bytes(strings)), place(names)
    debug_at = place(debugdata) if debugdata is not None else 0
    sections = [
        bytes(64),
        _section(n_table, 2 if table == ".symtab" else 11, sym_at, len(symtab), 2, 24),
        _section(n_str, 3, str_at, len(strings)),
        _section(n_shstr, 3, names_at, len(names)),
    ]
    if debugdata is not None:
        sections.append(_section(n_debug, 1, debug_at, len(debugdata)))
    sh_at = place(b"".join(sections))
    size = len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, sh_at, 0, 64, 56, 1, 64, len(sections), 3
    )
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, max(SEGMENT, size), 0x1000)
    body[0:64] = ehdr
    body[64:120] = phdr
    return bytes(body)


def minidebuginfo(functions: list[Function]) -> bytes:
    """A `.gnu_debugdata` section: an xz-compressed ELF file whose `.symtab` names
    `functions` (as GCC's vendored libgomp hides `gomp_barrier_wait_end` there)."""
    inner = elf_with_functions([], symbols=[(n, STT_FUNC, 13, v, s) for n, v, s in functions])
    return lzma.compress(inner, format=lzma.FORMAT_XZ)
