"""A thread's owner from the start routine at the top of its stack (`probe.startroutine`),
on fake processes laid out as glibc lays out real ones (tests/support/fake_threads.py)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from oversub.core.samples import ThreadSample
from oversub.probe.backing import parse_maps
from oversub.probe.owners import TOP_TRIES, OwnerReader
from oversub.probe.startroutine import stacks_of
from tests.support.fake_threads import (
    DESCRIPTOR_BELOW,
    GOMP,
    LIBC,
    NUMEXPR,
    OMPPOOL,
    ORT,
    PID,
    PY,
    FakeProcess,
    maps_line,
    memory_of,
)

STDCXX = (0x80000, 0x88000, "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30")
USER = (0x88000, 0x90000, "/opt/app/libmine.so")
CLONE3, START_THREAD = LIBC[0] + 0x100, LIBC[0] + 0x200


def process(root: Path, *mapped: tuple[int, int, str]) -> FakeProcess:
    proc = FakeProcess(root, [LIBC, *mapped])
    for ret in (CLONE3, START_THREAD):
        proc.call_site(ret)
    return proc


def owners(root: Path, threads: list[ThreadSample], reader: OwnerReader | None = None):
    reader = reader or OwnerReader(str(root), machine="x86_64")
    found = reader.read(PID, 42, tuple(threads))
    reader.end_sample()
    return found


def test_running_workers_are_named_by_the_code_that_started_them(tmp_path: Path) -> None:
    proc = process(tmp_path, GOMP, ORT, NUMEXPR, STDCXX, PY)
    numexpr, ort, stdcxx, gomp = NUMEXPR[0] + 0x40, ORT[0] + 0x80, STDCXX[0] + 0x40, GOMP[0] + 8
    python, deeper = PY[0] + 0x40, NUMEXPR[0] + 0x90
    for ret in (numexpr, ort, stdcxx, gomp, python, deeper):
        proc.call_site(ret)
    threads = [
        proc.thread(PID),  # the main thread: its stack is [stack], not a thread stack
        proc.thread(101),  # all of them running: no PC to read
        proc.thread(102),
        proc.thread(103),
        proc.thread(104),
    ]
    proc.stack_top(101, (CLONE3, START_THREAD, numexpr))
    proc.stack_top(102, (CLONE3, START_THREAD, stdcxx, ort))  # a std::thread
    proc.stack_top(103, (CLONE3, START_THREAD, gomp))
    # A Python thread that calls numexpr is the interpreter's, not one of numexpr's.
    proc.stack_top(104, (CLONE3, START_THREAD, python, deeper))
    proc.flush()
    assert owners(tmp_path, threads) == {
        PID: "python",
        101: "numexpr",
        102: "onnxruntime",
        103: "libgomp",
        104: "python",
    }


def test_a_libgomp_team_started_for_numba_is_numbas(tmp_path: Path) -> None:
    proc = process(tmp_path, GOMP, OMPPOOL)
    proc.call_site(GOMP[0] + 8)
    thread = proc.thread(101)
    proc.stack_top(101, (CLONE3, START_THREAD, GOMP[0] + 8))
    proc.flush()
    assert owners(tmp_path, [thread]) == {101: "numba"}


def test_stale_words_and_pointers_without_a_call_before_them_are_skipped(tmp_path: Path) -> None:
    proc = process(tmp_path, NUMEXPR)
    proc.call_site(NUMEXPR[0] + 0x40)
    stale = NUMEXPR[0] + 0x300  # into numexpr's code, but no call precedes it
    thread = proc.thread(101)
    proc.stack_top(101, (0x1500, stale, CLONE3, 7, START_THREAD, stale, NUMEXPR[0] + 0x40))
    proc.flush()
    assert owners(tmp_path, [thread]) == {101: "numexpr"}


def test_frames_below_a_large_static_tls_are_read_further_down(tmp_path: Path) -> None:
    proc = process(tmp_path, NUMEXPR)
    proc.call_site(NUMEXPR[0] + 0x40)
    thread = proc.thread(101)
    # The mapping is 16 KiB: frames 0x1400 apart put the start routine 11 KiB down.
    proc.stack_top(101, (CLONE3, START_THREAD, NUMEXPR[0] + 0x40), gap=0xE00)
    proc.flush()
    assert owners(tmp_path, [thread]) == {101: "numexpr"}


def test_what_is_not_the_layout_is_no_evidence(tmp_path: Path) -> None:
    proc = process(tmp_path, NUMEXPR, USER)
    for ret in (NUMEXPR[0] + 0x40, USER[0] + 0x40):
        proc.call_site(ret)
    # Started apart: no start-time group lends one thread's owner to another.
    threads = [proc.thread(tid, start=tid * 10) for tid in (101, 102, 103, 104)]
    proc.stack_top(101, (NUMEXPR[0] + 0x40, CLONE3))  # no C library frame first
    proc.stack_top(102, (CLONE3, START_THREAD, NUMEXPR[0] + 0x40), descriptor=False)
    # Two stacks claiming one thread (a forged descriptor): neither counts.
    proc.stack_top(104, (CLONE3, START_THREAD, NUMEXPR[0] + 0x40))
    proc.stack_top(104, (CLONE3, START_THREAD, USER[0] + 0x40))
    # Started by a library no row names: that library's (`runtimes.owner_of_code`).
    proc.stack_top(103, (CLONE3, START_THREAD, USER[0] + 0x40))
    proc.flush()
    assert owners(tmp_path, threads) == {
        101: "unattributed",
        102: "unattributed",
        103: "lib:/opt/app/libmine.so",
        104: "unattributed",
    }


def test_a_just_started_thread_is_read_again_and_a_known_stack_is_not(tmp_path: Path) -> None:
    proc = process(tmp_path, NUMEXPR, ORT)
    for ret in (NUMEXPR[0] + 0x40, ORT[0] + 0x40):
        proc.call_site(ret)
    first, young = proc.thread(101), proc.thread(102, start=900)
    first_top = proc.stack_top(101, (CLONE3, START_THREAD, NUMEXPR[0] + 0x40))
    _, young_end = proc.stack_top(102, ())  # its descriptor is there, its frames not yet
    proc.flush()
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    assert owners(tmp_path, [first, young], reader) == {101: "numexpr", 102: "unattributed"}
    # Its frames appear; 101's stack is wiped: a proven owner is never read again.
    proc.mem[first_top[0] : first_top[1]] = bytes(first_top[1] - first_top[0])
    tcb = young_end - DESCRIPTOR_BELOW
    for i, ret in enumerate((CLONE3, START_THREAD, ORT[0] + 0x40)):
        struct.pack_into("<Q", proc.mem, tcb - 0x100 * (i + 1), ret)
    proc.flush()
    assert owners(tmp_path, [first, young], reader) == {101: "numexpr", 102: "onnxruntime"}


def test_a_stack_never_found_is_given_up_after_top_tries(tmp_path: Path) -> None:
    proc = process(tmp_path)
    thread = proc.thread(101)
    proc.flush()
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    for _ in range(TOP_TRIES):
        assert owners(tmp_path, [thread], reader) == {101: "unattributed"}
    (proc.base / "mem").unlink()  # a further pass would now find no memory to read
    (proc.base / "mem").mkdir()
    (proc.base / "maps").unlink()
    (proc.base / "maps").mkdir()
    assert owners(tmp_path, [thread], reader) == {101: "unattributed"}


def test_hostile_stacks_never_raise(tmp_path: Path) -> None:
    proc = process(tmp_path, NUMEXPR)
    thread = proc.thread(101)
    start, end = proc.stack_top(101, (CLONE3, START_THREAD, 2**64 - 8, 2**63))
    proc.flush()
    (proc.base / "mem").write_bytes(bytes(proc.mem[: start + 0x100]))  # truncated memory
    assert owners(tmp_path, [thread]) == {101: "unattributed"}
    (proc.base / "maps").write_text(
        maps_line(end, end + 0x1000, "", "---p") + maps_line(end + 0x1000, 2**64 - 4096, "", "rw-p")
    )
    assert owners(tmp_path, [thread]) == {101: "unattributed"}


def test_stack_mappings_are_anonymous_rw_right_above_a_guard() -> None:
    maps = (
        maps_line(0x1000, 0x2000, "", "---p")
        + maps_line(0x2000, 0x9000, "", "rw-p")  # a stack
        + maps_line(0x9000, 0xA000, "", "rw-p")  # rw after rw: no guard below
        + maps_line(0xB000, 0xC000, "", "---p")
        + maps_line(0xD000, 0xE000, "", "rw-p")  # not adjacent to the guard
        + maps_line(0xE000, 0xF000, "/lib/libx.so", "---p")
        + maps_line(0xF000, 0x10000, "", "rw-p")  # above a file's guard
        + maps_line(0x10000, 0x11000, "", "---p")
        + maps_line(0x11000, 0x12000, "[stack]", "rw-p")
        + "zz-yy rw-p 0 0 0\n"
    )
    assert stacks_of(parse_maps(maps.encode())) == [(0x2000, 0x9000)]


def test_the_layout_is_read_on_x86_64_only(tmp_path: Path) -> None:
    proc = process(tmp_path, NUMEXPR)
    proc.call_site(NUMEXPR[0] + 0x40)
    thread = proc.thread(101)
    proc.stack_top(101, (CLONE3, START_THREAD, NUMEXPR[0] + 0x40))
    proc.flush()
    arm = OwnerReader(str(tmp_path), machine="aarch64")  # another TLS layout there
    assert owners(tmp_path, [thread], arm) == {101: "unattributed"}
    assert owners(tmp_path, [thread]) == {101: "numexpr"}


def test_mappings_without_a_descriptor_are_reported_bare(tmp_path: Path) -> None:
    import os

    from oversub.probe.startroutine import StackTops

    proc = process(tmp_path, NUMEXPR)
    proc.call_site(NUMEXPR[0] + 0x40)
    real = proc.stack_top(101, (CLONE3, START_THREAD, NUMEXPR[0] + 0x40))
    fake = proc.stack_top(999, (), descriptor=False)
    proc.flush()
    fd = os.open(proc.base / "mem", os.O_RDONLY)
    try:
        texts = {m[0]: m for m in (LIBC, NUMEXPR)}

        def object_at(address: int) -> str | None:
            for lo, hi, path in texts.values():
                if lo <= address < hi:
                    return path
            return None

        memory = memory_of(proc, fd)
        tops = StackTops(memory, object_at, lambda a: True)
        found = tops.read([real, fake], {101})
        assert found == {101: (real, NUMEXPR[2])}
        assert tops.bare == [fake] and tops.below == DESCRIPTOR_BELOW
        # Learnt: the next pass reads one place per stack, and still finds it.
        assert StackTops(memory, object_at, lambda a: True, tops.tid_offset, tops.below).read(
            [fake, real], {101}
        ) == {101: (real, NUMEXPR[2])}
    finally:
        os.close(fd)


def test_a_process_first_reading_costs_a_few_requests_not_one_per_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 12 threads started by one runtime: its maps, the stack tops in batches (of 8 here, 32
    # in use) and the checks of the return addresses read ahead together, not a request per
    # read (each is a round trip to the reader process, `probe.memreader`).
    from oversub.probe import memreader, startroutine

    monkeypatch.setattr(startroutine, "BATCH", 8)

    proc = FakeProcess(tmp_path, [LIBC, ORT])
    clone3, start_thread, ort = LIBC[0] + 0x100, LIBC[0] + 0x200, ORT[0] + 0x500
    for ret in (clone3, start_thread, ort):
        proc.call_site(ret)
    threads = []
    for tid in range(101, 113):
        proc.stack_top(tid, (clone3, start_thread, ort))
        threads.append(proc.thread(tid))
    proc.flush()
    readers = memreader.Readers()
    asked: list[str] = []
    real_memory, real_file = readers.read_memory, readers.read_file

    def read_memory(*args: Any, **kwargs: Any) -> list[bytes]:
        asked.append("mem")
        return real_memory(*args, **kwargs)

    def read_file(*args: Any, **kwargs: Any) -> bytes:
        asked.append("file")
        return real_file(*args, **kwargs)

    readers.read_memory = read_memory  # type: ignore[method-assign]
    readers.read_file = read_file  # type: ignore[method-assign]
    try:
        reader = OwnerReader(str(tmp_path), machine="x86_64", readers=readers)
        owners = reader.read(PID, 42, tuple(threads))
    finally:
        readers.close()
    assert set(owners.values()) == {"onnxruntime"}
    # Its maps; the first batch of tops (which opens its memory); the checks of clone3's and
    # start_thread's return addresses together (32 words apart: within the 64 words a walk
    # reads ahead), then ORT's (64 words further); the second batch of tops, whose walks
    # find every check known.
    assert asked == ["file", "mem", "mem", "mem", "mem"], asked
