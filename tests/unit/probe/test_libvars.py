"""The thread variables a library's binary names (`probe.libvars.candidates`): found in C's
NUL-separated strings and in Rust's packed ones, counts first, bounded."""

from __future__ import annotations

from pathlib import Path

from oversub.core.libraries import MAX_CANDIDATES
from oversub.probe.libvars import candidates, library_candidates


def test_c_strings() -> None:
    rodata = b"\0usage\0OPENCV_FOR_THREADS_NUM\0CAP_PROP_N_THREADS\0%d threads\0"
    assert candidates(rodata) == ("OPENCV_FOR_THREADS_NUM", "CAP_PROP_N_THREADS")


def test_rust_packs_its_strings_and_counts_come_first() -> None:
    rodata = b"called `Option::unwrap()`TOKENIZERS_PARALLELISMRAYON_NUM_THREADSfalse"
    assert candidates(rodata) == ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")


def test_nothing_else_and_a_bounded_answer() -> None:
    assert candidates(b"\0no variable here\0threads\0_THREADS\0") == ()
    many = b"\0".join(b"LIB%d_NUM_THREADS" % i for i in range(500))
    found = candidates(many)
    assert len(found) == MAX_CANDIDATES and found[0] == "LIB0_NUM_THREADS"


class _Readers:
    """A reader process stand-in: maps from the fake tree; opening a file is a failure."""

    def __init__(self, maps: bytes) -> None:
        self.maps = maps
        self.opened = 0

    def read_file(self, proc_dir: str, leaf: str, limit: int, start: int | None = None) -> bytes:
        return self.maps[:limit]

    def open_library(self, proc_dir: str, routes: object, device: int, inode: int) -> str:
        self.opened += 1
        return "not opened here"


def test_a_library_on_fuse_is_never_opened(tmp_path: Path) -> None:
    proc = tmp_path / "proc" / "100"
    proc.mkdir(parents=True)
    path = "/mnt/fuse/site-packages/rowless/_native.so"
    (proc / "mountinfo").write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:42 / /mnt/fuse rw - fuse.sshfs x rw\n"
    )
    readers = _Readers(f"7f0000-7f1000 r-xp 00000000 00:2a 77 {path}\n".encode())
    found = library_candidates(readers, str(proc), 1, path, lambda: None)  # type: ignore[arg-type]
    assert found == () and readers.opened == 0
    # The same object on a local disk is opened (here: refused, so no candidate either).
    readers = _Readers(f"7f0000-7f1000 r-xp 00000000 08:01 77 {path}\n".encode())
    assert library_candidates(readers, str(proc), 1, path, lambda: None) == ()  # type: ignore[arg-type]
    assert readers.opened == 1
