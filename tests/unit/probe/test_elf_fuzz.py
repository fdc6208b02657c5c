"""Fuzz of the ELF reader (probe.elf): thousands of crafted files, seeded so that a failure
reproduces. Random header fields (from values that break careless readers: 0, 1, sizes
off by one, 2^16-1, 2^32-1, 2^63, 2^64-1, the file size), random bytes, truncations and
files claimed larger than their content (holes read as zeros). Nothing but NotReadable may
escape, and no file makes the reader read more than MAX_FILE_READ bytes or hold more memory
than a few times that.

`OVERSUB_FUZZ_FILES` sets the number of files (default 3,000); the figures (files/s, most
bytes read from one file, peak memory) are printed with `pytest -s`.
"""

from __future__ import annotations

import os
import random
import resource
import struct
import time
import tracemalloc

from oversub.probe.elf import MAX_FILE_READ, NotReadable, dynamic_symbols
from tests.support.elf_craft import SYMBOLS, CraftedElf

FILES = int(os.environ.get("OVERSUB_FUZZ_FILES", "3000"))
SEED = 19

HEADER_FIELDS = ("e_type", "e_phoff", "e_shoff", "e_ehsize", "e_phentsize", "e_phnum",
                 "e_shentsize", "e_shnum")  # fmt: skip
SECTION_FIELDS = ("sh_type", "sh_offset", "sh_size", "sh_link", "sh_entsize")
_WIDTH = {"e_type": 16, "e_ehsize": 16, "e_phentsize": 16, "e_phnum": 16, "e_shentsize": 16,
          "e_shnum": 16, "sh_type": 32, "sh_link": 32}  # fmt: skip


def _interesting(rng: random.Random, bits: int, size: int) -> int:
    top = (1 << bits) - 1
    pick = rng.choice(
        [
            0,
            1,
            2,
            24,
            56,
            64,
            0xFFFF,
            top,
            top - 7,
            1 << (bits - 1),
            size,
            size - 1,
            size + 1,
            64 << 20,
            rng.randrange(top + 1),
        ]
    )
    return pick & top


def crafted(rng: random.Random) -> tuple[bytes, int]:
    """A mutated file and the size the reader is told (its st_size: holes past the data)."""
    e = CraftedElf()
    size = len(e.data)
    for _ in range(rng.randint(1, 4)):
        what = rng.random()
        if what < 0.35:
            name = rng.choice(HEADER_FIELDS)
            e.put(name, _interesting(rng, _WIDTH.get(name, 64), size))
        elif what < 0.65:
            name = rng.choice(SECTION_FIELDS)
            e.put_section(rng.randint(0, 2), name, _interesting(rng, _WIDTH.get(name, 64), size))
        elif what < 0.8:
            e.put_symbol_value(rng.randrange(len(SYMBOLS)), _interesting(rng, 64, size))
        else:
            for _ in range(rng.randint(1, 16)):
                e.data[rng.randrange(len(e.data))] = rng.randrange(256)
    data = bytes(e.data)
    shape = rng.random()
    if shape < 0.15:
        data = data[: rng.randrange(len(data) + 1)]  # truncated
    elif shape < 0.2:
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(512)))  # noise
    claimed = len(data)
    if rng.random() < 0.2:
        claimed = rng.choice([len(data) + 4096, 130 << 20, 1 << 40])  # sparse, holes
    return data, claimed


def test_no_exception_escapes_and_every_read_is_bounded() -> None:
    rng = random.Random(SEED)
    most = 0
    outcomes = {"read": 0, "not readable": 0}
    started = time.perf_counter()
    for _ in range(FILES):
        data, claimed = crafted(rng)
        read = [0]

        def pread(
            length: int,
            offset: int,
            data: bytes = data,
            read: list[int] = read,
            claimed: int = claimed,
        ) -> bytes:
            assert length >= 0 and offset >= 0
            read[0] += length
            end = min(offset + length, max(len(data), offset))
            # Holes read as zeros up to the claimed size, as a sparse file does.
            return data[offset:end] + bytes(min(offset + length, claimed) - max(end, offset))

        try:
            dynamic_symbols(pread, claimed, SYMBOLS)
            outcomes["read"] += 1
        except NotReadable:
            outcomes["not readable"] += 1
        assert read[0] <= MAX_FILE_READ
        most = max(most, read[0])
    elapsed = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"\nelf fuzz: {FILES} files in {elapsed:.2f} s ({FILES / elapsed:.0f} files/s), "
        f"{outcomes}, most bytes read from one file {most}, peak RSS {rss // 1024} MiB"
    )
    assert outcomes["read"] and outcomes["not readable"]  # both kinds were generated


def test_the_largest_tables_allowed_cost_memory_bounded_by_the_caps() -> None:
    # A file whose .dynsym and .dynstr have the largest size allowed (holes): the reader holds
    # the two tables and one copy of the symbol table's words, nothing more.
    e = CraftedElf()
    e.put_section(1, "sh_size", (4 << 20) // 24 * 24)
    e.put_section(2, "sh_size", 4 << 20)
    e.put_section(2, "sh_offset", 6 << 20)
    data, claimed = bytes(e.data), 12 << 20

    def pread(length: int, offset: int) -> bytes:
        head = data[offset : offset + length]
        return head + bytes(min(length, claimed - offset) - len(head))

    tracemalloc.start()
    try:
        found = dynamic_symbols(pread, claimed, SYMBOLS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == dict.fromkeys(SYMBOLS)  # the names are not in the (zeroed) table
    assert peak <= 4 * MAX_FILE_READ
    print(f"\nlargest tables: peak {peak / (1 << 20):.1f} MiB traced")


def test_a_huge_claimed_count_is_refused_before_any_table_is_read() -> None:
    e = CraftedElf()
    struct.pack_into("<H", e.data, 60, 0xFFFF)  # e_shnum
    data = bytes(e.data)
    read: list[int] = []

    def pread(length: int, offset: int) -> bytes:
        read.append(length)
        return data[offset : offset + length]

    try:
        dynamic_symbols(pread, len(data), SYMBOLS)
        raised = False
    except NotReadable as exc:
        raised = "e_shnum" in str(exc)
    assert raised
    assert sum(read) <= 64 + 56
