"""Files a watched process maps are hostile (issue 19, part A): the live pool reader must
never block, never acquire a terminal, never raise, never read more than its bounds, name
what it could not read, and read a replaced library through /proc/PID/map_files.

Each test builds a fake /proc tree: /proc/42/maps names /usr/lib/libopenblas.so at 0x10000
(with the device and inode of a real file), /proc/42/root/usr/lib/libopenblas.so and
/proc/42/map_files/10000-11000 lead to whatever the test puts there, /proc/42/mem holds the
value 6 at the symbol's address.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.analysis.verdict import assess
from oversub.core.thresholds import Thresholds
from oversub.probe import livesizes, native
from oversub.probe.livesizes import LiveReader, LiveSizes
from oversub.probe.sampler import TreeSampler
from tests.support.builders import IDLE, ROOT, Proc, analyse
from tests.support.elf_craft import VALUE_AT, CraftedElf
from tests.support.fake_proc import FakeProc, FakeThread

PID = 42
BASE = 0x10000
LIB = "/usr/lib/libopenblas.so"


def maps_line(st: os.stat_result, path: str = LIB, start: int = BASE) -> str:
    """The library's two lines: its headers at file offset 0, then its data (where the crafted
    library's symbols lie)."""
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    return (
        f"{start:x}-{start + 0x1000:x} r--p 00000000 {dev} {st.st_ino} {path}\n"
        f"{start + 0x1000:x}-{start + 0x2000:x} rw-p 00001000 {dev} {st.st_ino} {path}\n"
    )


class Tree:
    """The fake /proc/42 of one test."""

    def __init__(self, root: Path, pid: int = PID) -> None:
        self.root = root
        self.proc = root / "proc" / str(pid)
        self.lib = self.proc / "root" / LIB.lstrip("/")
        self.lib.parent.mkdir(parents=True, exist_ok=True)
        self.keep = root / "kept"
        self.keep.mkdir(exist_ok=True)
        self.map_files = self.proc / "map_files"
        self.map_files.mkdir(exist_ok=True)
        # Its files are on a local disk (`probe.backing` reads and opens nothing else).
        st = root.stat()
        (self.proc / "mountinfo").write_text(
            f"22 1 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / / rw - ext4 /dev/sda1 rw\n"
        )
        with open(self.proc / "mem", "wb") as mem:
            mem.seek(BASE + VALUE_AT[0])
            mem.write((6).to_bytes(4, "little"))
            mem.write((1).to_bytes(4, "little"))

    def library(self, data: bytes | bytearray, size: int | None = None) -> os.stat_result:
        """The mapped file (kept alive by a second link), its size made `size` with a hole."""
        self.lib.write_bytes(bytes(data))
        if size is not None:
            os.truncate(self.lib, size)
        kept = self.keep / f"lib{len(os.listdir(self.keep))}"
        os.link(self.lib, kept)
        return self.lib.stat()

    def maps(self, text: str) -> bytes:
        (self.proc / "maps").write_text(text)
        return text.encode()

    def map_file(self, target: Path) -> None:
        """/proc/42/map_files/START-END, a link to the mapped object as the kernel shows it."""
        (self.map_files / f"{BASE:x}-{BASE + 0x1000:x}").symlink_to(target)

    def read(self) -> LiveSizes:
        return LiveReader(str(self.root)).read(PID, (self.proc / "maps").read_bytes())


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes read with os.pread from anything but /proc/PID/mem, per call."""
    real = os.pread
    reads: list[int] = []

    def pread(fd: int, length: int, offset: int) -> bytes:
        data = real(fd, length, offset)
        if not os.readlink(f"/proc/self/fd/{fd}").endswith("/mem"):
            reads.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", pread)
    return reads


def test_a_crafted_valid_library_is_read(tree: Tree) -> None:
    tree.maps(maps_line(tree.library(CraftedElf().data)))
    assert tree.read() == LiveSizes({"openblas": 6}, {"openblas": 5}, {})


def _zero_phentsize(e: CraftedElf) -> None:
    e.put("e_phentsize", 0)


def _huge_value(e: CraftedElf) -> None:
    e.put_symbol_value(0, 2**64 - 8)


def _value_outside_segments(e: CraftedElf) -> None:
    e.put_symbol_value(0, 0x7FFF_0000)


def _phoff_past_64_bits(e: CraftedElf) -> None:
    e.put("e_phoff", 2**64 - 1)


def _shoff_past_the_file(e: CraftedElf) -> None:
    e.put("e_shoff", 1 << 40)


def _many_sections(e: CraftedElf) -> None:
    e.put("e_shnum", 0xFFFF)


def _bad_link(e: CraftedElf) -> None:
    e.put_section(1, "sh_link", 7)


def _strings_past_the_file(e: CraftedElf) -> None:
    e.put_section(2, "sh_offset", 2**63 - 1)


def _zero_entsize(e: CraftedElf) -> None:
    e.put_section(1, "sh_entsize", 0)


CORRUPTIONS = [
    _zero_phentsize,
    _huge_value,
    _value_outside_segments,
    _phoff_past_64_bits,
    _shoff_past_the_file,
    _many_sections,
    _bad_link,
    _strings_past_the_file,
    _zero_entsize,
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_crafted_header_is_named_unreadable_never_raised(
    tree: Tree, corrupt: object, counted: list[int]
) -> None:
    crafted = CraftedElf()
    assert callable(corrupt)
    corrupt(crafted)
    tree.maps(maps_line(tree.library(crafted.data)))
    found = tree.read()
    assert (found.sizes, found.extra) == ({}, {})
    assert "not a well-formed ELF" in found.unreadable[LIB]
    assert sum(counted) <= 64 << 10


def test_a_truncated_file_is_named_unreadable(tree: Tree) -> None:
    for length in (0, 10, 63, 100, 300):
        tree.lib.unlink(missing_ok=True)
        tree.maps(maps_line(tree.library(CraftedElf().data[:length])))
        found = tree.read()
        assert found.sizes == {} and LIB in found.unreadable, length


def test_huge_tables_in_a_sparse_file_cost_no_more_than_its_headers(
    tree: Tree, counted: list[int]
) -> None:
    # A 4 KiB file with holes up to 130 MiB whose sections claim a 64 MiB .dynsym and .dynstr.
    crafted = CraftedElf()
    crafted.put_section(1, "sh_size", 64 << 20)
    crafted.put_section(2, "sh_size", 64 << 20)
    crafted.put_section(2, "sh_offset", 66 << 20)
    tree.maps(maps_line(tree.library(crafted.data, size=130 << 20)))
    found = tree.read()
    assert sum(counted) <= 64 << 10
    assert found.sizes == {} and "bad .dynsym size" in found.unreadable[LIB]


def test_what_one_process_reads_is_bounded(tree: Tree, counted: list[int]) -> None:
    # 40 distinct libraries, each a sparse 12 MiB file whose .dynsym and .dynstr have the
    # largest size allowed: each file alone may be read, all of them may not.
    crafted = CraftedElf()
    crafted.put_section(1, "sh_size", (4 << 20) // 24 * 24)
    crafted.put_section(2, "sh_size", 4 << 20)
    crafted.put_section(2, "sh_offset", 6 << 20)
    lines = []
    for i in range(40):
        path = f"/usr/lib/libopenblas{i}.so"
        big = tree.proc / "root" / path.lstrip("/")
        big.write_bytes(bytes(crafted.data))
        os.truncate(big, 12 << 20)
        lines.append(maps_line(big.stat(), path, BASE + i * 0x100000))
    tree.maps("".join(lines))
    found = tree.read()
    assert sum(counted) <= 20 << 20
    assert sum(counted) <= livesizes.MAX_READ_PER_PROCESS
    assert len(found.unreadable) >= 40 - 2  # two such files fit the budget


@pytest.fixture
def fifo(tree: Tree) -> Iterator[Path]:
    """The library's path replaced by a FIFO nobody writes (maps still names the library)."""
    tree.maps(maps_line(tree.library(CraftedElf().data)))
    tree.lib.unlink()
    os.mkfifo(tree.lib)
    yield tree.lib
    # Release a reader that blocked in open() (the code before the fix).
    with contextlib.suppress(OSError):
        os.close(os.open(tree.lib, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_at_the_mapped_path_does_not_block(tree: Tree, fifo: Path) -> None:
    tree.map_file(fifo)  # map_files too, as if the kernel led there
    result: list[LiveSizes] = []
    reader = threading.Thread(target=lambda: result.append(tree.read()), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "the live read blocked in open() on a FIFO"
    [found] = result
    assert found.sizes == {}
    assert "not a regular file" in found.unreadable[LIB]


PTY_CHILD = """
import os, sys
from oversub.probe.livesizes import LiveReader
root, maps = sys.argv[1], open(sys.argv[2], "rb").read()
found = LiveReader(root).read(42, maps)
try:
    os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    print("terminal", getattr(found, "unreadable", None))
except OSError:
    print("none", getattr(found, "unreadable", None))
"""


def test_a_pty_at_the_mapped_path_is_never_a_controlling_terminal(tree: Tree) -> None:
    # A session leader without a terminal (as systemd starts `serve --all`) reads a process
    # whose library path and map_files lead to a pty slave: opening it without O_NOCTTY
    # would make it oversub's terminal, and closing the master would SIGHUP oversub.
    tree.maps(maps_line(tree.library(CraftedElf().data)))
    master, slave = os.openpty()
    try:
        tree.lib.unlink()
        tree.lib.symlink_to(os.ttyname(slave))
        tree.map_file(Path(os.ttyname(slave)))
        out = subprocess.run(
            [sys.executable, "-c", PTY_CHILD, str(tree.root), str(tree.proc / "maps")],
            start_new_session=True,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[3],
            check=False,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("none"), out.stdout
    assert LIB in out.stdout


def test_a_replaced_library_is_read_through_map_files(tree: Tree) -> None:
    # `pip install -U numpy` while the process runs: maps says "(deleted)", the path holds
    # the new file (another inode), map_files still opens the mapped object.
    st = tree.library(CraftedElf().data)
    old = tree.keep / "lib0"
    tree.lib.unlink()
    tree.lib.write_bytes(bytes(CraftedElf().data))
    tree.maps(maps_line(st, LIB + " (deleted)"))
    tree.map_file(old)
    assert tree.read() == LiveSizes({"openblas": 6}, {"openblas": 5}, {})


def test_a_replaced_library_that_map_files_refuses_is_named(tree: Tree) -> None:
    st = tree.library(CraftedElf().data)
    tree.lib.unlink()
    tree.lib.write_bytes(bytes(CraftedElf().data))  # same path, another inode
    tree.maps(maps_line(st, LIB + " (deleted)"))
    found = tree.read()  # no map_files entry: as for a reader that is not root
    assert found.sizes == {}
    assert "replaced or deleted" in found.unreadable[LIB]


def _sampled(tmp_path: Path, pids: tuple[int, ...] = (PID,)) -> Tree:
    fake = FakeProc(tmp_path)
    fake.add_process(1, ppid=0, comm="init", threads=[FakeThread(1)])
    for pid in pids:
        fake.add_process(pid, ppid=1, threads=[FakeThread(pid), FakeThread(pid + 1000)])
    return Tree(tmp_path)


def test_the_sample_names_an_unreadable_library_and_keeps_its_size_unknown(
    tmp_path: Path,
) -> None:
    tree = _sampled(tmp_path)
    st = tree.library(CraftedElf().data)
    tree.lib.unlink()
    tree.lib.write_bytes(bytes(CraftedElf().data))
    tree.maps(maps_line(st, LIB + " (deleted)"))
    with TreeSampler(PID, root=str(tmp_path)) as sampler:
        sample = sampler.sample()
    p = sample.processes[PID]
    assert p.pools == ("openblas",)
    assert "live_pools" in sample.unavailable
    # Read, found nothing readable: an empty reading, not "memory refused" (None).
    assert p.live_pools == {}


def test_one_process_whose_read_fails_does_not_stop_the_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = _sampled(tmp_path, (PID, 43))
    st = tree.library(CraftedElf().data)
    tree.maps(maps_line(st))
    other = tmp_path / "proc" / "43"
    (other / "maps").write_text(maps_line(st))
    real = LiveReader.read

    def fails_for_42(self: LiveReader, pid: int, maps: bytes) -> LiveSizes:
        if pid == PID:
            raise RuntimeError("a bug the hostile file found")
        return real(self, pid, maps)

    monkeypatch.setattr(LiveReader, "read", fails_for_42)
    with TreeSampler(1, root=str(tmp_path)) as sampler:
        sample = sampler.sample()
    assert {1, PID, 43} <= set(sample.processes)
    assert "live_pools" in sample.unavailable
    assert sample.processes[PID].live_pools == {}


def test_a_pool_whose_live_size_could_not_be_read_is_not_judged_default_sized() -> None:
    # Two idle processes whose OpenBLAS started N - 1 threads at import. With the memory
    # refused the thread count stands in (pool-default, at-risk); with the memory read but
    # the library's file unreadable (replaced, hostile) the size is unknown: no finding
    # from the thread count alone (docs/security.md).
    th = Thresholds()

    def idle(live: dict[str, int] | None) -> list[Proc]:
        procs = [Proc(ROOT, (IDLE,), ppid=1, cmdline="python main.py")]
        for i in range(2):
            procs.append(Proc(201 + i, (IDLE,) * 2, pools=("openblas",), env={}, live=live))
        return procs

    refused = assess(analyse(idle(None), 2), th)
    assert [f.rule for f in refused.findings] == ["pool-default"]
    unknown = assess(analyse(idle({}), 2), th)
    assert unknown.findings == ()


def test_a_library_on_a_fuse_mount_is_not_touched(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A FUSE server may never answer: a file on such a mount (from the process's mountinfo)
    # is not opened, not even with O_PATH.
    st = tree.library(CraftedElf().data)
    tree.maps(maps_line(st))
    (tree.proc / "mountinfo").write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        f"90 22 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / /usr/lib rw,nosuid,nodev "
        "shared:40 - fuse.sshfs user@host:/lib rw,user_id=65534,group_id=65534\n"
    )
    opened: list[str] = []
    real_open = os.open

    def watched(path: str, *args: object, **kwargs: object) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", watched)
    found = tree.read()
    assert found.sizes == {}
    assert "FUSE" in found.unreadable[LIB]
    assert not [p for p in opened if p.endswith(LIB) or "/map_files/" in p]


def test_a_huge_maps_file_is_read_within_its_bound(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 65,530 mappings of 4 KiB paths make a maps file of 270 MB: the reader stops at its
    # bound, on a whole line (here a bound of 1 MiB against 3 MiB of lines).
    monkeypatch.setattr(native, "MAPS_MAX", 1 << 20, raising=False)
    line = "7f0000000000-7f0000001000 r--p 00000000 08:01 7 /" + "x" * 200 + "/libfoo.so\n"
    tree.maps(line * ((3 << 20) // len(line)))
    maps = native.read_maps(PID, str(tree.root))
    assert maps is not None
    assert 0 < len(maps) <= 1 << 20
    assert maps.endswith(b"\n") and maps.startswith(line.encode())
