"""The reader process (`probe.memreader`, `probe.readerloop`): what it reads, what it
refuses, and that oversub abandons a read that does not return (a FIFO stands for a file
system that never answers: opening it for reading waits for a writer that never comes).

Each test has its own `Readers`, so that an abandoned reader, a quarantine or the cap never
reaches another test (the samplers share `service()`).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.probe.memreader import Readers, Unreachable
from oversub.probe.readerloop import allowed
from oversub.probe.sampler import TreeSampler

SELF = f"/proc/{os.getpid()}"


@pytest.fixture
def readers() -> Iterator[Readers]:
    made = Readers(deadline=0.3, hard_deadline=1.0)
    try:
        yield made
    finally:
        made.close()
        for pid in made.own_pids():  # abandoned, still waiting: this test's to end
            os.kill(pid, 9)


def stuck_tree(root: Path, pid: int = 123) -> str:
    """A fake /proc/PID whose cmdline, environ, maps and mem are FIFOs nobody writes."""
    proc = root / "proc" / str(pid)
    proc.mkdir(parents=True)
    for leaf in ("cmdline", "environ", "maps", "mem"):
        os.mkfifo(proc / leaf)
    (proc / "stat").write_text(f"{pid} (stuck) S 1 1 1 0 -1 0 " + "0 " * 12 + "77 0\n")
    return str(proc)


def reader_pid(readers: Readers) -> int:
    (pid,) = readers.own_pids()
    return pid


def test_it_reads_a_process_memory_in_batches(readers: Readers) -> None:
    data = ctypes.create_string_buffer(b"oversub reads this from elsewhere", 64)
    at = ctypes.addressof(data)
    session = readers.session()
    got = readers.read_memory(SELF, session, [(at, 7), (at + 8, 5), (1 << 63, 8)])
    assert got == [b"oversub", b"reads", b""]  # an address past off_t: nothing, no error
    assert readers.read_memory(SELF, session, [(at + 14, 4)]) == [b"this"]


def test_without_a_memfd_the_bytes_come_through_the_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Linux before 3.17 has no memfd; a batch larger than the buffer takes the same way.
    from oversub.probe import memreader

    monkeypatch.setattr(memreader, "_shared_buffer", lambda: (-1, None))
    readers = Readers()
    data = ctypes.create_string_buffer(b"through the socket", 32)
    try:
        got = readers.read_memory(SELF, readers.session(), [(ctypes.addressof(data), 7)])
        assert got == [b"through"]
    finally:
        readers.close()
    big = ctypes.create_string_buffer(memreader.BUFFER + 16)
    big[memreader.BUFFER : memreader.BUFFER + 3] = b"end"
    readers = Readers()
    try:
        at = ctypes.addressof(big)
        got = readers.read_memory(SELF, readers.session(), [(at, memreader.BUFFER + 3)])
        assert got[0][-3:] == b"end"
    finally:
        readers.close()


def test_it_reads_the_three_files_and_nothing_else(readers: Readers) -> None:
    assert readers.read_file(SELF, "cmdline", 4096).split(b"\0")[0]
    assert b"[stack]" in readers.read_file(SELF, "maps", 1 << 20)
    assert len(readers.read_file(SELF, "maps", 10)) == 10
    for leaf in ("status", "root/etc/passwd", "mem", "../1/environ"):
        with pytest.raises(OSError):
            readers.read_file(SELF, leaf, 4096)
    with pytest.raises(OSError):
        readers.read_memory(f"{SELF}/task/{os.getpid()}", readers.session(), [(4096, 8)])
    with pytest.raises(OSError):  # gone
        readers.read_file("/proc/999999999", "cmdline", 4096)


def test_which_paths_the_reader_may_open() -> None:
    assert allowed("/proc/42/mem", "mem")
    assert allowed("/tmp/fake/proc/42/mem", "mem")
    assert not allowed("/proc/42/maps", "mem")
    assert not allowed("proc/42/mem", "mem")
    assert not allowed("/proc/self/mem", "mem")
    assert not allowed("/proc/42/task/43/mem", "mem")
    assert allowed("/proc/42/environ", "file") and allowed("/proc/42/maps", "file")
    assert not allowed("/proc/42/mem", "file") and not allowed("/proc/42/status", "file")
    assert allowed("/proc/42/map_files/7f00-7f01", "lib")
    assert allowed("/proc/42/root/usr/lib/libopenblas.so.0", "lib")
    assert not allowed("/proc/42/map_files/7f00", "lib")
    assert not allowed("/proc/42/map_files/7f00-7f01/x", "lib")
    assert not allowed("/proc/42/root/", "lib")
    assert not allowed("/etc/passwd", "lib")


def test_a_library_comes_back_as_a_descriptor_only_when_it_is_the_mapped_file(
    readers: Readers, tmp_path: Path
) -> None:
    lib = tmp_path / "proc" / "42" / "root" / "lib" / "libopenblas.so.0"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF" + b"\0" * 60)
    st = lib.stat()
    route = (str(lib), os.O_NOFOLLOW)
    opened = readers.open_library(str(tmp_path / "proc" / "42"), [route], st.st_dev, st.st_ino)
    assert not isinstance(opened, str)
    fd, size = opened
    try:
        assert size == 64 and os.pread(fd, 4, 0) == b"\x7fELF"
        assert os.get_inheritable(fd) is False
    finally:
        os.close(fd)
    wrong = readers.open_library(str(tmp_path), [route], st.st_dev, st.st_ino + 1)
    assert wrong == "path: another file than the one mapped"
    os.mkfifo(tmp_path / "proc" / "42" / "root" / "fifo")
    fifo = (str(tmp_path / "proc" / "42" / "root" / "fifo"), 0)
    assert readers.open_library(str(tmp_path), [fifo], st.st_dev, st.st_ino) == (
        "path: not a regular file"
    )


def test_a_read_that_does_not_return_is_abandoned_and_its_process_quarantined(
    readers: Readers, tmp_path: Path
) -> None:
    proc = stuck_tree(tmp_path)
    assert readers.read_file(SELF, "cmdline", 64)  # a reader is up
    first = reader_pid(readers)
    started = time.monotonic()
    with pytest.raises(Unreachable):
        readers.read_file(proc, "cmdline", 4096)
    assert time.monotonic() - started < 2.0
    assert readers.abandoned == 1 and not readers.stopped
    assert readers.quarantined(proc) and readers.quarantined(proc, 77)
    assert not readers.quarantined(proc, 78)  # another process under that pid since
    assert not readers.quarantined(SELF)
    with pytest.raises(Unreachable):  # not asked again: no reader waits for it twice
        readers.read_memory(proc, readers.session(), [(0, 8)])
    assert readers.abandoned == 1
    assert readers.read_file(SELF, "cmdline", 64)  # a new reader for everyone else
    # The abandoned one was killed; here its wait could be ended, and it is collected.
    deadline = time.monotonic() + 5
    while first in readers.own_pids() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert first not in readers.own_pids()
    assert reader_pid(readers) != first


def test_past_the_cap_no_memory_is_read_any_more(tmp_path: Path) -> None:
    readers = Readers(deadline=0.2, hard_deadline=0.5, cap=2)
    try:
        for pid in (1001, 1002):
            with pytest.raises(Unreachable):
                readers.read_file(stuck_tree(tmp_path, pid), "maps", 4096)
        assert readers.stopped and readers.abandoned == 2
        assert readers.quarantined(SELF)
        with pytest.raises(Unreachable):
            readers.read_file(SELF, "cmdline", 64)  # and no reader started for it
        deadline = time.monotonic() + 5
        while readers.own_pids() and time.monotonic() < deadline:
            time.sleep(0.01)  # the killed ones end (a FIFO's wait is interruptible)
        assert readers.own_pids() == frozenset()
    finally:
        readers.close()


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_the_reader_holds_nothing_but_its_socket_and_buffer_and_ends_with_oversub(
    readers: Readers,
) -> None:
    readers.read_file(SELF, "cmdline", 64)
    pid = reader_pid(readers)
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "oversub-reader"
    fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert fds[0] == fds[1] == fds[2] == "/dev/null"
    others = sorted(target.split("[")[0] for fd, target in fds.items() if fd > 2)
    assert others == ["/memfd:oversub-reader (deleted)", "socket:"], fds
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert int(fields[3]) == pid  # its own session: no terminal's signal reaches it
    readers.close()
    deadline = time.monotonic() + 5
    while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(pid) in (None, "Z")


def test_the_reader_is_never_part_of_a_watched_tree() -> None:
    # oversub watching its own tree (`watch $$` from a shell, check's adopted children):
    # its reader is its child, and no part of it.
    with TreeSampler(os.getpid()) as sampler:
        sampler.sample()
        time.sleep(0.05)
        sample = sampler.sample()
        own = sampler.own_pids()
    assert own
    assert not own & set(sample.processes)


def test_a_reader_that_died_is_collected_and_replaced(readers: Readers) -> None:
    # Killed by someone else (an OOM kill): collected at the next look, not left a zombie
    # (which would stop `check`'s reaper), and the next request starts another.
    readers.read_file(SELF, "cmdline", 64)
    pid = reader_pid(readers)
    os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while pid in readers.own_pids() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pid not in readers.own_pids() and _state(pid) is None
    assert readers.read_file(SELF, "cmdline", 64)
    assert readers.abandoned == 0


def test_an_interrupted_request_ends_its_reader_and_blames_no_process(
    readers: Readers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ^C between a request and its answer: the answer must not be taken for the next
    # request's, so that reader is done; no process is quarantined, nothing counted.
    readers.read_file(SELF, "cmdline", 64)
    first = reader_pid(readers)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(readers, "_receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        readers.read_file(SELF, "maps", 1 << 20)
    monkeypatch.undo()
    assert readers.abandoned == 0 and not readers.quarantined(SELF)
    deadline = time.monotonic() + 5
    while first in readers.own_pids() and time.monotonic() < deadline:
        time.sleep(0.01)  # killed: it ends at once
    assert readers.read_file(SELF, "cmdline", 64)
    assert reader_pid(readers) != first
