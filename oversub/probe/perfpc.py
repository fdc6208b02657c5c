"""Where a process's busy threads spend their CPU: their user-space program counters, sampled
by the kernel for a moment with perf events. Nothing of the process's memory is read.

For each thread given (at most `MAX_THREADS`), one software cpu-clock event is opened on that
thread alone (`perf_event_open(pid=TID, cpu=-1)`, through ctypes and the machine's system
call number), user space only (`exclude_kernel`, `exclude_hv`: the paranoid level 2 of
Debian's and most distributions' kernels allows that for a user's own processes), sampling
the instruction pointer and thread id every `PERIOD_NS` of the thread's CPU time (499 Hz)
into a ring buffer of a few pages mapped from the event's descriptor. The events are opened
disabled and enabled together; `finish` disables them, reads each ring once (the kernel
never overwrites what was not read: a full ring counts lost samples), closes every
descriptor and mapping, and hands the PCs to `probe.pcmap`, which maps them to objects,
functions and spin loops through maps and the objects' files.

Bounds: `MAX_THREADS` events (2 descriptors and `RING_PAGES` + 1 pages each), a window the
caller chooses up to `MAX_SECONDS`; nothing here waits on anything but that window, which
`measure` sleeps and a sampler spans with its own interval (`start`, then `finish`), at most
as often as `GAPS_S` allows per process (`Cadence`, on the caller's clock): several windows
in a process's first seconds, then one every `EVERY_S`. Each
refusal is a `NotMeasured` with one line saying why, never an exception: perf_event_paranoid
3 (no perf events for users), EACCES/EPERM (another user's process at level 2; a seccomp
profile or security module, even for root), ENOSYS, no cpu-clock event, descriptors or
memory exhausted. A thread that ends before its event opens is left out (ESRCH), not an error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from oversub.core.pcprofile import NotMeasured, PcProfile, ThreadSamples
from oversub.core.plural import count
from oversub.probe.pcmap import PcMapper

HZ = 499
"""Samples per second of a thread's CPU time: modest, and prime to any timer tick."""
PERIOD_NS = 1_000_000_000 // HZ
MAX_THREADS = 8
"""Threads sampled per window (the busiest the caller names first)."""
MAX_SECONDS = 1.0
"""Longest window the ring buffers are sized for."""
EVERY_S = 30.0
"""A process's windows settle to one every this many seconds (`GAPS_S`' last gap)."""
GAPS_S = (1.0, 2.0, 4.0, 8.0, 15.0, EVERY_S)
"""Default `Cadence`: the seconds between a process's windows, the last repeated. Windows at
0, 1, 3, 7, 15 and 30 s, then every 30 s: a 10-second `check` takes four windows, not one.
One window of a program whose work alternates with waiting (XGBoost's boosting rounds) can
fall in one phase; four, a second apart and wider, see both, and their samples are summed
(`analysis.accumulators.summed_share`)."""
SYSCALLS = {
    "x86_64": 298,
    "amd64": 298,
    "i386": 336,
    "i686": 336,
    "aarch64": 241,
    "arm64": 241,
    "riscv64": 241,
    "loongarch64": 241,
    "armv7l": 364,
    "ppc64le": 319,
    "ppc64": 319,
    "s390x": 331,
}
"""`__NR_perf_event_open` by `uname -m`."""

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_RECORD = 24  # a sample: header 8, ip 8, pid and tid 8
RING_PAGES = 1 << (int(HZ * MAX_SECONDS * 2 * _RECORD) // _PAGE).bit_length()
"""Data pages per ring (a power of two): twice the samples of the longest window fit (8
pages of 4 KiB: 32 KiB)."""
_TRACKFD = sys.version_info >= (3, 13)
"""mmap's `trackfd=False` (3.13): no duplicate descriptor held beside the event's."""

_ATTR = struct.Struct("=IIQQQQQIIQ")  # perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes)
_TYPE_SOFTWARE, _COUNT_SW_CPU_CLOCK = 1, 0
_SAMPLE_IP, _SAMPLE_TID = 1, 2
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_FLAG_FD_CLOEXEC = 8
_RECORD_LOST, _RECORD_SAMPLE = 2, 9
_HEAD_AT, _OFFSET_AT = 1024, 1040  # data_head; data_offset, data_size (Linux 4.1+)
_ARCH = os.uname().machine.lower()
# _IO('$', 0) and _IO('$', 1): PowerPC, MIPS and SPARC put "no data" as 1 at bit 29.
_IOC_NONE = (1 << 29) if _ARCH.startswith(("ppc", "mips", "sparc")) else 0
IOC_ENABLE = _IOC_NONE | (ord("$") << 8) | 0
IOC_DISABLE = _IOC_NONE | (ord("$") << 8) | 1

Syscall = Callable[[bytes, int, int, int, int], int]
"""`perf_event_open(attr, pid, cpu, group_fd, flags)`: a descriptor, or -errno."""


def attr() -> bytes:
    """The event: cpu-clock of one thread, user space only, IP and TID every PERIOD_NS."""
    flags = _DISABLED | _EXCLUDE_KERNEL | _EXCLUDE_HV
    return _ATTR.pack(
        _TYPE_SOFTWARE, _ATTR.size, _COUNT_SW_CPU_CLOCK, PERIOD_NS,
        _SAMPLE_IP | _SAMPLE_TID, 0, flags, 0, 0, 0,
    )  # fmt: skip


def _libc_syscall() -> Syscall | str:
    number = SYSCALLS.get(_ARCH)
    if number is None:
        return f"no perf_event_open system call number known for {_ARCH or 'this machine'}"
    try:
        import ctypes
    except ImportError:
        return "no ctypes in this Python"
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.syscall
    call.restype = ctypes.c_long

    def perf_event_open(attr: bytes, pid: int, cpu: int, group: int, flags: int) -> int:
        fd = int(
            call(
                ctypes.c_long(number), ctypes.c_char_p(attr), ctypes.c_int(pid),
                ctypes.c_int(cpu), ctypes.c_int(group), ctypes.c_ulong(flags),
            )
        )  # fmt: skip
        return fd if fd >= 0 else -ctypes.get_errno()

    return perf_event_open


_SYSCALL: list[Syscall | str] = []


def default_syscall() -> Syscall | str:
    """The real `perf_event_open` (made once), or why there is none."""
    if not _SYSCALL:
        _SYSCALL.append(_libc_syscall())
    return _SYSCALL[0]


class Window:
    """Open events on some threads of one process: `finish()` reads and closes them."""

    def __init__(
        self, pid: int, events: list[tuple[int, int, Any]], root: str, mapper: PcMapper, why: str
    ) -> None:
        self.pid = pid
        self._events = events  # (tid, fd, mmap)
        self._root = root
        self._mapper = mapper
        self._why = why
        self._cpu = {tid: _cpu_ns(root, pid, tid) for tid, _, _ in events}
        for _, fd, _ in events:
            _ioctl(fd, IOC_ENABLE)
        self.started = time.monotonic()

    def finish(self) -> PcProfile:
        """Stop sampling, read every ring, close everything, map the PCs."""
        for _, fd, _ in self._events:
            _ioctl(fd, IOC_DISABLE)
        seconds = time.monotonic() - self.started
        pcs: Counter[int] = Counter()
        threads = []
        lost = 0
        try:
            for tid, _, ring in self._events:
                n, dropped = read_ring(ring, self.pid, tid, pcs)
                lost += dropped
                before, after = self._cpu[tid], _cpu_ns(self._root, self.pid, tid)
                cpu = after - before if before is not None and after is not None else None
                threads.append(ThreadSamples(tid, n, cpu))
        finally:
            self.close()
        objects, note = self._mapper.objects(self.pid, pcs)
        why = "; ".join(w for w in (self._why, note) if w)
        return PcProfile(self.pid, seconds, HZ, tuple(threads), objects, lost, None, why)

    def close(self) -> None:
        """Close every mapping and descriptor (again: nothing)."""
        events, self._events = self._events, []
        _close(events)

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start(
    pid: int,
    tids: Sequence[int],
    *,
    root: str = "/",
    mapper: PcMapper | None = None,
    syscall: Syscall | None = None,
) -> Window | PcProfile:
    """Start sampling the threads `tids` of `pid` (the first `MAX_THREADS`): an open Window,
    or a PcProfile that says why nothing could be measured."""
    call = syscall if syscall is not None else default_syscall()
    if isinstance(call, str):
        return _unmeasured(pid, NotMeasured.UNSUPPORTED, call)
    wanted = list(dict.fromkeys(t for t in tids if t > 0))
    notes = []
    if len(wanted) > MAX_THREADS:
        notes.append(f"{count(len(wanted) - MAX_THREADS, 'more thread')} not sampled")
        wanted = wanted[:MAX_THREADS]
    events: list[tuple[int, int, Any]] = []
    gone = 0
    event = attr()
    try:
        for tid in wanted:
            fd = call(event, tid, -1, -1, _FLAG_FD_CLOEXEC)
            if fd == -errno.ESRCH:
                gone += 1
                continue
            if fd < 0:
                kind, why = refusal(-fd, root, pid)
                if kind is NotMeasured.LIMIT and events:
                    left = count(len(wanted) - len(events) - gone, "thread")
                    notes.append(f"{why}: {left} left out")
                    break
                _close(events)
                return _unmeasured(pid, kind, why)
            ring = _map(fd)
            if isinstance(ring, int):
                os.close(fd)
                _close(events)
                kind, why = refusal(ring, root, pid, mapping=True)
                return _unmeasured(pid, kind, why)
            events.append((tid, fd, ring))
    except BaseException:
        _close(events)
        raise
    if gone:
        notes.append(f"{count(gone, 'thread')} ended before sampling")
    if not events:
        return _unmeasured(pid, NotMeasured.NO_THREADS, "; ".join(notes) or "no thread given")
    return Window(pid, events, root, mapper or PcMapper(root), "; ".join(notes))


class Cadence:
    """When a process's next window is due: the n-th gap of `gaps` after its n-th window (the
    last gap repeated), on the caller's clock; remembers at most `max_processes` processes
    (the oldest go first)."""

    def __init__(self, gaps: Sequence[float] = GAPS_S, max_processes: int = 4096) -> None:
        if not gaps or any(g < 0 for g in gaps):
            raise ValueError(f"gaps must be one or more seconds >= 0, not {gaps!r}")
        self.gaps = tuple(gaps)
        self._last: dict[tuple[int, int], tuple[float, int]] = {}
        self._max = max_processes

    def due(self, pid: int, start_ticks: int, now: float) -> bool:
        """Is a window of this process due at `now`? If so, it counts as taken now."""
        key = (pid, start_ticks)
        last = self._last.get(key)
        taken = 0
        if last is not None:
            at, taken = last
            if now - at < self.gaps[min(taken - 1, len(self.gaps) - 1)]:
                return False
        self._last.pop(key, None)
        if len(self._last) >= self._max:
            del self._last[next(iter(self._last))]
        self._last[key] = (now, taken + 1)
        return True


def measure(
    pid: int,
    tids: Sequence[int],
    seconds: float = 0.3,
    *,
    root: str = "/",
    mapper: PcMapper | None = None,
    syscall: Syscall | None = None,
) -> PcProfile:
    """Sample the threads `tids` of `pid` for `seconds` (at most MAX_SECONDS) and map their
    PCs: `start`, a sleep, `finish`."""
    window = start(pid, tids, root=root, mapper=mapper, syscall=syscall)
    if isinstance(window, PcProfile):
        return window
    with window:
        time.sleep(min(max(seconds, 0.0), MAX_SECONDS))
        return window.finish()


def refusal(
    code: int, root: str, pid: int, mapping: bool = False, privileged: bool | None = None
) -> tuple[NotMeasured, str]:
    """Why perf_event_open (or the ring's mmap) failed with errno `code`, in one line;
    `privileged` (root, CAP_PERFMON or CAP_SYS_ADMIN) is read from this process unless given."""
    name = errno.errorcode.get(code, str(code))
    if code in (errno.EACCES, errno.EPERM):
        if mapping:
            return NotMeasured.DENIED, f"the ring buffer's locked memory was refused ({name})"
        paranoid = _paranoid(root)
        privileged = _privileged(root) if privileged is None else privileged
        level = f"kernel.perf_event_paranoid is {paranoid}" if paranoid is not None else ""
        if not privileged and paranoid is not None and paranoid >= 3:
            return NotMeasured.PARANOID, f"{level}: perf events need CAP_PERFMON or root"
        if not privileged and not _own(root, pid):
            return NotMeasured.PARANOID, (
                f"not root, and process {pid} is another user's"
                + (f" ({level}: a user's own processes only)" if level else "")
            )
        return NotMeasured.DENIED, (
            f"perf_event_open refused ({name})"
            + (" although privileged" if privileged else "")
            + ": a seccomp profile or security module refuses it"
            + (f" ({level})" if level else "")
        )
    if code == errno.ENOSYS:
        return NotMeasured.NO_PERF, "no perf events: ENOSYS (the kernel, or a seccomp profile)"
    if code in (errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
        return NotMeasured.NO_EVENT, f"the kernel offers no cpu-clock software event ({name})"
    if code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EBUSY, errno.E2BIG):
        return NotMeasured.LIMIT, f"perf_event_open: {os.strerror(code)} ({name})"
    return NotMeasured.DENIED, f"perf_event_open failed: {os.strerror(code)} ({name})"


def read_ring(ring: Any, pid: int, tid: int, pcs: Counter[int]) -> tuple[int, int]:
    """Add the user-space sample PCs of one ring (of thread `tid` of `pid`) to `pcs`: the
    samples taken, and the samples the kernel lost. Records are the kernel's; anything odd
    (a size below a header, past the data) ends the reading."""
    head = struct.unpack_from("=Q", ring, _HEAD_AT)[0]
    offset, size = struct.unpack_from("=QQ", ring, _OFFSET_AT)
    if not size:  # before Linux 4.1: the data follow the first page
        offset, size = _PAGE, len(ring) - _PAGE
    if offset + size > len(ring):
        return 0, 0
    data = bytes(ring[offset : offset + size])
    end = min(head, size)  # nothing was read, so the kernel kept everything below size
    at = taken = lost = 0
    while at + 8 <= end:
        kind, misc, length = struct.unpack_from("=IHH", data, at)
        if length < 8 or at + length > end:
            break
        if kind == _RECORD_SAMPLE and length >= _RECORD:
            ip, rpid, rtid = struct.unpack_from("=QII", data, at + 8)
            if (rpid, rtid) == (pid, tid) and misc & 7 == 2:  # PERF_RECORD_MISC_USER
                pcs[ip] += 1
                taken += 1
        elif kind == _RECORD_LOST and length >= 24:
            lost += struct.unpack_from("=Q", data, at + 16)[0]
        at += length
    return taken, lost


def _map(fd: int) -> Any:
    import mmap

    length = (1 + RING_PAGES) * _PAGE
    options: dict[str, Any] = {"trackfd": False} if _TRACKFD else {}
    try:
        return mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, **options)
    except OSError as exc:
        return exc.errno or errno.ENOMEM


def _close(events: list[tuple[int, int, Any]]) -> None:
    for _, fd, ring in events:
        try:
            ring.close()
        finally:
            os.close(fd)


def _ioctl(fd: int, request: int) -> None:
    import fcntl

    with contextlib.suppress(OSError):  # an event whose thread ended: its ring says enough
        fcntl.ioctl(fd, request, 0)


def _cpu_ns(root: str, pid: int, tid: int) -> int | None:
    try:
        path = f"{root.rstrip('/')}/proc/{pid}/task/{tid}/schedstat"
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return int(os.read(fd, 128).split()[0])
    except (OSError, ValueError, IndexError):
        return None
    finally:
        os.close(fd)


def _paranoid(root: str) -> int | None:
    try:
        with open(f"{root.rstrip('/')}/proc/sys/kernel/perf_event_paranoid", "rb") as f:
            return int(f.read(32).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _privileged(root: str) -> bool:
    """Root, or CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in this process's effective set."""
    if os.geteuid() == 0:
        return True
    try:
        with open(f"{root.rstrip('/')}/proc/self/status", "rb") as f:
            for line in f.read(8192).splitlines():
                if line.startswith(b"CapEff:"):
                    caps = int(line.split()[1], 16)
                    return bool(caps & (1 << 38) or caps & (1 << 21))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _own(root: str, pid: int) -> bool:
    try:
        return os.stat(f"{root.rstrip('/')}/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        return False


def _unmeasured(pid: int, kind: NotMeasured, why: str) -> PcProfile:
    return PcProfile(pid, 0.0, HZ, unmeasured=kind, why=why)
