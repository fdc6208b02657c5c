"""Function symbols of a (hostile) shared object: `probe.elf.function_symbols`.

Which function a sampled PC lies in comes from the file's `.symtab`, else `.dynsym`, and
its MiniDebugInfo (`.gnu_debugdata`, xz); every read bounded, anything odd NotReadable.
"""

from __future__ import annotations

import lzma
import os
import random
import struct
from pathlib import Path

import pytest

from oversub.probe.elf import (
    MAX_DEBUGDATA,
    MAX_FUNCTION_READ,
    MAX_NAME,
    NotReadable,
    function_symbols,
)
from tests.support.elf_code import STT_OBJECT, elf_with_functions, minidebuginfo


def table_of(data: bytes) -> object:
    return function_symbols(lambda n, at: data[at : at + n], len(data))


def test_a_pc_names_the_function_whose_range_holds_it() -> None:
    data = elf_with_functions([("work", 0x1000, 0x40), ("spin_wait", 0x1040, 0x10)])
    t = function_symbols(lambda n, at: data[at : at + n], len(data))
    assert t.source == ".symtab" and len(t) == 2
    assert t.name_at(0x1000) == "work" and t.name_at(0x103F) == "work"
    assert t.name_at(0x1040) == "spin_wait" and t.name_at(0x104F) == "spin_wait"
    assert t.name_at(0x1050) is None  # past the last function: a hidden one, unnamed
    assert t.name_at(0xFFF) is None


def test_dynsym_when_no_symtab_and_data_objects_are_no_functions() -> None:
    data = elf_with_functions(
        [("GOMP_parallel", 0x1000, 0x20)],
        table=".dynsym",
        symbols=[("gomp_global_icv", (1 << 4) | STT_OBJECT, 1, 0x1020, 0x40)],
    )
    t = function_symbols(lambda n, at: data[at : at + n], len(data))
    assert t.source == ".dynsym"
    assert t.name_at(0x1010) == "GOMP_parallel" and t.name_at(0x1030) is None


def test_minidebuginfo_names_the_hidden_functions() -> None:
    # GCC's vendored libgomp exports GOMP_* and hides its barrier in .gnu_debugdata.
    hidden = minidebuginfo([("gomp_barrier_wait_end", 0x1100, 0x80)])
    data = elf_with_functions([("GOMP_barrier", 0x1000, 0x10)], table=".dynsym", debugdata=hidden)
    t = function_symbols(lambda n, at: data[at : at + n], len(data))
    assert t.source == ".dynsym+.gnu_debugdata"
    assert t.name_at(0x1005) == "GOMP_barrier"
    assert t.name_at(0x1162) == "gomp_barrier_wait_end"


@pytest.mark.parametrize(
    "packed",
    [
        b"not xz at all",
        lzma.compress(b"\x7fELF" + bytes(100), format=lzma.FORMAT_XZ),  # not a shared object
        lzma.compress(bytes(9 * MAX_DEBUGDATA), format=lzma.FORMAT_XZ),  # a bomb: 9 MiB of 0
        lzma.compress(b"x" * 100, format=lzma.FORMAT_XZ)[:-8],  # truncated
    ],
    ids=["noise", "not-elf", "bomb", "truncated"],
)
def test_bad_debugdata_is_not_readable(packed: bytes) -> None:
    data = elf_with_functions([("f", 0x1000, 0x10)], debugdata=packed)
    with pytest.raises(NotReadable):
        table_of(data)


def test_debugdata_that_asks_for_a_huge_dictionary_is_not_decoded() -> None:
    # Well-formed, but its header asks the decoder for a 1 GiB dictionary: refused by the
    # decoder's memory limit before any allocation, not read.
    inner = lzma.decompress(minidebuginfo([("gomp_barrier_wait_end", 0x1100, 0x80)]))
    filters = [{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 30}]
    packed = lzma.compress(inner, format=lzma.FORMAT_XZ, filters=filters)
    data = elf_with_functions([("GOMP_barrier", 0x1000, 0x10)], table=".dynsym", debugdata=packed)
    with pytest.raises(NotReadable):
        table_of(data)


def test_names_are_cut_and_symbols_outside_the_segments_skipped() -> None:
    long = "_R" + "x" * 5000
    data = elf_with_functions(
        [(long, 0x1000, 0x10), ("past_the_segment", 0x10_0000, 0x10), ("empty", 0x1020, 0)]
    )
    t = function_symbols(lambda n, at: data[at : at + n], len(data))
    name = t.name_at(0x1001)
    assert name is not None and len(name) == MAX_NAME
    assert len(t) == 1  # the one outside every loadable segment and the empty one: skipped


def test_a_real_library_names_its_functions() -> None:
    libc = next(
        (p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6")
         if Path(p).exists()),
        None,
    )  # fmt: skip
    if libc is None:
        pytest.skip("no glibc at a known path")
    fd = os.open(libc, os.O_RDONLY)
    try:
        t = function_symbols(lambda n, at: os.pread(fd, n, at), os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert len(t) > 1000
    # Every exported function's own start names it (or an alias at the same address).
    assert t.name_at(_dynamic_value(libc, b"sched_yield")) in {
        "sched_yield",
        "__sched_yield",
        "__GI___sched_yield",
    }


def _dynamic_value(path: str, wanted: bytes) -> int:
    """st_value of a .dynsym function (a second, naive reader: the test's own)."""
    data = Path(path).read_bytes()
    shoff, shentsize, shnum = struct.unpack_from("<Q", data, 40)[0], 64, data[60] | data[61] << 8
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    dynsym = next(s for s in sections if s[1] == 11)
    dynstr = sections[dynsym[6]]
    for at in range(dynsym[4], dynsym[4] + dynsym[5], 24):
        name, _info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, at)
        start = dynstr[4] + name
        if data[start : data.index(b"\0", start)] == wanted and shndx:
            return int(value)
    raise AssertionError(wanted)


def test_hostile_files_raise_only_not_readable_within_the_read_bound() -> None:
    """Random mutations of a file with every kind of table; nothing but NotReadable escapes,
    and no file makes the reader read more than MAX_FUNCTION_READ bytes."""
    rng = random.Random(41)
    base = elf_with_functions(
        [("work", 0x1000, 0x40)],
        b"\x90" * 64,
        debugdata=minidebuginfo([("hidden", 0x1040, 0x10)]),
    )
    worst = 0
    for _ in range(1500):
        data = bytearray(base)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] = rng.randrange(256)
            else:
                width = rng.choice((2, 4, 8))
                at = min(at, len(data) - width)
                value = rng.choice((0, 1, 24, 64, 0xFFFF, len(data), (1 << (8 * width)) - 1))
                data[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        claimed = len(data) if rng.random() < 0.8 else rng.choice((len(data) // 2, 1 << 40))
        read = [0]

        def pread(n: int, at: int, data: bytes = bytes(data), read: list[int] = read) -> bytes:
            read[0] += n
            return data[at : at + n]

        try:
            t = function_symbols(pread, claimed)
            for pc in (0, 0x1000, 0x1041, 1 << 63):
                t.name_at(pc)
        except NotReadable:
            pass
        worst = max(worst, read[0])
        assert read[0] <= MAX_FUNCTION_READ
    assert worst > 0
