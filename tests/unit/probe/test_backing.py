"""Which bytes of another process's memory may be read (`probe.backing`, issue 38): anonymous
memory and files of local disk or memory file systems, judged from the mapping's device
against the process's mountinfo (and the host's); never FUSE, network or unknown ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oversub.probe.backing import (
    MOUNTINFO_MAX,
    AddressSpace,
    Memory,
    Mounts,
    OverBudget,
    mappings_from,
    mount_types,
    parse_maps,
)
from tests.support.fake_threads import pread_fetch

OWN = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "23 22 0:45 / /mnt/fuse rw,nosuid,nodev - fuse.sshfs me@host:/ rw,user_id=1000\n"
    "24 22 0:46 / /mnt/blk rw - fuseblk /dev/sdb1 rw\n"
    "25 22 0:47 / /home rw - nfs4 server:/home rw\n"
    "26 22 0:48 / /dev/shm rw - tmpfs tmpfs rw\n"
    "27 22 0:49 / /merged rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "28 22 0:50 / /root-merged rw - overlay overlay rw,lowerdir=/a\n"
    "29 22 0:51 / /mnt/9p rw - 9p share rw\n"
    "30 22 0:52 / /mnt/cifs rw - cifs //srv/x rw\n"
    "31 22 0:53 / /mnt/odd rw - notafs x rw\n"
    "32 22 0:54 / /mnt/plain-fuse rw - fuse x rw\n"
)
HOST = (
    "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
    "2 1 8:17 / /var/lib/docker rw - xfs /dev/sdb1 rw\n"
    "3 1 0:50 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw,lowerdir=/l\n"
)


def mounts(tmp_path: Path, own: str = OWN, host: str | None = HOST) -> Mounts:
    (tmp_path / "mountinfo").write_text(own)
    table = mount_types(host.encode()) if host is not None else None
    return Mounts(str(tmp_path), lambda: table)


@pytest.mark.parametrize(
    ("device", "readable"),
    [
        ("08:01", True),  # ext4
        ("00:30", True),  # tmpfs (0:48)
        ("08:11", True),  # not in its namespace: the host's xfs (a container's libraries)
        ("00:32", True),  # an overlay the host mounts (0:50: root's, a container's root)
        ("00:2d", False),  # fuse.sshfs (0:45)
        ("00:2e", False),  # fuseblk
        ("00:36", False),  # fuse
        ("00:2f", False),  # nfs4
        ("00:33", False),  # 9p
        ("00:34", False),  # cifs
        ("00:35", False),  # an unknown type
        ("00:31", False),  # an overlay of its own namespace only (a user's, maybe over FUSE)
        ("00:01", False),  # shared memory objects (memfd, SysV): no namespace lists them
        ("08:99", False),  # no namespace lists it
        ("zz:01", False),  # not a device
    ],
)
def test_a_mapping_is_read_only_on_a_local_or_memory_file_system(
    tmp_path: Path, device: str, readable: bool
) -> None:
    assert mounts(tmp_path).readable(device.encode()) is readable


def test_a_mountinfo_over_its_bound_makes_every_file_unreadable(tmp_path: Path) -> None:
    line = "99 22 0:99 / /x rw - tmpfs tmpfs rw\n"
    judge = mounts(tmp_path, OWN + line * (MOUNTINFO_MAX // len(line) + 1))
    assert not judge.readable(b"00:30")  # its tmpfs: its own namespace cannot be read whole
    assert "bound" in judge.refusal(b"00:30")
    assert judge.readable(b"08:01")  # a disk's file system is the same in every namespace


def test_without_the_hosts_table_only_its_own_namespace_counts(tmp_path: Path) -> None:
    judge = mounts(tmp_path, host=None)
    assert judge.readable(b"08:01")
    assert not judge.readable(b"08:11")
    assert not judge.readable(b"00:32")


def test_the_refusal_names_the_file_system(tmp_path: Path) -> None:
    judge = mounts(tmp_path)
    assert "FUSE" in judge.refusal(b"00:2d") and "fuse.sshfs" in judge.refusal(b"00:2d")
    assert "nfs4" in judge.refusal(b"00:2f")
    assert "no mount table" in judge.refusal(b"08:99")


MAPS = (
    b"00001000-00003000 r-xp 00000000 08:01 12 /usr/lib/libopenblas.so.0\n"
    b"00003000-00004000 r--p 00000000 00:2d 7 /mnt/fuse/stall\n"  # FUSE right after it
    b"00004000-00006000 rw-p 00000000 00:00 0 \n"  # anonymous
    b"00006000-00007000 rw-p 00000000 00:00 0 [heap]\n"
    b"00008000-00009000 rw-p 00000000 00:2f 9 /home/me/data\n"  # NFS, after a gap
    b"garbage line\n"
)


def test_a_read_is_cut_where_the_readable_bytes_end(tmp_path: Path) -> None:
    space = AddressSpace(parse_maps(MAPS), mounts(tmp_path))
    assert space.span(0x1000, 0x100) == 0x100
    assert space.span(0x2FF8, 16) == 8  # the library's last bytes, not the FUSE page
    assert space.span(0x3000, 8) == 0  # the FUSE page
    assert space.span(0x4000, 0x4000) == 0x3000  # anonymous, [heap], then a gap
    assert space.span(0x7800, 8) == 0  # unmapped
    assert space.span(0x8000, 8) == 0  # NFS
    assert space.span(0x0, 8) == 0


def test_a_maps_text_is_parsed_from_a_line_on(tmp_path: Path) -> None:
    at = MAPS.index(b"\n00003000") + 1
    assert [m[0] for m in mappings_from(MAPS, at)] == [0x3000, 0x4000, 0x6000, 0x8000]
    assert [m[0] for m in mappings_from(MAPS, at, lines=2)] == [0x3000, 0x4000]
    assert mappings_from(MAPS, len(MAPS)) == []


def test_memory_reads_only_what_may_be_read_within_its_budgets(tmp_path: Path) -> None:
    (tmp_path / "mem").write_bytes(bytes(range(256)) * 64)
    space = AddressSpace(parse_maps(MAPS), mounts(tmp_path))
    fd = os.open(tmp_path / "mem", os.O_RDONLY)
    try:
        memory = Memory(pread_fetch(fd), space, max_bytes=24, max_reads=3)
        assert memory.read(0x1000, 8) == bytes(range(8))
        assert memory.read(0x3000, 8) == b""  # FUSE: not read, and no budget spent
        assert memory.read(0x2FFC, 8) == bytes(range(0xFC, 0x100))  # cut at the FUSE page
        assert (memory.reads_left, memory.bytes_left) == (1, 12)
        with pytest.raises(OverBudget):
            memory.read(0x1000, 16)  # more bytes than are left
        assert memory.read(0x1000, 12) == bytes(range(12))
        with pytest.raises(OverBudget):
            memory.read(0x1000, 1)  # no read left
    finally:
        os.close(fd)


def test_a_prefetch_is_one_batch_within_the_budgets_and_each_read_takes_its_bytes(
    tmp_path: Path,
) -> None:
    # Stack tops are read together (one request to the reader process): the same rule and
    # budgets as one read at a time, and `read` of the same range gives those bytes once.
    batches: list[list[tuple[int, int]]] = []
    (tmp_path / "mem").write_bytes(bytes(range(256)) * 128)
    fd = os.open(tmp_path / "mem", os.O_RDONLY)
    inner = pread_fetch(fd)

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        batches.append(list(ranges))
        return inner(ranges)

    memory = Memory(fetch, AddressSpace(parse_maps(MAPS), mounts(tmp_path)), 40, 3)
    memory.prefetch([(0x1000, 8), (0x3000, 8), (0x2FFC, 8), (0x4000, 16), (0x4100, 16)])
    # FUSE not asked for, the cut one cut, the last left for when the budget allows.
    assert batches == [[(0x1000, 8), (0x2FFC, 4), (0x4000, 16)]]
    assert (memory.reads_left, memory.bytes_left) == (0, 12)
    assert memory.read(0x1000, 8) == bytes(range(8))
    assert memory.read(0x2FFC, 8) == bytes(range(0xFC, 0x100))
    assert memory.read(0x4000, 16) == bytes(range(16))
    assert len(batches) == 1
    with pytest.raises(OverBudget):
        memory.read(0x1000, 8)  # taken once; a second read is a read
    os.close(fd)
