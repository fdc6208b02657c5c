"""Live pool sizes read from another process's memory (probe.livesizes), without NumPy.

A tiny shared library named like OpenBLAS, compiled here with gcc, exports the same data
symbol (`int blas_cpu_number`); a child process loads it and changes the value, and the
reader must find it through maps, the ELF dynamic symbol table and /proc/PID/mem. Without
gcc these tests skip (the real OpenBLAS is covered by `make test-real`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.probe.elf import ElfSymbol, NotReadable, dynamic_symbols
from oversub.probe.livesizes import LiveReader, LiveSizes, maps_libraries
from oversub.probe.sampler import TreeSampler
from tests.support.fake_proc import deny_open

SOURCE = """
int blas_cpu_number = 3;
int blas_num_threads = 7;
int blas_server_avail = 1;
int openblas_get_num_threads(void) { return blas_cpu_number; }
"""

CHILD = """
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
ctypes.c_int.in_dll(lib, "blas_cpu_number").value = int(sys.argv[2])
if len(sys.argv) > 3:  # threads shut down (as OpenBLAS does around fork)
    ctypes.c_int.in_dll(lib, "blas_server_avail").value = int(sys.argv[3])
print("ready", flush=True)
time.sleep(60)
"""


def elf_symbol(fd: int, name: str) -> ElfSymbol | None:
    """The data object `name` of the file open on `fd`, by the reader livesizes uses."""
    return dynamic_symbols(lambda n, at: os.pread(fd, n, at), os.fstat(fd).st_size, [name])[name]


def maps_device(st: os.stat_result) -> str:
    """st_dev as maps writes it (major:minor in hex)."""
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"


def local_disk(st: os.stat_result) -> str:
    """A mountinfo line that puts the file system of `st` on a local disk (ext4)."""
    return f"22 1 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / / rw - ext4 /dev/sda1 rw\n"


@pytest.fixture(scope="module")
def fake_openblas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libopenblas_fake.so: the basename makes oversub classify it as OpenBLAS."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc/cc) to build the fake OpenBLAS library")
    out = tmp_path_factory.mktemp("lib") / "libopenblas_fake.so"
    src = out.with_suffix(".c")
    src.write_text(SOURCE)
    subprocess.run([gcc, "-shared", "-fPIC", "-O0", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture
def child(fake_openblas: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that loaded the library and set its pool to 1 thread in code."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(fake_openblas), "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipe


def test_elf_symbol_finds_the_data_object(fake_openblas: Path) -> None:
    fd = os.open(fake_openblas, os.O_RDONLY)
    try:
        symbol = elf_symbol(fd, "blas_cpu_number")
        assert symbol is not None and symbol.size == 4 and symbol.little
        assert elf_symbol(fd, "no_such_symbol") is None
        # A function is not a thread count.
        assert elf_symbol(fd, "openblas_get_num_threads") is None
    finally:
        os.close(fd)


def test_a_file_that_is_not_elf_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "libopenblas.so"
    junk.write_bytes(b"#!/bin/sh\n" * 20)
    fd = os.open(junk, os.O_RDONLY)
    try:
        with pytest.raises(NotReadable):
            elf_symbol(fd, "blas_cpu_number")
    finally:
        os.close(fd)


def test_the_live_value_set_in_code_is_read(child: subprocess.Popen[str]) -> None:
    maps = Path(f"/proc/{child.pid}/maps").read_bytes()
    assert [lib.key for lib in maps_libraries(maps)] == ["openblas"]
    reader = LiveReader()
    assert reader.read(child.pid, maps) == LiveSizes({"openblas": 1}, {"openblas": 0})
    # Cached symbols, fresh value.
    assert reader.read(child.pid, maps) == LiveSizes({"openblas": 1}, {"openblas": 0})


def test_a_pool_whose_threads_do_not_exist_has_no_extra_threads(fake_openblas: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(fake_openblas), "4", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        maps = Path(f"/proc/{proc.pid}/maps").read_bytes()
        assert LiveReader().read(proc.pid, maps) == LiveSizes({"openblas": 4}, {"openblas": 0})
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipe


def test_the_sampler_carries_live_sizes(child: subprocess.Popen[str]) -> None:
    with TreeSampler(child.pid) as sampler:
        sample = sampler.sample()
    p = sample.processes[child.pid]
    assert p.pools == ("openblas",)
    assert p.live_pools == {"openblas": 1}
    assert p.live_threads == {"openblas": 0}
    assert "live_pools" not in sample.unavailable


def test_a_refused_memory_read_is_unavailable_not_an_error(
    child: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not root and not its ancestor: the kernel refuses /proc/PID/mem, maps stays readable.
    deny_open(monkeypatch, Path(f"/proc/{child.pid}/mem"))
    with TreeSampler(child.pid) as sampler:
        sample = sampler.sample()
    p = sample.processes[child.pid]
    assert p.pools == ("openblas",)
    assert p.live_pools is None
    assert "live_pools" in sample.unavailable


def test_a_fake_tree_resolves_the_library_inside_the_process_root(
    fake_openblas: Path, tmp_path: Path
) -> None:
    # A container's process maps /usr/lib/...; the reader opens it through
    # /proc/PID/root, checks the inode against maps, and reads the value from mem.
    proc = tmp_path / "proc" / "42"
    lib_dir = proc / "root" / "usr" / "lib"
    lib_dir.mkdir(parents=True)
    lib = lib_dir / "libopenblas_fake.so"
    shutil.copy(fake_openblas, lib)
    inode, dev = lib.stat().st_ino, maps_device(lib.stat())
    base = 0x10000
    (proc / "maps").write_text(
        f"{base:08x}-{base + 0x1000:08x} r--p 00000000 {dev} {inode} /usr/lib/libopenblas_fake.so\n"
        f"{base + 0x1000:08x}-{base + 0x2000:08x} r-xp 00001000 {dev} {inode} "
        "/usr/lib/libopenblas_fake.so\n"
        f"{base + 0x2000:08x}-{base + 0x8000:08x} rw-p 00002000 {dev} {inode} "
        "/usr/lib/libopenblas_fake.so\n"
        "7ffc0000-7ffc1000 rw-p 00000000 00:00 0 [stack]\n"
    )
    (proc / "mountinfo").write_text(local_disk(lib.stat()))
    fd = os.open(lib, os.O_RDONLY)
    try:
        size = elf_symbol(fd, "blas_cpu_number")
        started = elf_symbol(fd, "blas_server_avail")
    finally:
        os.close(fd)
    assert size is not None and started is not None
    with open(proc / "mem", "wb") as mem:
        mem.seek(base + size.offset)
        mem.write((6).to_bytes(4, "little"))
        mem.seek(base + started.offset)
        mem.write((1).to_bytes(4, "little"))
    maps = (proc / "maps").read_bytes()
    assert LiveReader(str(tmp_path)).read(42, maps) == LiveSizes({"openblas": 6}, {"openblas": 5})
    # Another file at the same path (a different inode) is not trusted.
    other = maps.replace(str(inode).encode(), str(inode + 1).encode())
    found = LiveReader(str(tmp_path)).read(42, other)
    assert (found.sizes, found.extra) == ({}, {})
    assert (
        "path: another file than the one mapped" in found.unreadable["/usr/lib/libopenblas_fake.so"]
    )


@pytest.mark.parametrize("value", [0, -1, 1 << 20])
def test_a_value_that_is_no_thread_count_is_ignored(fake_openblas: Path, value: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(fake_openblas), str(value)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        maps = Path(f"/proc/{proc.pid}/maps").read_bytes()
        assert LiveReader().read(proc.pid, maps) == LiveSizes({}, {})
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipe


def test_a_vanished_process_reads_nothing(fake_openblas: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(fake_openblas), "2"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    maps = Path(f"/proc/{proc.pid}/maps").read_bytes()
    reader = LiveReader()
    assert reader.read(proc.pid, maps).sizes == {"openblas": 2}
    proc.kill()
    proc.communicate()  # reaps it and closes its pipe
    deadline = time.monotonic() + 5
    while Path(f"/proc/{proc.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.read(proc.pid, maps) == LiveSizes({}, {})
