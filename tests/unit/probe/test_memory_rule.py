"""Issue 38, rows 1, 2, 3 and 5, on fake /proc trees: what attribution and the live pool
read may read of a hostile process's memory, how much, and for how long.

1. a word on a thread's stack pointing into code on a FUSE (or NFS) file system is never
   read to check for a call before it (the read would wait for the server, forever);
2. a live pool size whose `load base + symbol` lands in a FUSE page right after a valid
   library is not read;
3. a process that starts threads full of fresh addresses costs a bounded number of reads
   per sample and a bounded memo, whatever it does;
5. a process that execs is another program: what was proven of it is dropped.

`tests/system/test_memory_reads.py` does rows 1 and 2 against a real FUSE server that never
answers.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.probe import memreader
from oversub.probe.livesizes import LiveReader
from oversub.probe.owners import OwnerReader
from tests.support.elf_craft import VALUE_AT, CraftedElf
from tests.support.fake_threads import (
    DESCRIPTOR_BELOW,
    LIBC,
    ORT,
    PID,
    PY,
    FakeProcess,
    maps_line,
)

CLONE3, START_THREAD = LIBC[0] + 0x100, LIBC[0] + 0x200
ORT_RET = ORT[0] + 0x500


@pytest.fixture
def mem_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """(offset, length) of every read of a /proc/PID/mem (the reader process makes them)."""
    readers = memreader.service()
    real = readers.read_memory
    reads: list[tuple[int, int]] = []

    def read_memory(
        proc_dir: str, session: int, ranges: list[tuple[int, int]], start: int | None = None
    ) -> list[bytes]:
        reads.extend(ranges)
        return real(proc_dir, session, ranges, start)

    monkeypatch.setattr(readers, "read_memory", read_memory)
    yield reads


def touched(reads: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(at, n) for at, n in reads if at < hi and at + n > lo]


def owners(root: Path, threads: list, reader: OwnerReader | None = None) -> dict[int, str]:
    reader = reader or OwnerReader(str(root), machine="x86_64")
    found = reader.read(PID, 42, tuple(threads))
    reader.end_sample()
    return found


@pytest.mark.parametrize("fstype", ["fuse.stall", "fuse", "fuseblk", "nfs4", "cifs", "9p"])
def test_row1_code_on_a_file_system_that_may_not_answer_is_never_read(
    tmp_path: Path, mem_reads: list[tuple[int, int]], fstype: str
) -> None:
    # onnxruntime's code is on a FUSE (or network) mount: its return addresses on a running
    # worker's stack top and near a blocked thread's stack pointer cannot be checked for a
    # call before them without faulting in that file's pages.
    proc = FakeProcess(tmp_path, [LIBC, ORT])
    proc.mount(ORT, fstype)
    for ret in (CLONE3, START_THREAD, ORT_RET):
        proc.call_site(ret)
    running = proc.thread(101)
    proc.stack_top(101, (CLONE3, START_THREAD, ORT_RET))
    blocked = proc.thread(102, pc=LIBC[0] + 0x10, stack=(LIBC[0] + 0x80, ORT_RET))
    proc.call_site(LIBC[0] + 0x80)
    proc.flush()
    assert owners(tmp_path, [running, blocked]) == {101: "unattributed", 102: "unattributed"}
    assert touched(mem_reads, ORT[0], ORT[1]) == []
    assert mem_reads  # the stacks themselves (anonymous memory) were read


def test_row1_the_same_code_on_a_local_disk_is_read(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC, ORT])
    for ret in (CLONE3, START_THREAD, ORT_RET):
        proc.call_site(ret)
    running = proc.thread(101)
    proc.stack_top(101, (CLONE3, START_THREAD, ORT_RET))
    proc.flush()
    assert owners(tmp_path, [running]) == {101: "onnxruntime"}


def test_row2_a_live_size_landing_in_a_fuse_page_after_the_library_is_not_read(
    tmp_path: Path, mem_reads: list[tuple[int, int]]
) -> None:
    # A valid libopenblas from a regular file, then right after it a page of the process's
    # FUSE file: `load base + blas_cpu_number` lies in that page.
    base, lib = 0x10000, "/usr/lib/libopenblas.so.0"
    proc_dir = tmp_path / "proc" / "42"
    path = proc_dir / "root" / lib.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(CraftedElf().data).ljust(4096, b"\0"))
    st = path.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    maps = (
        f"{base:x}-{base + 0x1000:x} r--p 00000000 {dev} {st.st_ino} {lib}\n"
        f"{base + 0x1000:x}-{base + 0x3000:x} r--p 00000000 00:2d 2 /tmp/mnt/stall\n"
    )
    (proc_dir / "maps").write_text(maps)
    (proc_dir / "mountinfo").write_text(
        f"22 1 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / / rw - ext4 /dev/sda1 rw\n"
        "90 22 0:45 / /tmp/mnt rw,nosuid,nodev - fuse.stall stall rw,user_id=65534\n"
    )
    with open(proc_dir / "mem", "wb") as mem:
        mem.seek(base + VALUE_AT[0])
        mem.write((6).to_bytes(4, "little") + (1).to_bytes(4, "little"))
    found = LiveReader(str(tmp_path)).read(42, maps.encode())
    assert found.sizes == {}
    assert "may not be read" in found.unreadable[lib]
    assert touched(mem_reads, base + 0x1000, base + 0x3000) == []


# Row 3: a 16 MiB executable file (no call instruction anywhere: every check fails) and, at
# each sample, short-lived threads whose stacks hold fresh addresses into it.
BIG = (0x1000000, 0x2000000, "/opt/app/big.bin")
THREADS, WORDS, SAMPLES = 8, 2000, 6


def test_row3_a_process_cannot_grow_the_memo_or_the_reads_per_sample(
    tmp_path: Path, mem_reads: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = FakeProcess(tmp_path, [LIBC, BIG])
    for ret in (CLONE3, START_THREAD):
        proc.call_site(ret)
    stacks = [proc.stack_top(1000 + i, ()) for i in range(THREADS)]
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    per_sample: list[int] = []
    readers = memreader.service()
    recording = readers.read_memory
    requests: list[int] = []

    def read_memory(*args: Any, **kwargs: Any) -> list[bytes]:
        requests.append(1)
        return recording(*args, **kwargs)

    monkeypatch.setattr(readers, "read_memory", read_memory)
    per_request: list[int] = []
    fresh = iter(range(BIG[0] + 8, BIG[1]))
    for sample in range(SAMPLES):
        threads = []
        for i, (_, end) in enumerate(stacks):
            tid = 1000 + THREADS * sample + i
            tcb = end - DESCRIPTOR_BELOW
            struct.pack_into("<i", proc.mem, tcb + 0x2D0, tid)
            words = (CLONE3, START_THREAD, *(next(fresh) for _ in range(WORDS)))
            struct.pack_into(f"<{len(words)}Q", proc.mem, tcb - 8 * len(words), *words[::-1])
            threads.append(proc.thread(tid))
        proc.flush()
        before, asked = len(mem_reads), len(requests)
        reader.read(PID, 42, tuple(threads))
        reader.end_sample()
        per_sample.append(len(mem_reads) - before)
        per_request.append(len(requests) - asked)
        memo = reader._known[(PID, 42)].mem.calls
        assert len(memo) <= 4096, f"sample {sample}: {len(memo)} addresses remembered"
        for tid in range(1000 + THREADS * sample, 1000 + THREADS * (sample + 1)):
            os.rename(proc.base / "task" / str(tid), tmp_path / f"gone-{tid}")  # it ended
    assert max(per_sample) <= 1024, per_sample
    assert sum(n for _, n in mem_reads) <= SAMPLES * (2 << 20)
    # Each a round trip to the reader process: the checks go 64 to a request, not one each.
    assert max(per_request) <= 1024 // 64 + 4, per_request


def test_row5_an_exec_drops_what_was_proven(tmp_path: Path) -> None:
    # A Python wrapper (libpython mapped: its main thread is the interpreter's) execs a
    # native program under the same pid and start time.
    proc = FakeProcess(tmp_path, [LIBC, PY])
    main = proc.thread(PID)
    proc.flush()
    (proc.base / "exe").symlink_to("/usr/bin/python3.11")
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    assert owners(tmp_path, [main], reader) == {PID: "python"}
    proc.maps = maps_line(LIBC[0], LIBC[1], LIBC[2]) + maps_line(0x400000, 0x401000, "/opt/solver")
    proc.flush()
    (proc.base / "exe").unlink()
    (proc.base / "exe").symlink_to("/opt/solver")
    assert owners(tmp_path, [main], reader) == {PID: "unattributed"}


def test_row5_an_unreadable_exe_keeps_what_was_proven(tmp_path: Path) -> None:
    # A main thread that exited while others run has no exe to read: no news, no reset.
    proc = FakeProcess(tmp_path, [LIBC, PY])
    main = proc.thread(PID)
    proc.flush()
    (proc.base / "exe").symlink_to("/usr/bin/python3.11")
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    assert owners(tmp_path, [main], reader) == {PID: "python"}
    (proc.base / "exe").unlink()
    assert owners(tmp_path, [main], reader) == {PID: "python"}
