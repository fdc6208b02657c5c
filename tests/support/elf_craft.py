"""Crafted ELF shared objects for the hostile-file tests: a minimal, valid 64-bit little-endian
library that exports `blas_cpu_number` and `blas_server_avail` (4-byte objects in its one
loadable segment), and the file offsets of the fields a test corrupts.

    lib = CraftedElf()
    lib.put("e_phentsize", 0)          # ZeroDivisionError in a careless reader
    lib.put_symbol_value(0, 2**64 - 8)  # OverflowError in a careless reader
    path.write_bytes(lib.data)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

SYMBOLS = ("blas_cpu_number", "blas_server_avail")
VALUE_AT = (0x1000, 0x1004)
"""Virtual address (= offset from the load base) of each symbol."""
SEGMENT = 0x2000
"""Memory size of the one loadable segment (its file size is the whole file)."""

_EHDR_FIELDS = {  # name -> (offset, struct format) in the 64-bit ELF header
    "e_type": (16, "<H"),
    "e_phoff": (32, "<Q"),
    "e_shoff": (40, "<Q"),
    "e_ehsize": (52, "<H"),
    "e_phentsize": (54, "<H"),
    "e_phnum": (56, "<H"),
    "e_shentsize": (58, "<H"),
    "e_shnum": (60, "<H"),
}
_SHDR_FIELDS = {"sh_type": (4, "<I"), "sh_offset": (24, "<Q"), "sh_size": (32, "<Q"),
                "sh_link": (40, "<I"), "sh_entsize": (56, "<Q")}  # fmt: skip


def _build() -> tuple[bytearray, dict[str, int]]:
    strings = b"\0" + b"\0".join(s.encode() for s in SYMBOLS) + b"\0"
    phoff, ehsize, phsize = 64, 64, 56
    stroff = phoff + phsize
    symoff = (stroff + len(strings) + 7) & ~7
    syms = [struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0)]
    name_at = 1
    for name, value in zip(SYMBOLS, VALUE_AT, strict=True):
        syms.append(struct.pack("<IBBHQQ", name_at, (1 << 4) | 1, 0, 1, value, 4))
        name_at += len(name) + 1
    symtab = b"".join(syms)
    shoff = symoff + len(symtab)
    shdrs = [
        bytes(64),
        struct.pack("<IIQQQQIIQQ", 0, 11, 2, 0, symoff, len(symtab), 2, 1, 8, 24),
        struct.pack("<IIQQQQIIQQ", 0, 3, 2, 0, stroff, len(strings), 0, 0, 1, 0),
    ]
    size = shoff + 64 * len(shdrs)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, shoff, 0, ehsize, phsize, 1, 64, len(shdrs), 2
    )
    phdr = struct.pack("<IIQQQQQQ", 1, 6, 0, 0, 0, size, SEGMENT, 0x1000)
    data = bytearray(size)
    data[0:64] = ehdr
    data[phoff : phoff + phsize] = phdr
    data[stroff : stroff + len(strings)] = strings
    data[symoff : symoff + len(symtab)] = symtab
    data[shoff:size] = b"".join(shdrs)
    return data, {"symoff": symoff, "shoff": shoff, "stroff": stroff, "phoff": phoff}


@dataclass
class CraftedElf:
    data: bytearray = field(init=False)
    at: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.data, self.at = _build()

    def put(self, name: str, value: int) -> None:
        offset, fmt = _EHDR_FIELDS[name]
        struct.pack_into(fmt, self.data, offset, value)

    def put_section(self, index: int, name: str, value: int) -> None:
        """Section 1 is .dynsym, 2 is .dynstr."""
        offset, fmt = _SHDR_FIELDS[name]
        struct.pack_into(fmt, self.data, self.at["shoff"] + 64 * index + offset, value)

    def put_symbol_value(self, index: int, value: int) -> None:
        """st_value of SYMBOLS[index]."""
        struct.pack_into("<Q", self.data, self.at["symoff"] + 24 * (index + 1) + 8, value)
