"""Thread owners read from outside (`probe.owners`) on fake /proc trees, and the catalogue.

The fake trees place a process's "memory" in a regular file `mem` at small addresses: the
maps, syscall lines and stack words of each case point into it, as the real files do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oversub.core import runtimes
from oversub.core.samples import ThreadSample
from oversub.probe.owners import MAX_TRIES, OwnerReader, parse_syscall_pc
from oversub.probe.procmemory import follows_call
from tests.support.fake_threads import (
    GOMP,
    LIBC,
    NUMEXPR,
    NUMPY,
    OMPPOOL,
    ORT,
    PID,
    PY,
    SITE,
    STACK,
    FakeProcess,
)


def read_owners(root: Path, threads: list[ThreadSample], reader: OwnerReader | None = None):
    reader = reader or OwnerReader(str(root), machine="x86_64")
    owners = reader.read(PID, 42, tuple(threads))
    reader.end_sample()
    return owners


def test_thread_names_prove_their_owner(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC])
    threads = [
        proc.thread(PID, "pt_main_thread"),
        proc.thread(101, "polars-0"),
        proc.thread(102, "polars-11"),
        proc.thread(103, "gloo_tcp_loop"),
        proc.thread(104, "pt_gloo_runloop"),
        proc.thread(105, "jemalloc_bg_thd"),
        proc.thread(106, "pt_autograd_0"),
        proc.thread(107, "python"),
    ]
    proc.flush()
    assert read_owners(tmp_path, threads) == {
        PID: "unattributed",  # torch renames the main thread: no evidence
        101: "polars",
        102: "polars",
        103: "gloo",
        104: "gloo",  # gloo's pt_gloo_* before torch's pt_*
        105: "jemalloc",
        106: "torch",
        107: "unattributed",  # the process's own name, inherited
    }


def test_a_blocked_pc_in_a_runtimes_own_code_names_it(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC, GOMP])
    threads = [proc.thread(101, pc=GOMP[0] + 0x123)]
    proc.flush()
    assert read_owners(tmp_path, threads) == {101: "libgomp"}


def test_a_libgomp_team_driven_by_numbas_omp_layer_is_numbas(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC, GOMP, OMPPOOL])
    threads = [proc.thread(101, pc=GOMP[0] + 0x123)]
    proc.flush()
    assert read_owners(tmp_path, threads) == {101: "numba"}


def test_a_wait_in_libc_is_attributed_by_the_first_real_return_address(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC, ORT, NUMEXPR, NUMPY, PY])
    ort_ret, numexpr_ret, py_ret = ORT[0] + 0x500, NUMEXPR[0] + 0x400, PY[0] + 0x200
    stale = NUMPY[0] + 0x300  # points into numpy's code, but no call precedes it
    for ret in (ort_ret, numexpr_ret, py_ret):
        proc.call_site(ret)
    proc.call_site(PY[0] + 0x600, b"\x41\xff\xd0")  # call *%r8 (REX, FF /2)
    libc_ret = LIBC[0] + 0x80
    proc.call_site(libc_ret)
    threads = [
        proc.thread(101, pc=LIBC[0] + 0x10, stack=(0, libc_ret, 0xDEAD, ort_ret)),
        proc.thread(102, pc=LIBC[0] + 0x10, stack=(libc_ret, stale, 7, numexpr_ret)),
        proc.thread(103, pc=LIBC[0] + 0x10, stack=(libc_ret, PY[0] + 0x600)),
        proc.thread(104, pc=LIBC[0] + 0x10, stack=(libc_ret, stale, 0x1500)),  # heap only
    ]
    proc.flush()
    assert read_owners(tmp_path, threads) == {
        101: "onnxruntime",
        102: "numexpr",
        103: "python",
        104: "unattributed",
    }


def test_threads_started_together_share_their_pools_owner(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC, ORT])
    proc.call_site(ORT[0] + 0x500)
    threads = [
        proc.thread(PID, start=100),  # the main thread never joins a group
        proc.thread(101, start=900, pc=LIBC[0] + 0x10, stack=(ORT[0] + 0x500,)),
        proc.thread(102, start=901),  # running now, same name, a tick later
        proc.thread(103, start=950),  # started later: another pool
        proc.thread(104, "other", start=900),  # another name
    ]
    proc.flush()
    owners = read_owners(tmp_path, threads)
    assert owners == {
        PID: "unattributed",
        101: "onnxruntime",
        102: "onnxruntime",
        103: "unattributed",
        104: "unattributed",
    }


def test_a_threads_owner_is_read_once_and_a_running_one_is_retried_a_few_times(
    tmp_path: Path,
) -> None:
    proc = FakeProcess(tmp_path, [LIBC, GOMP])
    named = proc.thread(101, "polars-0")
    running = proc.thread(102)
    proc.flush()
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    assert read_owners(tmp_path, [named, running], reader) == {
        101: "polars",
        102: "unattributed",
    }
    # Its files gone: the owner stays cached, nothing is read again.
    for leaf in ("comm", "stat", "syscall"):
        (proc.base / "task" / "101" / leaf).unlink()
    # The running thread blocks in libgomp: tried again, found.
    (proc.base / "task" / "102" / "syscall").write_text(f"202 0x0 {STACK:#x} {GOMP[0] + 8:#x}\n")
    blocked = ThreadSample(102, "S", 0, 0, 0, 0)
    assert read_owners(tmp_path, [named, blocked], reader) == {101: "polars", 102: "libgomp"}


def test_a_process_whose_threads_are_all_proven_gets_its_last_answer_again(
    tmp_path: Path,
) -> None:
    proc = FakeProcess(tmp_path, [LIBC, GOMP])
    named = proc.thread(101, "polars-0")
    other = proc.thread(102, "gloo_tcp_loop")
    proc.flush()
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    first = read_owners(tmp_path, [named, other], reader)
    assert first == {101: "polars", 102: "gloo"}
    assert read_owners(tmp_path, [named, other], reader) is first  # the same threads
    # A new thread is looked at: it blocks in libgomp.
    proc.thread(103)  # its files
    proc.flush()
    (proc.base / "task" / "103" / "syscall").write_text(f"202 0x0 {STACK:#x} {GOMP[0] + 8:#x}\n")
    blocked = ThreadSample(103, "S", 0, 0, 0, 0)
    assert read_owners(tmp_path, [named, other, blocked], reader) == {
        101: "polars",
        102: "gloo",
        103: "libgomp",
    }
    # One left: the answer leaves it out.
    assert read_owners(tmp_path, [named, blocked], reader) == {101: "polars", 103: "libgomp"}
    # An unproven thread keeps being looked at, so its answer is not kept as settled.
    running = proc.thread(104)
    proc.flush()
    assert read_owners(tmp_path, [named, running], reader) == {101: "polars", 104: "unattributed"}
    (proc.base / "task" / "104" / "syscall").write_text(f"202 0x0 {STACK:#x} {GOMP[0] + 8:#x}\n")
    now_blocked = ThreadSample(104, "S", 0, 0, 0, 0)
    assert read_owners(tmp_path, [named, now_blocked], reader) == {101: "polars", 104: "libgomp"}


def test_a_blocked_thread_without_evidence_is_given_up_after_max_tries(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC])
    thread = proc.thread(101, pc=0x1234)  # in no mapped object
    proc.flush()
    syscall = proc.base / "task" / "101" / "syscall"
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    for _ in range(MAX_TRIES):
        assert read_owners(tmp_path, [thread], reader) == {101: "unattributed"}
    syscall.unlink()  # a further read would now fail loudly in the test
    syscall.mkdir()
    assert read_owners(tmp_path, [thread], reader) == {101: "unattributed"}


@pytest.mark.parametrize(
    "syscall",
    [b"", b"running", b"garbage", b"202 0x1 zz yy", b"\xff" * 600, b"-1 0x90000 0x10010"],
)
def test_hostile_or_odd_files_are_no_evidence_and_never_raise(
    tmp_path: Path, syscall: bytes
) -> None:
    proc = FakeProcess(tmp_path, [LIBC])
    thread = proc.thread(101, pc=LIBC[0])
    (proc.base / "task" / "101" / "syscall").write_bytes(syscall)
    (proc.base / "maps").write_bytes(b"zz-yy r-xp\n\xff\xfe garbage\n" + b"x" * 10_000)
    # no mem file at all
    assert read_owners(tmp_path, [thread]) == {101: "unattributed"}


def test_a_vanished_thread_or_process_is_no_evidence(tmp_path: Path) -> None:
    (tmp_path / "proc" / str(PID)).mkdir(parents=True)
    ghost = ThreadSample(101, "S", 0, 0, 0, 0)
    assert read_owners(tmp_path, [ghost]) == {101: "unattributed"}


def test_parse_syscall_pc() -> None:
    assert parse_syscall_pc(b"202 0x1 0x80 0x0 0x0 0x0 0x0 0x7ffc10 0x7f0020\n") == (
        0x7FFC10,
        0x7F0020,
    )
    assert parse_syscall_pc(b"running\n") is None
    assert parse_syscall_pc(b"202 nothex nothex") is None


def test_follows_call() -> None:
    assert follows_call(b"\x00\x00\xe8\x01\x02\x03\x04", "x86_64")
    assert follows_call(b"\x00\x00\x00\x00\x00\xff\xd2", "x86_64")  # call *%rdx
    assert follows_call(b"\x00\xff\x15\x01\x02\x03\x04", "x86_64")  # call *disp(%rip)
    assert not follows_call(b"\x00\x00\x00\x00\x00\x48\x89", "x86_64")
    assert not follows_call(b"\xe8", "x86_64")
    assert follows_call((0x94000010).to_bytes(4, "little"), "aarch64")  # bl
    assert follows_call((0xD63F0200).to_bytes(4, "little"), "aarch64")  # blr x16
    assert not follows_call((0xD65F03C0).to_bytes(4, "little"), "aarch64")  # ret
    assert not follows_call(b"\xe8\x00\x00\x00\x00\x00\x00", "riscv64")


def test_catalogue_objects_and_names() -> None:
    assert runtimes.owner_of_object(NUMEXPR[2]) == "numexpr"
    assert runtimes.owner_of_object(OMPPOOL[2]) == "numba"
    # A directory named like a runtime outside site-packages proves nothing.
    assert runtimes.owner_of_object("/home/numba/lib/libfoo.so") is None
    assert runtimes.owner_of_object("/home/numba/lib/libgomp.so.1") == "libgomp"
    assert runtimes.owner_of_object("/usr/lib/libarrow.so.2600") == "pyarrow"
    assert runtimes.owner_of_object(f"{SITE}/polars_runtime_32/_polars_runtime.abi3.so") == (
        "polars"
    )
    assert runtimes.owner_of_object("/usr/bin/python3.11") == "python"
    assert runtimes.is_system_object("/lib/x86_64-linux-gnu/libstdc++.so.6")
    assert not runtimes.is_system_object(GOMP[2])
    assert runtimes.owner_of_name("jemalloc_bg_thd") == "jemalloc"
    assert runtimes.owner_of_name("python3") is None


def test_every_runtime_with_a_pool_has_a_knob_and_a_cost_class() -> None:
    for r in runtimes.RUNTIMES:
        if r.waits == "none":
            assert not r.variables and r.code is None, r  # no thread cap is ever offered
        else:
            assert r.variables or r.code, r
        assert r.key == r.key.strip().lower() and r.label
    # ORT: environment variables do not reach its pool (measured): none is offered.
    assert runtimes.RUNTIMES_BY_KEY["onnxruntime"].variables == ()
    assert runtimes.RUNTIMES_BY_KEY["polars"].variables == ("POLARS_MAX_THREADS",)
    assert runtimes.RUNTIMES_BY_KEY["numba"].variables == ("NUMBA_NUM_THREADS",)
    cheap = {r.key for r in runtimes.RUNTIMES if r.waits == "sleep"}
    assert {"polars", "pyarrow", "numexpr", "numba"} <= cheap


def test_the_main_thread_of_an_interpreter_is_pythons_even_inside_a_pool(tmp_path: Path) -> None:
    proc = FakeProcess(tmp_path, [LIBC, GOMP, PY])
    threads = [
        proc.thread(PID, "pt_main_thread"),  # running: no PC
        proc.thread(101, pc=GOMP[0] + 0x10),
    ]
    proc.flush()
    assert read_owners(tmp_path, threads) == {PID: "python", 101: "libgomp"}
    other = tmp_path / "other"
    proc = FakeProcess(other, [LIBC, GOMP])  # no interpreter mapped
    main = proc.thread(PID, "app", pc=GOMP[0] + 0x10)
    proc.flush()
    assert read_owners(other, [main]) == {PID: "libgomp"}


def test_a_name_inherited_from_the_main_thread_proves_nothing(tmp_path: Path) -> None:
    """torch names a DataLoader worker's main thread pt_data_worker; the OpenBLAS threads the
    worker starts afterwards carry that name, which is torch's `pt_` prefix."""
    proc = FakeProcess(tmp_path, [LIBC])
    (proc.base / "comm").write_text("pt_data_worker\n")
    threads = [
        proc.thread(PID, "pt_data_worker"),
        proc.thread(101, "pt_data_worker"),
        proc.thread(102, "pt_autograd_0"),
    ]
    proc.flush()
    assert read_owners(tmp_path, threads) == {
        PID: "unattributed",
        101: "unattributed",
        102: "torch",
    }


def test_a_refused_memory_leaves_names_only_and_is_not_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not root and not its ancestor: the kernel refuses /proc/PID/mem to the reader process;
    # its threads keep the evidence of their names, and nothing of it is asked again.
    from oversub.probe import memreader
    from tests.support.fake_proc import deny_reader

    proc = FakeProcess(tmp_path, [LIBC, ORT])
    ret = ORT[0] + 0x500
    proc.call_site(ret)
    threads = [proc.thread(101), proc.thread(102, "polars-0")]
    proc.stack_top(101, (LIBC[0] + 0x100, LIBC[0] + 0x200, ret))
    proc.flush()
    deny_reader(monkeypatch, proc.base / "mem")
    readers = memreader.service()
    asked: list[object] = []
    refusing = readers.read_memory

    def read_memory(*args: object, **kwargs: object) -> list[bytes]:
        asked.append(args)
        return refusing(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(readers, "read_memory", read_memory)
    reader = OwnerReader(str(tmp_path), machine="x86_64")
    assert read_owners(tmp_path, threads, reader) == {101: "unattributed", 102: "polars"}
    assert len(asked) == 1
    assert read_owners(tmp_path, threads, reader) == {101: "unattributed", 102: "polars"}
    assert len(asked) == 1
