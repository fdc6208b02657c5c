"""Sampled PCs -> objects, functions and spin loops (`probe.pcmap`), on a fake /proc tree whose
maps map a crafted library (`tests.support.elf_code`) with known code bytes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from oversub.core.pcprofile import MAX_BUCKETS, ObjectSamples
from oversub.probe import pcmap
from oversub.probe.pcmap import (
    LOOP,
    MAX_OBJECTS,
    PcMapper,
    executable_mappings,
    hint_before,
)
from tests.support.elf_code import elf_with_functions
from tests.support.fake_proc import deny_open

PID = 4242
LOAD = 0x7F00_0000_0000
WORK = bytes.fromhex("4801c8 4883c001 4839c8 75f4".replace(" ", "")) * 4  # add, add, cmp, jne
SPIN = bytes.fromhex("f390 4883c001 4839c8 75f4".replace(" ", "")) + b"\x0f\x1f\x00" * 4
DELAY = b"\x90" * 8 + bytes.fromhex("0f31 29c8 3b05 00000000 76ee".replace(" ", ""))
# Functions at load base 0: work 0x1000, spin_wait 0x1040, delay 0x1080.
CODE = WORK.ljust(0x40, b"\xcc") + SPIN.ljust(0x40, b"\xcc") + DELAY.ljust(0x40, b"\xcc")
FUNCTIONS = [("work", 0x1000, 0x40), ("spin_wait", 0x1040, 0x40), ("delay", 0x1080, 0x40)]

x86_only = pytest.mark.skipif(
    os.uname().machine not in ("x86_64", "amd64"), reason="x86 code bytes in the fake library"
)


def maps_device(st: os.stat_result) -> str:
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"


def fake_tree(tmp_path: Path, fs: str = "ext4", library: bytes | None = None) -> tuple[Path, Path]:
    """root with /proc/PID/{maps,mountinfo,root -> /} mapping lib/libspin.so at LOAD."""
    lib = tmp_path / "lib" / "libspin.so"
    lib.parent.mkdir()
    lib.write_bytes(library if library is not None else elf_with_functions(FUNCTIONS, CODE))
    st = lib.stat()
    dev = maps_device(st)
    proc = tmp_path / "root" / "proc" / str(PID)
    proc.mkdir(parents=True)
    (proc / "root").symlink_to("/")
    (proc / "maps").write_text(
        f"{LOAD:x}-{LOAD + 0x1000:x} r--p 00000000 {dev} {st.st_ino} {lib}\n"
        f"{LOAD + 0x1000:x}-{LOAD + 0x2000:x} r-xp 00001000 {dev} {st.st_ino} {lib}\n"
        f"{LOAD + 0x2000:x}-{LOAD + 0x3000:x} r--p 00002000 {dev} {st.st_ino} {lib}\n"
        "7f1000000000-7f1000001000 r-xp 00000000 00:00 0 \n"
        "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]\n"
    )
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    (proc / "mountinfo").write_text(f"22 1 {major}:{minor} / / rw - {fs} /dev/x rw\n")
    return tmp_path / "root", lib


def by_function(obj: ObjectSamples) -> dict[tuple[str | None, bool], int]:
    return {(b.function, b.spin_hint): b.samples for b in obj.buckets}


def pc(offset: int) -> int:
    return LOAD + offset


@x86_only
def test_pcs_map_to_their_object_function_and_spin_hint(tmp_path: Path) -> None:
    root, lib = fake_tree(tmp_path)
    pcs = {
        pc(0x1003): 5,  # work: an add
        pc(0x1042): 40,  # right after the PAUSE
        pc(0x1046): 7,  # later in its loop
        pc(0x1040): 3,  # the PAUSE itself: the head of a sampled loop
        pc(0x108A): 20,  # after the NOPs and RDTSC of a delay loop
        0x7F10_0000_0010: 2,  # anonymous code: a JIT
        0x7FFD_0000_0100: 1,  # the vDSO
        0x1234: 4,  # no mapping
    }
    objects, note = PcMapper(str(root)).objects(PID, pcs)
    assert note == ""
    assert [(o.path, o.samples) for o in objects] == [
        (str(lib), 75),
        ("[unmapped]", 4),
        ("[anonymous]", 2),
        ("[vdso]", 1),
    ]
    spin = objects[0]
    assert spin.names == ".symtab"
    assert by_function(spin) == {("spin_wait", True): 50, ("delay", True): 20, ("work", False): 5}


@x86_only
def test_a_loop_head_counts_only_beside_a_sampled_hint(tmp_path: Path) -> None:
    root, _ = fake_tree(tmp_path)
    alone, _ = PcMapper(str(root)).objects(PID, {pc(0x1040): 3, pc(0x1003): 1})
    assert by_function(alone[0]) == {("spin_wait", False): 3, ("work", False): 1}
    # A PC more than LOOP bytes before the hinted one is no head of its loop.
    far, _ = PcMapper(str(root)).objects(PID, {pc(0x1042): 1, pc(0x1042 - LOOP - 1): 1})
    assert by_function(far[0]) == {("spin_wait", True): 1, ("work", False): 1}


def test_spin_hints_of_each_machine() -> None:
    assert hint_before(b"\x48\x01\xc8\xf3\x90", "x86_64")
    assert hint_before(b"\x90\x90\x90\x90\x0f\x31", "x86_64")
    assert not hint_before(b"\x66\x90\x0f\x1f\x44\x00\x00\x90\x90\x90", "x86_64")  # padding
    yield_, wfe, isb = b"\x3f\x20\x03\xd5", b"\x5f\x20\x03\xd5", b"\xdf\x3f\x03\xd5"
    add = b"\x00\x04\x00\x91"
    for hint in (yield_, wfe, isb):
        assert hint_before(add + hint + add, "aarch64")
    assert not hint_before(add * 4, "aarch64")
    # Only whole, aligned instruction words count.
    assert not hint_before(b"\x00\x00" + yield_ + b"\x00\x00", "aarch64")
    assert not hint_before(b"\xf3\x90", "riscv64")


def test_executable_mappings_know_their_load_base() -> None:
    maps = (
        b"1000-2000 r--p 00000000 08:01 7 /lib/a.so\n"
        b"2000-3000 r-xp 00001000 08:01 7 /lib/a.so\n"
        b"5000-6000 r-xp 00002000 08:01 9 /lib/b.so (deleted)\n"
        b"7000-8000 rw-p 00000000 00:00 0 \n"
        b"garbage line\n"
        b"zz-yy r-xp 0 08:01 1 /x\n"
    )
    found = executable_mappings(maps)
    assert [(m.start, m.path, m.deleted, m.load) for m in found] == [
        (0x2000, "/lib/a.so", False, 0x1000),
        (0x5000, "/lib/b.so", True, None),
    ]


def test_a_file_on_fuse_is_never_opened(tmp_path: Path, monkeypatch: Any) -> None:
    root, lib = fake_tree(tmp_path, fs="fuse.sshfs")
    deny_open(monkeypatch, lib)  # an open would fail the read, and say so
    objects, _ = PcMapper(str(root)).objects(PID, {pc(0x1042): 3})
    assert objects[0].path == str(lib) and objects[0].samples == 3
    assert "FUSE" in objects[0].names
    assert by_function(objects[0]) == {(None, False): 3}


def test_a_replaced_file_is_not_read(tmp_path: Path) -> None:
    root, lib = fake_tree(tmp_path)
    impostor = lib.with_name("impostor.so")
    impostor.write_bytes(elf_with_functions([("impostor", 0x1000, 0x100)], CODE))
    os.replace(impostor, lib)  # another inode at the mapped path
    objects, _ = PcMapper(str(root)).objects(PID, {pc(0x1042): 3})
    assert "not the mapped regular file" in objects[0].names
    assert by_function(objects[0]) == {(None, False): 3}


def test_a_file_that_is_no_elf_keeps_its_counts(tmp_path: Path) -> None:
    root, _ = fake_tree(tmp_path, library=b"#!/bin/sh\n" * 600)
    objects, _ = PcMapper(str(root)).objects(PID, {pc(0x1042): 3})
    assert objects[0].samples == 3 and "not a well-formed ELF" in objects[0].names


def test_maps_that_cannot_be_read(tmp_path: Path) -> None:
    objects, note = PcMapper(str(tmp_path)).objects(PID, {0x1000: 2})
    assert note == "its maps could not be read"
    assert [(o.path, o.samples) for o in objects] == [("[unmapped]", 2)]


def test_buckets_and_objects_are_bounded(tmp_path: Path) -> None:
    many = [(f"f{i}", 0x1000 + 4 * i, 4) for i in range(100)]
    root, lib = fake_tree(tmp_path, library=elf_with_functions(many, b"\x00" * 0x200))
    objects, _ = PcMapper(str(root)).objects(PID, {pc(0x1000 + 4 * i): 1 + i for i in range(100)})
    buckets = objects[0].buckets
    assert len(buckets) <= MAX_BUCKETS and buckets[-1].function == "..."
    assert sum(b.samples for b in buckets) == objects[0].samples == sum(range(1, 101))
    # More objects than MAX_OBJECTS: the rest keep their counts, their files unread.
    proc = root / "proc" / str(PID)
    st = lib.stat()
    lines = "".join(
        f"{0x10_0000 * (i + 1):x}-{0x10_0000 * (i + 1) + 0x1000:x} r-xp 00000000 "
        f"{maps_device(st)} {1000 + i} /lib/o{i}.so\n"
        for i in range(MAX_OBJECTS + 3)
    )
    (proc / "maps").write_text(lines)
    pcs = {0x10_0000 * (i + 1) + 8: 1 for i in range(MAX_OBJECTS + 3)}
    objects, note = PcMapper(str(root)).objects(PID, pcs)
    assert len(objects) == MAX_OBJECTS + 3 and sum(o.samples for o in objects) == len(pcs)
    assert note == f"only {MAX_OBJECTS} objects' files read"


def test_function_tables_are_kept_within_their_bound(tmp_path: Path, monkeypatch: Any) -> None:
    root, _ = fake_tree(tmp_path)
    parsed = []
    real = pcmap.function_symbols

    def counting(*args: Any) -> Any:
        parsed.append(1)
        return real(*args)

    monkeypatch.setattr(pcmap, "function_symbols", counting)
    mapper = PcMapper(str(root))
    for _ in range(3):
        mapper.objects(PID, {pc(0x1003): 1})
    assert len(parsed) == 1  # read once, kept
    tiny = PcMapper(str(root), max_table_bytes=16)  # no table fits: read at every window
    for _ in range(2):
        objects, _ = tiny.objects(PID, {pc(0x1003): 1})
        assert by_function(objects[0]) == {("work", False): 1}
    assert len(parsed) == 3


def test_files_go_through_the_access_given(tmp_path: Path) -> None:
    """The sampler hands the reader process's FileAccess (probe.memreader): maps and opens
    go there, and a process it no longer reads keeps its counts."""
    root, lib = fake_tree(tmp_path)

    class Refusing:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def read_file(
            self, proc_dir: str, leaf: str, limit: int, start: int | None = None
        ) -> bytes:
            self.asked.append(leaf)
            return (Path(proc_dir) / leaf).read_bytes()[:limit]

        def open_library(
            self, proc_dir: str, routes: list[tuple[str, int]], device: int, inode: int
        ) -> tuple[int, int] | str:
            self.asked.append("open")
            raise pcmap.OverBudget

    files = Refusing()
    objects, _ = PcMapper(str(root), files=files).objects(PID, {pc(0x1042): 2})
    assert files.asked == ["maps", "open"]
    assert objects[0].path == str(lib) and objects[0].names == "its files are not opened any more"


@x86_only
def test_a_later_window_of_known_pcs_opens_no_file(tmp_path: Path) -> None:
    root, _ = fake_tree(tmp_path)

    class Counting(pcmap.DirectFiles):
        opened = 0

        def open_library(
            self, proc_dir: str, routes: list[tuple[str, int]], device: int, inode: int
        ) -> tuple[int, int] | str:
            Counting.opened += 1
            return super().open_library(proc_dir, routes, device, inode)

    mapper = PcMapper(str(root), files=Counting())
    mapper.objects(PID, {pc(0x1042): 3, pc(0x1003): 1})
    again, _ = mapper.objects(PID, {pc(0x1042): 5, pc(0x1003): 2})
    assert Counting.opened == 1
    assert by_function(again[0]) == {("spin_wait", True): 5, ("work", False): 2}
    mapper.objects(PID, {pc(0x1046): 1})  # a PC not seen: its bytes are read
    assert Counting.opened == 2
