"""A fake process for `probe.owners` and `probe.startroutine`: /proc/PID with maps, a
`mem` file at small addresses, thread files, glibc-like thread stacks, and a mountinfo that
puts its files on a local disk (`probe.backing` reads only such memory).

The stack of a thread made by `stack_top` is an anonymous `rw-p` mapping above a `---p`
guard, with the thread's descriptor (tcbhead_t's tcb and self words holding its own address,
the tid at `TID_OFFSET`) `DESCRIPTOR_BELOW` bytes under the top and the given return
addresses below it, outermost first, as glibc lays them out (measured on real threads).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from oversub.core.samples import ThreadSample
from oversub.probe.backing import AddressSpace, Fetch, Memory, Mounts, parse_maps

PID = 100
SITE = "/usr/lib/python3/site-packages"
LIBC = (0x10000, 0x20000, "/usr/lib/x86_64-linux-gnu/libc.so.6")
GOMP = (0x20000, 0x30000, "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0")
ORT = (0x30000, 0x40000, f"{SITE}/onnxruntime/capi/onnxruntime_pybind11_state.so")
NUMEXPR = (0x40000, 0x50000, f"{SITE}/numexpr/interpreter.cpython-311-x86_64-linux-gnu.so")
NUMPY = (0x50000, 0x60000, f"{SITE}/numpy/_core/_multiarray_umath.so")
OMPPOOL = (0x60000, 0x61000, f"{SITE}/numba/np/ufunc/omppool.cpython-311.so")
PY = (0x70000, 0x80000, "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0")
STACK = 0x90000
STACKS = 0xA0000
"""Thread stacks (`stack_top`) start here, `STACK_SIZE` apart."""
STACK_SIZE = 0x5000
MEM_SIZE = 0x100000
TID_OFFSET = 0x2D0
DESCRIPTOR_BELOW = 0x940


MOUNTINFO = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
"""The fake process's mounts: its files (device 08:01) are on a local disk."""


def maps_line(start: int, end: int, path: str, perms: str = "r-xp", device: str = "08:01") -> str:
    """A maps line: a file on `device`, or anonymous memory (no path, or a pseudo path)."""
    if not path or path.startswith("["):
        device, inode = "00:00", 0
    else:
        inode = 1234
    return f"{start:08x}-{end:08x} {perms} 00000000 {device} {inode} {path}\n"


class FakeProcess:
    """/proc/PID of a fake process: maps, mem and threads."""

    def __init__(self, root: Path, mapped: list[tuple[int, int, str]], pid: int = PID) -> None:
        self.base = root / "proc" / str(pid)
        (self.base / "task").mkdir(parents=True)
        self.maps = (
            maps_line(0x1000, 0x2000, "[heap]", "rw-p")
            + "".join(maps_line(*m) for m in mapped)
            + maps_line(STACK, STACK + 0x1000, "", "rw-p")
        )
        (self.base / "maps").write_text(self.maps)
        self.mounts = MOUNTINFO
        self.mem = bytearray(MEM_SIZE)
        self.pid = pid
        self._stack = 0
        self._tops = 0

    def mount(self, mapping: tuple[int, int, str], fstype: str, device: str = "00:2d") -> None:
        """Put the file of `mapping` on a file system of type `fstype` (its own device, which
        the process's mountinfo lists): "fuse.sshfs", "nfs4", ... `flush()` writes it."""
        start, end, path = mapping
        old = maps_line(start, end, path)
        assert old in self.maps, path
        self.maps = self.maps.replace(old, maps_line(start, end, path, device=device))
        major, minor = (int(part, 16) for part in device.split(":"))
        self.mounts += f"23 22 {major}:{minor} / /mnt/{fstype} rw - {fstype} x rw\n"

    def call_site(self, ret: int, insn: bytes = b"\xe8\x00\x00\x00\x00") -> None:
        """Put a call instruction just before `ret` (a real return address)."""
        self.mem[ret - len(insn) : ret] = insn

    def thread(
        self,
        tid: int,
        comm: str = "python",
        start: int = 500,
        pc: int | None = None,
        stack: tuple[int, ...] = (),
    ) -> ThreadSample:
        """A thread with `comm`; blocked at `pc` (running when None), `stack` words at SP."""
        task = self.base / "task" / str(tid)
        task.mkdir()
        (task / "comm").write_text(comm + "\n")
        fields = ["S", "1", *(["0"] * 17), str(start), "0"]  # field 22 is the start
        (task / "stat").write_text(f"{tid} ({comm}) " + " ".join(fields) + "\n")
        sp = STACK + 0x100 * self._stack
        self._stack += 1
        if pc is None:
            (task / "syscall").write_text("running\n")
        else:
            args = " ".join(["0x0"] * 6)
            (task / "syscall").write_text(f"202 {args} {sp:#x} {pc:#x}\n")
        for i, word in enumerate(stack):
            struct.pack_into("<Q", self.mem, sp + 8 * i, word)
        return ThreadSample(tid, "R" if pc is None else "S", 0, 0, 0, 0)

    def stack_top(
        self, tid: int, frames: tuple[int, ...], *, gap: int = 0x100, descriptor: bool = True
    ) -> tuple[int, int]:
        """A thread stack for `tid` whose outermost return addresses are `frames` (top
        first, `gap` bytes apart, the first `gap` below the descriptor). Returns the
        mapping's (start, end); `flush()` writes it into maps."""
        start = STACKS + STACK_SIZE * self._tops + 0x1000
        end = start + STACK_SIZE - 0x1000
        self._tops += 1
        self.maps += maps_line(start - 0x1000, start, "", "---p")
        self.maps += maps_line(start, end, "", "rw-p")
        tcb = end - DESCRIPTOR_BELOW
        if descriptor:
            struct.pack_into("<QQQ", self.mem, tcb, tcb, 0x1500, tcb)
            struct.pack_into("<i", self.mem, tcb + TID_OFFSET, tid)
        for i, ret in enumerate(frames):
            struct.pack_into("<Q", self.mem, tcb - gap * (i + 1), ret)
        return start, end

    def flush(self) -> None:
        (self.base / "maps").write_text(self.maps)
        (self.base / "mountinfo").write_text(self.mounts)
        (self.base / "mem").write_bytes(bytes(self.mem))


def memory_of(proc: FakeProcess, fd: int) -> Memory:
    """A `probe.backing.Memory` of the fake process over its `mem` open on `fd`, with budgets
    no test reaches."""
    space = AddressSpace(parse_maps(proc.maps.encode()), Mounts(str(proc.base)))
    return Memory(pread_fetch(fd), space, 1 << 30, 1 << 20)


def pread_fetch(fd: int) -> Fetch:
    """A `Fetch` reading an open file in this process (a fake tree's `mem`)."""

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        out = []
        for address, length in ranges:
            try:
                out.append(os.pread(fd, length, address))
            except (OSError, OverflowError, ValueError):
                out.append(b"")
        return out

    return fetch
