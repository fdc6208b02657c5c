"""Sampled user-space PCs (`probe.perfpc`): the ring buffer read as the kernel writes it (a
fake kernel: memfd rings), every refusal as "not measured" with its reason and nothing left
open, and the real thing on a child whose threads spin in PAUSE and work in a library built
here with gcc (skipped without one), as root, as another user and under a seccomp filter."""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.core.pcprofile import NotMeasured, PcProfile
from oversub.probe import perfpc
from oversub.probe.pcmap import PcMapper
from oversub.probe.perfpc import HZ, MAX_THREADS, RING_PAGES, Window, measure, read_ring, refusal

PAGE = mmap.PAGESIZE
PID = 4242


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def ring(records: list[bytes], head: int | None = None) -> bytearray:
    """A ring as the kernel leaves it: the control page (data_head, data_offset, data_size),
    then the records."""
    buf = bytearray((1 + RING_PAGES) * PAGE)
    data = b"".join(records)
    struct.pack_into("=Q", buf, 1024, len(data) if head is None else head)
    struct.pack_into("=QQ", buf, 1040, PAGE, RING_PAGES * PAGE)
    buf[PAGE : PAGE + len(data)] = data
    return buf


def sample(ip: int, pid: int = PID, tid: int = PID, misc: int = 2) -> bytes:
    return struct.pack("=IHHQII", 9, misc, 24, ip, pid, tid)


def lost(n: int) -> bytes:
    return struct.pack("=IHHQQ", 2, 0, 24, 1, n)


def test_the_ring_gives_the_threads_user_samples_and_the_lost_ones() -> None:
    records = [
        sample(0x1000),
        sample(0x1000),
        sample(0x2000, tid=PID + 1),  # another thread (a tid reused by someone else)
        sample(0x3000, pid=PID + 9),
        sample(0x4000, misc=1),  # kernel mode: never taken
        struct.pack("=IHH8s", 3, 0, 16, b"comm\0\0\0\0"),  # another record: skipped
        lost(5),
        sample(0x5000),
    ]
    pcs: Counter[int] = Counter()
    assert read_ring(ring(records), PID, PID, pcs) == (3, 5)
    assert pcs == {0x1000: 2, 0x5000: 1}


@pytest.mark.parametrize(
    ("records", "head"),
    [
        ([sample(1), struct.pack("=IHH", 9, 0, 4), sample(2)], None),  # size below a header
        ([sample(1), struct.pack("=IHH", 9, 2, 4000)], None),  # past the data
        ([sample(1)], 1 << 62),  # a head past the ring
    ],
    ids=["tiny", "past", "head"],
)
def test_an_odd_record_ends_the_reading(records: list[bytes], head: int | None) -> None:
    pcs: Counter[int] = Counter()
    taken, _ = read_ring(ring(records, head), PID, PID, pcs)
    assert taken == 1 and pcs == {1: 1}


class FakeKernel:
    """perf_event_open answering from a script: an errno, or a memfd ring of records."""

    def __init__(self, answers: dict[int, int | list[bytes]]) -> None:
        self.answers = answers
        self.opened: list[int] = []

    def __call__(self, attr: bytes, pid: int, cpu: int, group: int, flags: int) -> int:
        assert (cpu, group, flags) == (-1, -1, 8)
        # exclude_kernel and exclude_hv set, the event disabled until all are open.
        assert struct.unpack_from("=Q", attr, 40)[0] & 0b1100001 == 0b1100001
        answer = self.answers[pid]
        if isinstance(answer, int):
            return -answer
        fd = os.memfd_create("ring")
        os.write(fd, bytes(ring(answer)))
        self.opened.append(fd)
        return fd


class Objects:
    """A PcMapper stand-in: the PCs it was given, as one object."""

    def __init__(self) -> None:
        self.pcs: dict[int, int] = {}

    def objects(self, pid: int, pcs: dict[int, int]) -> tuple[tuple[Any, ...], str]:
        self.pcs = dict(pcs)
        return (), ""


def test_a_window_reads_every_ring_and_closes_it(tmp_path: Path) -> None:
    before = fds()
    kernel = FakeKernel({PID: [sample(0x10)] * 3, PID + 1: [sample(0x20, tid=PID + 1)]})
    mapper = Objects()
    window = perfpc.start(PID, [PID, PID + 1], root=str(tmp_path), mapper=mapper, syscall=kernel)  # type: ignore[arg-type]
    assert isinstance(window, Window)
    profile = window.finish()
    assert fds() == before
    assert mapper.pcs == {0x10: 3, 0x20: 1}
    assert [(t.tid, t.samples, t.cpu_ns) for t in profile.threads] == [
        (PID, 3, None),
        (PID + 1, 1, None),
    ]
    assert profile.unmeasured is None and profile.hz == HZ and profile.why == ""
    window.close()  # again: nothing


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (errno.ENOSYS, NotMeasured.NO_PERF),
        (errno.ENOENT, NotMeasured.NO_EVENT),
        (errno.EOPNOTSUPP, NotMeasured.NO_EVENT),
        (errno.EINVAL, NotMeasured.NO_EVENT),
        (errno.EMFILE, NotMeasured.LIMIT),
        (errno.EPERM, NotMeasured.DENIED),  # root here: a seccomp profile
        (errno.EIO, NotMeasured.DENIED),
    ],
)
def test_each_refusal_is_not_measured_and_leaves_nothing_open(
    tmp_path: Path, code: int, kind: NotMeasured
) -> None:
    before = fds()
    # The first thread opens, the second is refused: the first one's ring is closed too.
    kernel = FakeKernel({PID: [sample(1)], PID + 1: code})
    profile = perfpc.start(PID, [PID, PID + 1], root=str(tmp_path), syscall=kernel)
    if kind is NotMeasured.LIMIT:  # out of descriptors midway: the threads opened are kept
        assert isinstance(profile, Window)
        done = profile.finish()
        assert fds() == before
        assert done.unmeasured is None and "1 thread left out" in done.why
        return
    assert fds() == before
    assert isinstance(profile, PcProfile)
    assert profile.unmeasured is kind and profile.why and profile.samples == 0


def test_threads_that_ended_are_left_out(tmp_path: Path) -> None:
    kernel = FakeKernel({PID: errno.ESRCH, PID + 1: [sample(7, tid=PID + 1)]})
    window = perfpc.start(PID, [PID, PID + 1], root=str(tmp_path), mapper=Objects(), syscall=kernel)  # type: ignore[arg-type]
    assert isinstance(window, Window)
    assert window.finish().why == "1 thread ended before sampling"
    gone = perfpc.start(PID, [PID], root=str(tmp_path), syscall=FakeKernel({PID: errno.ESRCH}))
    assert isinstance(gone, PcProfile) and gone.unmeasured is NotMeasured.NO_THREADS
    none = perfpc.start(PID, [], root=str(tmp_path), syscall=FakeKernel({}))
    assert isinstance(none, PcProfile) and none.why == "no thread given"


def test_at_most_max_threads_are_sampled(tmp_path: Path) -> None:
    tids = list(range(PID, PID + MAX_THREADS + 3))
    kernel = FakeKernel({t: [sample(1, tid=t)] for t in tids})
    window = perfpc.start(PID, tids, root=str(tmp_path), mapper=Objects(), syscall=kernel)  # type: ignore[arg-type]
    assert isinstance(window, Window)
    done = window.finish()
    assert len(done.threads) == MAX_THREADS and len(kernel.opened) == MAX_THREADS
    assert done.why == "3 more threads not sampled"


def test_why_a_user_is_refused(tmp_path: Path) -> None:
    sysctl = tmp_path / "proc" / "sys" / "kernel" / "perf_event_paranoid"
    sysctl.parent.mkdir(parents=True)
    sysctl.write_text("3\n")
    kind, why = refusal(errno.EACCES, str(tmp_path), 1, privileged=False)
    assert kind is NotMeasured.PARANOID
    assert why == "kernel.perf_event_paranoid is 3: perf events need CAP_PERFMON or root"
    sysctl.write_text("2\n")
    kind, why = refusal(errno.EACCES, str(tmp_path), 1, privileged=False)  # not our process
    assert (kind, why) == (
        NotMeasured.PARANOID,
        "not root, and process 1 is another user's "
        "(kernel.perf_event_paranoid is 2: a user's own processes only)",
    )
    kind, why = refusal(errno.EPERM, str(tmp_path), 1, privileged=True)
    assert kind is NotMeasured.DENIED and "seccomp" in why and "although privileged" in why
    kind, why = refusal(errno.EPERM, str(tmp_path), 1, mapping=True)
    assert kind is NotMeasured.DENIED and "locked memory" in why


def test_a_process_is_sampled_at_most_once_per_cadence() -> None:
    cadence = perfpc.Cadence(gaps=(30.0,), max_processes=2)
    assert cadence.due(1, 100, now=0.0)
    assert not cadence.due(1, 100, now=29.9)
    assert cadence.due(1, 101, now=29.9)  # the pid reused: another process
    assert cadence.due(1, 100, now=30.0)
    assert cadence.due(2, 5, now=31.0)  # a third process: the oldest is forgotten
    assert cadence.due(1, 101, now=31.0)


def test_a_processs_first_windows_come_closer_together_than_the_later_ones() -> None:
    cadence = perfpc.Cadence()
    taken = [t for t in range(130) if cadence.due(1, 100, now=float(t))]
    assert taken == [0, 1, 3, 7, 15, 30, 60, 90, 120]
    assert len([t for t in taken if t < 10]) == 4  # a 10-second check sees four windows
    with pytest.raises(ValueError, match="gaps"):
        perfpc.Cadence(gaps=())


def test_no_system_call_number_is_unsupported(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(perfpc, "default_syscall", lambda: "no perf_event_open for m68k")
    profile = measure(PID, [PID], 0.1, root=str(tmp_path))
    assert profile.unmeasured is NotMeasured.UNSUPPORTED and "m68k" in profile.why


# ----------------------------------------------------------------- the real kernel

SPIN_C = r"""
volatile int stop_flag = 0;
__attribute__((aligned(64))) double work(long n) {
    double x = 0; for (long i = 1; i <= n; i++) x += 1.0 / (double)i; return x;
}
__attribute__((aligned(64))) void spin_wait(void) {
    while (!stop_flag) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}
"""

CHILD = textwrap.dedent(
    """
    import ctypes, os, sys, threading, time
    lib = ctypes.CDLL(sys.argv[1])
    tids = []
    def spin():
        tids.append(threading.get_native_id()); lib.spin_wait()
    def work():
        tids.append(threading.get_native_id())
        while True:
            lib.work(ctypes.c_long(10_000_000))
    for f in (spin, work):
        threading.Thread(target=f, daemon=True).start()
    while len(tids) < 2:
        time.sleep(0.01)
    print(*tids, flush=True)
    time.sleep(120)
    """
)


@pytest.fixture(scope="module")
def spin_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc/cc) to build the spinning library")
    out = tmp_path_factory.mktemp("lib") / "libspinwork.so"
    src = out.with_suffix(".c")
    src.write_text(SPIN_C)
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture
def spinner(spin_library: Path) -> Iterator[tuple[int, list[int]]]:
    """A child with one thread spinning in PAUSE and one working, both in the library."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(spin_library)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        tids = [int(t) for t in proc.stdout.readline().split()]
        assert len(tids) == 2
        yield proc.pid, tids
    finally:
        proc.kill()
        proc.communicate()


def _usable() -> str | None:
    syscall = perfpc.default_syscall()
    if isinstance(syscall, str):
        return syscall
    probe = perfpc.start(os.getpid(), [os.getpid()])
    if isinstance(probe, PcProfile):
        return probe.why
    probe.close()
    return None


def test_a_spinning_thread_and_a_working_one_are_told_apart(
    spinner: tuple[int, list[int]], spin_library: Path
) -> None:
    why = _usable()
    if why is not None:
        pytest.skip(f"perf events not usable here: {why}")
    pid, (spin_tid, work_tid) = spinner
    before = fds()
    mapper = PcMapper()
    counts: Counter[tuple[str | None, bool]] = Counter()
    for _ in range(5):  # windows until each thread has enough samples (a loaded machine)
        profile = measure(pid, [spin_tid, work_tid], 0.4, mapper=mapper)
        assert profile.unmeasured is None, profile.why
        for thread in profile.threads:  # 499 samples per second of the thread's CPU time
            assert thread.cpu_ns is not None
            expected = thread.cpu_ns * HZ / 1e9
            assert 0.6 * expected - 3 <= thread.samples <= 1.1 * expected + 3, profile.threads
        lib = next((o for o in profile.objects if o.path == str(spin_library)), None)
        for b in lib.buckets if lib is not None else ():
            counts[(b.function, b.spin_hint)] += b.samples
        if counts[("spin_wait", True)] >= 10 and counts[("work", False)] >= 10:
            break
    assert fds() == before
    spun = counts[("spin_wait", True)]
    worked = counts[("work", False)]
    assert spun >= 10 and worked >= 10, counts
    assert counts[("spin_wait", False)] <= spun / 10, counts
    assert counts[("work", True)] <= worked / 10, counts


SECCOMP = textwrap.dedent(
    """
    import ctypes, json, struct, sys, threading
    from oversub.probe import perfpc
    nr, answer = perfpc.SYSCALLS[__import__("os").uname().machine], int(sys.argv[1])
    # seccomp-bpf: perf_event_open -> errno `answer`, everything else allowed.
    prog = [(0x20, 0, 0, 0), (0x15, 0, 1, nr), (0x06, 0, 0, 0x00050000 | answer),
            (0x06, 0, 0, 0x7FFF0000)]
    raw = b"".join(struct.pack("HBBI", *f) for f in prog)
    buf = ctypes.create_string_buffer(raw)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    fprog = Prog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()
    p = perfpc.measure(__import__("os").getpid(), [threading.get_native_id()], 0.05)
    print(json.dumps([p.unmeasured, p.why]))
    """
)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filter names x86_64's number")
@pytest.mark.parametrize(
    ("answer", "kind"),
    [(errno.EPERM, NotMeasured.DENIED), (errno.ENOSYS, NotMeasured.NO_PERF)],
    ids=["EPERM", "ENOSYS"],
)
def test_a_seccomp_profile_that_refuses_perf_events(answer: int, kind: NotMeasured) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SECCOMP, str(answer)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    import json

    unmeasured, why = json.loads(out.stdout)
    assert unmeasured == kind.value, why
    if answer == errno.EPERM and os.geteuid() == 0:
        assert "although privileged" in why and "seccomp" in why


AS_NOBODY = textwrap.dedent(
    """
    import fcntl, json, mmap, os, sys, threading, time
    from oversub.probe import perfpc
    perfpc.default_syscall()  # ctypes loaded as root: this Python lives under /root (0700)
    os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
    stop = time.monotonic() + 5
    def busy():
        while time.monotonic() < stop:
            pass
    t = threading.Thread(target=busy, daemon=True); t.start()
    time.sleep(0.05)
    own = perfpc.measure(os.getpid(), [t.native_id], 0.2)
    other = perfpc.measure(int(sys.argv[1]), [int(sys.argv[1])], 0.05)
    print(json.dumps([own.unmeasured, own.samples, other.unmeasured, other.why]))
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_a_user_samples_its_own_processes_only() -> None:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
    if paranoid != "2":
        pytest.skip(f"perf_event_paranoid is {paranoid}, not 2")
    out = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, str(os.getpid())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    import json

    own, samples, other, why = json.loads(out.stdout)
    assert own is None and samples > 0
    assert other == NotMeasured.PARANOID.value
    assert why == (
        f"not root, and process {os.getpid()} is another user's "
        "(kernel.perf_event_paranoid is 2: a user's own processes only)"
    )
