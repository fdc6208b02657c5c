"""TreeSampler, proctree, procstat and procfiles on fake /proc trees, then on real process trees."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.core import errors
from oversub.core.names import DENIED as DENIED_UNAVAILABLE
from oversub.probe import cmdline, processcache, procfiles, procstat, proctree
from oversub.probe.procstat import CLK_TCK
from oversub.probe.psutil_sampler import PSUTIL_UNAVAILABLE
from oversub.probe.sampler import NEWCOMER_TICKS, TreeSampler
from tests.support.fake_proc import FakeProc, FakeThread, deny_open, stat_line

# --------------------------------------------------------------------------- proctree


def test_descendants_include_grandchildren_not_siblings() -> None:
    ppids = {1: 0, 10: 1, 11: 10, 12: 10, 13: 11, 14: 13, 20: 1, 21: 20}
    assert proctree.descendants(10, ppids) == {11, 12, 13, 14}
    assert proctree.descendants(14, ppids) == set()
    assert proctree.subtree([11, 20, 99], ppids) == {11, 13, 14, 20, 21}


def test_stat_comm_with_spaces_and_parentheses() -> None:
    line = stat_line(42, "my ) (odd) proc)", "R", 7, utime=3, stime=4, start_ticks=555)
    st = procstat.parse_stat(line.encode())
    assert (st.comm, st.state, st.ppid) == ("my ) (odd) proc)", "R", 7)
    assert (st.utime_ticks, st.stime_ticks, st.start_ticks) == (3, 4, 555)
    with pytest.raises(ValueError):
        procstat.parse_stat(b"42 (truncated")


def test_read_ppids_scans_fake_proc(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    fake.add_process(1, 0, comm="init")
    fake.add_process(10, 1, comm="a b) c")
    fake.add_process(11, 10)
    fake.add_process(12, 11)
    fake.write_host()  # /proc/stat and /proc/pressure must not be taken for processes
    ppids = proctree.read_ppids(str(tmp_path))
    assert ppids == {1: 0, 10: 1, 11: 10, 12: 11}
    assert proctree.descendants(10, ppids) == {11, 12}


# --------------------------------------------------------------------------- fake trees


def _tree(tmp_path: Path) -> FakeProc:
    """init(1) -> root(100) -> child(200) -> grandchild(300); unrelated(900) under init."""
    fake = FakeProc(tmp_path)
    fake.write_host()
    fake.add_process(1, 0, comm="init")
    fake.add_process(
        100,
        1,
        comm="python main",
        cmdline=("python", "train.py", "--x", "1"),
        threads=[
            FakeThread(100, state="R", cpu_ns=1000, run_delay_ns=10, voluntary=5, involuntary=1),
            FakeThread(101, state="S", cpu_ns=2000, run_delay_ns=20, voluntary=7, involuntary=9),
        ],
    )
    fake.add_process(200, 100, comm="worker", start_ticks=2000)
    fake.add_process(300, 200, comm="grand", start_ticks=3000)
    fake.add_process(900, 1, comm="other")
    return fake


def test_sample_finds_tree_and_per_thread_counters(tmp_path: Path) -> None:
    _tree(tmp_path)
    sample = TreeSampler(100, root=str(tmp_path), clock=lambda: 12.5).sample()
    assert sample.t == 12.5 and sample.root_pid == 100
    assert set(sample.processes) == {100, 200, 300}
    root = sample.processes[100]
    assert (root.ppid, root.name, root.cmdline, root.start_ticks) == (
        1,
        "python main",
        "python train.py --x 1",
        1000,
    )
    threads = {t.tid: t for t in root.threads}
    assert set(threads) == {100, 101}
    # The second thread's switches come from its own task status, not /proc/100/status.
    assert (threads[101].voluntary_ctx, threads[101].involuntary_ctx) == (7, 9)
    assert (threads[101].state, threads[101].cpu_ns, threads[101].run_delay_ns) == ("S", 2000, 20)
    assert threads[100].state == "R"
    assert sample.unavailable == ()
    assert sample.host.psi_some_us == 123456


def test_cmdline_truncated(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.add_process(400, 100, cmdline=("python", "x" * 500))
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert len(sample.processes[400].cmdline) == cmdline.CMDLINE_MAX


def test_cmdline_stops_at_the_argv_area(tmp_path: Path) -> None:
    # A process that overwrote the NULs of its argv area (setproctitle style) makes the
    # kernel go on into its environment: only the argv area's bytes may be shown.
    fake = _tree(tmp_path)
    fake.add_process(400, 100, cmdline=("python", "title"))  # argv area: 13 bytes
    (tmp_path / "proc" / "400" / "cmdline").write_bytes(b"python title SECRET_TOKEN=s3cr3t\0")
    cmdline = TreeSampler(100, root=str(tmp_path)).sample().processes[400].cmdline
    assert cmdline.startswith("python title")
    assert "SECRET" not in cmdline and "s3cr3t" not in cmdline


def test_cmdline_of_one_string_without_argv_bounds_is_not_shown(tmp_path: Path) -> None:
    # Another user's process as non-root: stat hides the bounds. One string may be argv
    # running into the environment, so it is not shown; separate arguments cannot be.
    fake = _tree(tmp_path)
    fake.add_process(400, 100, cmdline=("python title SECRET_TOKEN=s3cr3t",), args_shown=False)
    fake.add_process(500, 100, cmdline=("python", "worker.py"), args_shown=False)
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert sample.processes[400].cmdline == ""
    assert sample.processes[500].cmdline == "python worker.py"


def test_cmdline_read_across_an_exec_is_not_cut_by_the_old_bounds(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.add_process(400, 100, cmdline=("python", "x"))
    proc_dir = str(tmp_path / "proc" / "400")
    before = (tmp_path / "proc" / "400" / "stat").read_bytes()
    assert cmdline.read_cmdline(proc_dir, before) == "python x"
    fake.add_process(400, 100, cmdline=("python", "a-longer-command-line"))  # exec'd
    assert cmdline.read_cmdline(proc_dir, before) == ""  # bounds changed between the reads


def test_a_fake_tree_has_no_observer_cpu(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert TreeSampler(100, root=str(tmp_path)).sample().host.observer_cpu_ns is None


def test_adopted_orphans_belong_to_the_tree(tmp_path: Path) -> None:
    # oversub (pid 50 here) is the child subreaper of the command (100): an orphan of the
    # tree is re-parented to it, maybe before any sample saw it.
    fake = _tree(tmp_path)
    fake.add_process(50, 1, comm="oversub")
    fake.reparent(100, 50)
    fake.add_process(600, 50, comm="daemon", start_ticks=4000)
    fake.add_process(601, 600, comm="daemon-child", start_ticks=4001)
    sample = TreeSampler(100, root=str(tmp_path), adopter=50).sample()
    assert set(sample.processes) == {100, 200, 300, 600, 601}
    assert set(TreeSampler(100, root=str(tmp_path)).sample().processes) == {100, 200, 300}


def test_vanishing_thread_and_process_are_skipped(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.add_vanishing_thread(200, 201)  # listed, files already gone
    task = tmp_path / "proc" / "300" / "task" / "300"
    (task / "schedstat").write_text("")  # empty read: exited while being read
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert [t.tid for t in sample.processes[200].threads] == [200]
    assert sample.processes[300].threads == ()


def test_zombie_is_kept_without_threads(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.add_process(400, 100, comm="defunct", state="Z", threads=[], cmdline=())
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert sample.processes[400].threads == ()
    assert sample.processes[400].name == "defunct"


def test_missing_schedstat_falls_back_to_ticks(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.add_process(
        400, 100, threads=[FakeThread(400, utime_ticks=30, stime_ticks=12, schedstat=False)]
    )
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    (thread,) = sample.processes[400].threads
    assert thread.cpu_ns == 42 * 1_000_000_000 // CLK_TCK
    assert thread.run_delay_ns is None
    assert "schedstat" in sample.unavailable


def test_environ_filtered_and_secrets_nowhere(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    env = {
        "SECRET": "s3cr3t-value",
        "AWS_SECRET_ACCESS_KEY": "AKIAsecretkey",
        "OMP_NUM_THREADS": "2",
    }
    fake.add_process(400, 100, environ=env)
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert sample.processes[400].thread_env == {"OMP_NUM_THREADS": "2"}
    for leak in ("SECRET", "s3cr3t", "AWS_", "AKIA"):
        assert leak not in repr(sample)


def test_unreadable_environ_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    deny_open(monkeypatch, tmp_path / "proc" / "200" / "environ")
    sampler = TreeSampler(100, root=str(tmp_path))
    sample = sampler.sample()
    assert sample.processes[200].thread_env is None
    assert sample.processes[200].pools is None  # one refusal: both unknown, never "none"
    assert sample.processes[100].thread_env == {}
    assert set(DENIED_UNAVAILABLE) <= set(sample.unavailable)
    # Cached: later samples keep saying why, without asking the kernel again.
    assert set(DENIED_UNAVAILABLE) <= set(sampler.sample().unavailable)


def test_a_vanished_environ_is_not_called_refused(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "proc" / "200" / "environ").unlink()
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert sample.processes[200].thread_env is None
    assert not set(DENIED_UNAVAILABLE) & set(sample.unavailable)


def test_pools_cached_until_thread_count_changes_or_refresh(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    now = [0.0]
    s = TreeSampler(100, root=str(tmp_path), clock=lambda: now[0])
    assert s.sample().processes[200].pools == ()

    # numpy imported: OpenBLAS mapped, same thread count -> still cached at t=1.
    proc = fake.processes[200]
    proc.libraries = ("/site/numpy.libs/libscipy_openblas64_-ff651d7f.so",)
    proc.environ = {"OMP_NUM_THREADS": "1"}
    fake.write(proc)
    now[0] = 1.0
    assert s.sample().processes[200].pools == ()

    # Its pool starts a thread: maps re-read at once; environ is still the first read.
    proc.threads.append(FakeThread(201))
    fake.write(proc)
    now[0] = 2.0
    got = s.sample().processes[200]
    assert got.pools == ("openblas",)
    assert got.thread_env == {}

    # No new thread, but the refresh period passed.
    proc.libraries += ("/torch/lib/libtorch_cpu.so", "/torch/lib/libgomp-a34b3233.so.1")
    fake.write(proc)
    now[0] = 2.0 + processcache.MAPS_REFRESH_S
    assert s.sample().processes[200].pools == ("libgomp", "openblas", "torch")


def test_orphans_stay_tracked_after_reparenting(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    s = TreeSampler(100, root=str(tmp_path))
    assert set(s.sample().processes) == {100, 200, 300}

    fake.remove(200)  # the worker died; the kernel re-parents its child to init
    fake.reparent(300, 1)
    fake.add_process(301, 300, start_ticks=3100)  # the orphan's new child belongs too
    assert set(s.sample().processes) == {100, 300, 301}

    # pid 300 reused by an unrelated process: not the one we tracked.
    fake.remove(301)
    fake.add_process(300, 1, comm="stranger", start_ticks=9999)
    assert set(s.sample().processes) == {100}


def test_first_sample_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    with pytest.raises(errors.NoSuchProcess, match="no process with pid 555"):
        TreeSampler(555, root=str(tmp_path)).sample()

    deny_open(monkeypatch, tmp_path / "proc" / "100" / "task")
    with pytest.raises(errors.PermissionDenied):
        TreeSampler(100, root=str(tmp_path)).sample()


def test_later_samples_survive_target_exit(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    s = TreeSampler(100, root=str(tmp_path))
    s.sample()
    fake.remove(100)
    fake.reparent(200, 1)
    later = s.sample()
    assert 100 not in later.processes
    assert set(later.processes) == {200, 300}
    fake.remove(200)
    fake.remove(300)
    assert s.sample().processes == {}


def test_psutil_fallback_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    real_exists = os.path.exists
    monkeypatch.setattr(
        os.path, "exists", lambda p: False if p == "/proc/self/stat" else real_exists(p)
    )
    s = TreeSampler(os.getpid())
    monkeypatch.undo()
    sample = s.sample()
    me = sample.processes[os.getpid()]
    assert sample.unavailable == PSUTIL_UNAVAILABLE
    assert me.pools is None and me.thread_env is None
    assert me.threads and all(t.state == "?" and t.run_delay_ns is None for t in me.threads)
    assert sample.host.psi_some_us is None
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    missing = TreeSampler(2**22 + 12345)  # above any pid_max
    monkeypatch.undo()
    with pytest.raises(errors.NoSuchProcess):
        missing.sample()


def test_counters_move_between_samples_through_held_files(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    with TreeSampler(100, root=str(tmp_path)) as s:
        s.sample()
        proc = fake.processes[100]
        proc.threads[1].cpu_ns, proc.threads[1].involuntary = 9000, 40
        proc.threads[0].state = "D"
        fake.write(proc)
        got = {t.tid: t for t in s.sample().processes[100].threads}
    assert (got[101].cpu_ns, got[101].involuntary_ctx, got[100].state) == (9000, 40, "D")


def test_held_files_bounded_and_closed(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"f{i}").write_text(f"v{i}")
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        held = procfiles.HeldFiles(max_fds=2)
        with held.files("a", dir_fd) as files:
            assert [files.read(f"f{i}") for i in range(3)] == [b"v0", b"v1", b"v2"]
        assert len(held) == 2  # the third was opened, read and closed
        held.end_sample()
        assert len(held) == 2  # group "a" was read in this sample
        (tmp_path / "f0").write_text("new")
        with held.files("a", dir_fd) as files:
            assert files.read("f0") == b"new"  # re-read through the held descriptor
            # f1 is not read again: f2, read instead, takes its place.
            assert files.read("f2") == b"v2"
        assert len(held) == 2  # f0 and f2; f1 was not read in this reading, so it was closed
        with pytest.raises(FileNotFoundError), held.files("a", dir_fd) as files:
            assert files.read("f2") == b"v2"  # through its held descriptor
            files.read("missing")
        assert len(held) == 1  # a reading that raised gives back what it read (f2), f0 closed
        other = procfiles.HeldFiles(max_fds=2)
        with other.files("a", dir_fd) as files:
            files.read("f0")
            files.read("f1")
        with other.files("b", dir_fd) as files:
            assert files.read("f2") == b"v2"  # no room: opened, read and closed
        assert len(other) == 2
        other.close()
        held.close()
        assert len(held) == 0

        unheld = procfiles.HeldFiles()
        with unheld.files("a", dir_fd, hold=False) as files:
            assert files.read("f1") == b"v1"
        assert len(unheld) == 0  # opened, read and closed
        unbounded = procfiles.HeldFiles(max_fds=0)
        with unbounded.files("a", dir_fd) as files:
            assert files.read("f1") == b"v1"
        assert len(unbounded) == 0

        grouped = procfiles.HeldFiles()
        with grouped.files("a", dir_fd) as files:
            files.read("f0")
            files.read("f1")
        with grouped.files("b", dir_fd) as files:
            files.read("f0")  # the same path in another group: its own descriptor
        assert len(grouped) == 3
        grouped.end_sample()
        grouped.keep("a")  # reused without a read: all of its files stay open
        grouped.end_sample()
        assert len(grouped) == 2  # "b" neither read nor kept
        (tmp_path / "f0").write_text("new again")
        os.rename(tmp_path / "f1", tmp_path / "f1.old")
        (tmp_path / "f1").write_text("a new file")
        with grouped.files("a", dir_fd) as files:
            assert files.read("f1") == b"v1"  # still the held descriptor's file
        grouped.end_sample()
        assert len(grouped) == 1  # "a" read only f1
        grouped.close()
        assert len(grouped) == 0
    finally:
        os.close(dir_fd)


def test_thread_starts_read_only_for_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _tree(tmp_path)
    leaf_stat = str(tmp_path / "proc" / "300" / "task" / "300" / "stat")
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        opened = _opened(monkeypatch)
        first = s.sample()
        monkeypatch.undo()
        starts = {pid: [t.start_ticks for t in p.threads] for pid, p in first.processes.items()}
        # 100 and 200 forked a member: their threads' start times are read (what
        # analysis.forktime counts); leaf 300's stays unknown, its thread's stat unopened.
        assert starts == {100: [1000, 1000], 200: [2000], 300: [None]}
        assert leaf_stat not in opened
        assert s.sample().processes[300] is first.processes[300]  # kept: it did not run
        # A child of it appears while its CPU clock stays as it was (adopted: a child of
        # its own forked it and exited; some process of the tree ran for that, here the
        # root, so /proc is listed): the kept reading has no start time, so it is read
        # again, and the thread read before gets its start.
        fake.processes[100].threads[0].cpu_ns += 10
        fake.write_thread(fake.processes[100], fake.processes[100].threads[0])
        fake.add_process(301, 300, comm="late", start_ticks=3100)
        later = s.sample()
        assert later.processes[300] is not first.processes[300]
        assert [t.start_ticks for t in later.processes[300].threads] == [3000]
        assert s.sample().processes[300] is later.processes[300]  # every start known: kept


def test_thread_starts_read_with_owners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _tree(tmp_path)
    leaf_stat = str(tmp_path / "proc" / "300" / "task" / "300" / "stat")
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        first = s.sample()
        assert first.processes[300].threads[0].start_ticks is None
        assert first.processes[300].owners is None  # owners: from the second sample on
        proc = fake.processes[300]
        proc.threads[0].cpu_ns += 1000  # it ran: read again, its owners looked for
        fake.write(proc)
        opened = _opened(monkeypatch)
        second = s.sample()
        monkeypatch.undo()
    assert second.processes[300].threads[0].start_ticks == 3000
    assert second.processes[300].owners is not None
    assert opened.count(leaf_stat) == 0  # read by the thread reader (held), not by owners
    assert opened.count("300/stat") == 1


def test_a_busy_newcomer_has_its_owners_read_at_first_sight(tmp_path: Path) -> None:
    """joblib's multiprocessing workers live less than an interval: a process first seen
    with several threads and CPU spent gets its owners in that sample; an idle one, or one
    thread, waits for its second sample as before."""
    fake = _tree(tmp_path)
    ticks = NEWCOMER_TICKS
    busy = [FakeThread(400, state="R", utime_ticks=ticks), FakeThread(401, state="R")]
    fake.add_process(400, 100, comm="worker", start_ticks=4000, threads=busy)
    idle = [FakeThread(500, utime_ticks=ticks - 1), FakeThread(501)]
    fake.add_process(500, 100, comm="idle", start_ticks=5000, threads=idle)
    one = [FakeThread(600, state="R", utime_ticks=10 * ticks)]
    fake.add_process(600, 100, comm="single", start_ticks=6000, threads=one)
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        first = s.sample()
    assert first.processes[400].owners is not None
    assert [t.start_ticks for t in first.processes[400].threads] == [4000, 4000]
    assert first.processes[500].owners is None
    assert first.processes[600].owners is None


def test_thread_files_are_held_from_a_process_second_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first reading opens, reads and closes its threads' files (most processes of a big
    tree are read once, then kept); a process read again holds them, and a third reading
    goes through the held descriptors."""
    fake = _tree(tmp_path)
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        s.sample()
        assert len(s._threads.held) == 0
        # The root's main thread is runnable: no reading of it is kept, each is a new one.
        s.sample()
        assert len(s._threads.held) == 4  # schedstat and stat of threads 100 and 101
        opened = _opened(monkeypatch)
        third = s.sample()
        monkeypatch.undo()
    assert [t.tid for t in third.processes[100].threads] == [100, 101]
    assert not [p for p in opened if p.startswith(("100/", "101/"))]
    assert len(s._threads.held) == 0  # closed with the sampler


def test_past_the_held_file_cap_the_processes_beyond_it_are_read_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap degrades a process at a time, never the whole sample: the processes that hold
    their files keep them sample after sample, the ones past the cap open, read and close
    theirs, and both read what the kernel shows now."""
    fake = FakeProc(tmp_path)
    fake.write_host()
    fake.add_process(1, 0, comm="init")
    for pid in (100, 200, 300, 400):
        threads = [FakeThread(pid + i, cpu_ns=1000 + i) for i in range(2)]
        fake.add_process(pid, 1 if pid == 100 else 100, threads=threads)
    with TreeSampler(100, root=str(tmp_path)) as s:
        # The scanner and the thread files share one budget: what the scanner holds (a stat
        # line per process here) is the thread files' no more.
        s._budget = 12
        s.sample()
        assert s._scanner.holding() == 5 and s._threads.held.max_fds == 12 - 5
        s._scanner.max_fds = 0  # the scanner holds nothing from now on
        s._scanner.close()
        s._budget = 8  # two processes' schedstat and stat, of 4 x 2 threads
        held = s._threads.held._groups
        for _ in range(3):
            s.sample()
        assert s._threads.held.max_fds == 8
        holders = {pid for pid, _start in held}
        assert len(s._threads.held) == 8 and len(holders) == 2, held
        fake.processes[400].threads[1].cpu_ns = 5000
        fake.processes[100].threads[1].cpu_ns = 6000
        fake.write(fake.processes[400])
        fake.write(fake.processes[100])
        opened = _opened(monkeypatch)
        sample = s.sample()
        monkeypatch.undo()
        assert {pid for pid, _start in held} == holders  # the same processes hold theirs
    read = {t.tid: t.cpu_ns for p in sample.processes.values() for t in p.threads}
    assert read[401] == 5000 and read[101] == 6000
    plain = {int(p.split("/")[0]) // 100 * 100 for p in opened if p.endswith("schedstat")}
    assert plain == {100, 200, 300, 400} - holders  # past the cap: opened at each reading


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths os.open opens from now on."""
    paths: list[str] = []
    real_open = os.open

    def spy(path: Any, *args: Any, **kwargs: Any) -> int:
        paths.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return paths


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_process_stats_are_held_and_reread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _tree(tmp_path)
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        s.sample()
        fake.processes[200].children_ticks = (3, 4)
        fake.write(fake.processes[200])  # rewritten in place, as procfs regenerates it
        opened = _opened(monkeypatch)
        again = s.sample()
        monkeypatch.undo()
        # Read through the held descriptor: no process's stat was opened again.
        assert again.processes[200].children_cpu_ns == procstat.ticks_to_ns(7)
        proc = tmp_path / "proc"
        assert not [p for p in opened if Path(p).parent.parent == proc and p.endswith("/stat")]
        assert any(p.endswith("/task") for p in opened)  # the spy saw the sample's opens
        held = list(s._scanner._box[0].values())
        assert len(held) == 5  # init, 100, 200, 300, 900
    assert all(_closed(fd) for fd in held)  # close() closed them


def test_stat_scanner_reopens_reaped_pids_and_closes_the_gone(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    scanner = proctree.StatScanner(str(tmp_path))
    assert scanner.scan() == proctree.scan_stats(str(tmp_path))
    old_inode = os.fstat(scanner._box[0]["300"]).st_ino
    fd_900 = scanner._box[0]["900"]
    fake.remove(300)  # reaped: its held stat reads nothing
    fake.add_process(300, 1, comm="stranger", start_ticks=9999)  # the pid names another one
    fake.remove(900)
    stats = scanner.scan()
    assert procstat.parse_stat(stats[300]).start_ticks == 9999
    new_inode = (tmp_path / "proc" / "300" / "stat").stat().st_ino
    assert os.fstat(scanner._box[0]["300"]).st_ino == new_inode != old_inode  # opened again
    assert 900 not in stats and "900" not in scanner._box[0] and _closed(fd_900)
    assert len(scanner) == 4
    held = list(scanner._box[0].values())
    del scanner
    gc.collect()
    assert all(_closed(fd) for fd in held)  # the finalizer closed them


def test_stat_scanner_rereads_after_esrch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path)
    scanner = proctree.StatScanner(str(tmp_path))
    scanner.scan()
    dead = {scanner._box[0]["200"]}
    real_pread = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        if fd in dead:
            dead.discard(fd)  # the new descriptor may get the same number
            raise ProcessLookupError(3, "No such process")  # the kernel's ESRCH
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    opened = _opened(monkeypatch)
    stats = scanner.scan()
    assert procstat.parse_stat(stats[200]).comm == "worker" and not dead
    assert opened == [str(tmp_path / "proc" / "200" / "stat")]  # only the dead one again
    scanner.close()
    assert len(scanner) == 0


def test_stat_scanner_rereads_the_main_threads_line_of_the_process_tracked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reread` reads task/PID/stat (held after its first open), shows what the process's
    line shows but its CPU time, and gives up (None: scan) on a pid that now names
    another process, or when a tracked one is gone."""
    fake = _tree(tmp_path)
    scanner = proctree.StatScanner(str(tmp_path))
    stats = scanner.scan()
    tracked = {pid: procstat.parse_stat(stats[pid]).start_ticks for pid in (100, 200, 300)}
    fake.processes[200].children_ticks = (3, 4)
    fake.write(fake.processes[200])
    first = _opened(monkeypatch)
    again = scanner.reread(tracked)
    monkeypatch.undo()
    assert again is not None and set(again) == set(tracked)
    proc = tmp_path / "proc"
    assert sorted(first) == [str(proc / f"{p}" / "task" / f"{p}" / "stat") for p in tracked]
    for pid in tracked:
        whole, main = procstat.parse_stat(stats[pid]), procstat.parse_stat(again[pid])
        assert (main.comm, main.state, main.ppid, main.threads, main.start_ticks) == (
            whole.comm,
            whole.state,
            whole.ppid,
            whole.threads,
            whole.start_ticks,
        )
    assert procstat.parse_stat(again[200]).children_ticks == 7
    opened = _opened(monkeypatch)
    assert scanner.reread(tracked) is not None
    assert opened == []  # held
    monkeypatch.undo()
    held_300 = scanner._main[300]
    assert scanner.reread({100: tracked[100], 200: tracked[200]}) is not None
    assert 300 not in scanner._main and _closed(held_300)  # no longer tracked: closed
    fake.remove(300)
    fake.add_process(300, 100, comm="stranger", start_ticks=9999)  # the pid names another one
    assert scanner.reread(tracked) is None and 300 not in scanner._main
    gone, real_pread = scanner._main[200], os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        if fd == gone:
            raise ProcessLookupError(3, "No such process")  # the kernel's ESRCH: reaped
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    assert scanner.reread({200: tracked[200]}) is None
    monkeypatch.undo()
    assert scanner.reread({100: tracked[100]}) is not None
    held_100 = scanner._main[100]
    fake.remove(100)
    scanner.scan()  # 100 left the listing: its main thread's descriptor goes too
    assert 100 not in scanner._main and _closed(held_100)
    assert scanner.reread({200: tracked[200]}) is not None
    held = list(scanner._main.values())
    scanner.close()
    assert held and all(_closed(fd) for fd in held) and not scanner._main


def test_stat_scanner_holds_at_most_max_fds(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    scanner = proctree.StatScanner(str(tmp_path), max_fds=2)
    for comm in ("a", "b"):
        for pid in (100, 200, 300):
            fake.processes[pid].comm = comm
            fake.write(fake.processes[pid])
        stats = scanner.scan()
        assert len(scanner) == 2  # the others were opened, read and closed
        assert {procstat.parse_stat(stats[p]).comm for p in (100, 200, 300)} == {comm}
    assert set(stats) == {1, 100, 200, 300, 900}
    scanner.close()
    assert len(proctree.StatScanner(str(tmp_path), max_fds=0).scan()) == 5


# --------------------------------------------------------------------------- real trees

CHILD = """
import hashlib, os, sys, threading
ready, busy, idle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = b"x" * (16 << 20)
stop = threading.Event()
def spin():
    while not stop.is_set():
        hashlib.sha256(buf).digest()  # releases the GIL: threads really run in parallel
for _ in range(busy):
    threading.Thread(target=spin, daemon=True).start()
for _ in range(idle):
    threading.Thread(target=stop.wait, daemon=True).start()
open(os.path.join(ready, f"{os.getpid()}.tmp"), "w").close()
os.rename(os.path.join(ready, f"{os.getpid()}.tmp"), os.path.join(ready, str(os.getpid())))
stop.wait()
"""

PARENT = """
import os, signal, subprocess, sys, time
ready, busy, idle, child, short = sys.argv[1:6]
kids = [subprocess.Popen([sys.executable, "-c", child, ready, busy, idle]) for _ in range(2)]
def stop(*_):
    for k in kids:
        k.kill()
    for k in kids:
        k.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
if float(short) > 0:
    while not os.path.exists(os.path.join(ready, "go")):
        time.sleep(0.01)
    subprocess.run([sys.executable, "-c", f"import time; time.sleep({short})"])
while True:
    time.sleep(1)
"""

BUSY, IDLE = 2, 3


def _start_tree(ready: Path, short_child_s: float) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", PARENT, str(ready), str(BUSY), str(IDLE), CHILD]
    return subprocess.Popen([*argv, str(short_child_s)], start_new_session=True)


def _stop_tree(parent: subprocess.Popen[bytes]) -> None:
    """SIGTERM lets the parent kill and reap its children; SIGKILL the group if it hangs."""
    try:
        parent.terminate()
        parent.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def _wait_ready(ready: Path, n: int) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = [int(p.name) for p in ready.iterdir() if p.name.isdigit()]
        if len(pids) >= n:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"only {len(list(ready.iterdir()))} of {n} children became ready")


@pytest.fixture
def real_tree(tmp_path: Path) -> Iterator[tuple[int, list[int]]]:
    parent = _start_tree(tmp_path, 0)
    try:
        yield parent.pid, _wait_ready(tmp_path, 2)
    finally:
        _stop_tree(parent)


@pytest.mark.integration
def test_real_tree_threads_and_cpu_grow(real_tree: tuple[int, list[int]]) -> None:
    root, children = real_tree
    s = TreeSampler(root)
    first = s.sample()
    assert {root, *children} <= set(first.processes)
    for pid in children:
        assert len(first.processes[pid].threads) >= 1 + BUSY + IDLE
        assert first.processes[pid].ppid == root
    time.sleep(0.3)
    second = s.sample()
    assert second.t > first.t
    for pid in children:
        before = sum(t.cpu_ns for t in first.processes[pid].threads)
        after = sum(t.cpu_ns for t in second.processes[pid].threads)
        assert after > before
        assert all(t.voluntary_ctx is not None for t in second.processes[pid].threads)
    if "schedstat" not in second.unavailable:
        assert any(t.run_delay_ns is not None for t in second.processes[children[0]].threads)
    # oversub's own CPU is read beside /proc/stat, to be left out of "outside the tree".
    assert first.host.observer_cpu_ns is not None
    assert second.host.observer_cpu_ns >= first.host.observer_cpu_ns  # type: ignore[operator]


@pytest.mark.integration
def test_real_short_lived_child_exits_between_samples(tmp_path: Path) -> None:
    parent = _start_tree(tmp_path, 1.0)
    try:
        children = set(_wait_ready(tmp_path, 2))
        s = TreeSampler(parent.pid)
        s.sample()
        (tmp_path / "go").touch()
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        short: set[int] = set()
        while time.monotonic() < deadline:
            current = set(s.sample().processes)  # must never raise while the child exits
            seen |= current
            short = seen - children - {parent.pid}
            if short and not short & current:
                break
            time.sleep(0.01)
        assert short, "the short-lived child was never sampled"
        assert not short & set(s.sample().processes)
        assert parent.pid in s.sample().processes
    finally:
        _stop_tree(parent)


@pytest.mark.integration
def test_real_thread_churn_and_no_fd_leak() -> None:
    import threading

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    stop = threading.Event()
    first_batch = [threading.Thread(target=stop.wait) for _ in range(3)]
    for t in first_batch:
        t.start()
    s = TreeSampler(os.getpid())
    try:
        tids = {t.tid for t in s.sample().processes[os.getpid()].threads}
        old = {t.native_id for t in first_batch}
        assert old <= tids
        stop.set()
        for t in first_batch:
            t.join()
        # join() returns when the Python thread is done, a moment before the kernel removes
        # the task: wait (bounded) until it has, or the test would race the kernel.
        deadline = time.monotonic() + 10
        while old & {int(n) for n in os.listdir("/proc/self/task")}:
            assert time.monotonic() < deadline, "exited threads still listed after 10 s"
            time.sleep(0.01)
        stop2 = threading.Event()
        second_batch = [threading.Thread(target=stop2.wait) for _ in range(2)]
        for t in second_batch:
            t.start()
        try:
            now = {t.tid for t in s.sample().processes[os.getpid()].threads}
            new = {t.native_id for t in second_batch}
            assert new <= now
            assert not (old - new) & now  # exited threads are gone (unless a tid was reused)
        finally:
            stop2.set()
            for t in second_batch:
                t.join()
    finally:
        s.close()
    assert open_fds() == before


def test_read_ppids(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    fake.add_process(5, 1)
    assert proctree.read_ppids(str(tmp_path)) == {5: 1}


def test_zombie_keeps_what_was_seen_while_it_lived(tmp_path: Path) -> None:
    # A zombie's cmdline, maps and environ read empty; the fork-hang rule compares command
    # lines and the summary names pools, so what the live process showed must stay.
    fake = _tree(tmp_path)
    proc = fake.add_process(
        400,
        100,
        cmdline=("python", "train.py"),
        environ={"OMP_NUM_THREADS": "2"},
        libraries=("/usr/lib/libgomp-a34b3233.so.1",),
    )
    sampler = TreeSampler(100, root=str(tmp_path))
    alive = sampler.sample().processes[400]
    proc.state, proc.cmdline, proc.environ, proc.libraries = "Z", (), {}, ()
    proc.threads = []
    fake.write(proc)
    dead = sampler.sample().processes[400]
    assert (dead.cmdline, dead.pools, dead.thread_env) == (
        alive.cmdline,
        alive.pools,
        alive.thread_env,
    )
    assert alive.pools == ("libgomp",)


def test_children_cpu_of_reaped_children_is_sampled(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.add_process(400, 100, children_ticks=(30, 12))
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert sample.processes[400].children_cpu_ns == 42 * 1_000_000_000 // CLK_TCK
    assert sample.processes[100].children_cpu_ns == 0


@pytest.mark.integration
def test_oversub_does_not_sample_itself() -> None:
    # `oversub watch $$` from a shell: the shell's tree holds oversub; its sampling is not
    # the job's load. Here the test process plays oversub, its parent plays the shell.
    parent = os.getppid()
    sample = TreeSampler(parent).sample()
    assert os.getpid() not in sample.processes
    assert os.getpid() in TreeSampler(os.getpid()).sample().processes  # unless it is the target


def test_attach_reads_the_throttling_of_the_budgets_quota_cgroup() -> None:
    from oversub.analysis.plans import synthetic_budget
    from oversub.core.model import CpuQuota
    from oversub.core.targets import Target
    from oversub.run.sources import attach

    budget = synthetic_budget(2)
    source = attach(Target.tree(os.getpid()), budget)
    assert source.sampler.throttle_stat_path is None  # type: ignore[attr-defined]
    source.close()
    quota = CpuQuota(0.5, 50_000, 100_000, "/job", 2, "/sys/fs/cgroup/job/cpu.stat")
    source = attach(Target.tree(os.getpid()), budget._replace(quota=quota))
    assert source.sampler.throttle_stat_path == quota.stat_path  # type: ignore[attr-defined]
    source.close()


def test_a_thread_that_did_not_run_keeps_its_switch_counts_and_reads_only_its_state(
    tmp_path: Path,
) -> None:
    # status costs twice stat in the kernel; a thread whose CPU time and run count did not
    # move was never switched out, so only its state (it may have been woken) is read again.
    fake = _tree(tmp_path)
    proc = fake.processes[100]
    idle = proc.threads[1]
    with TreeSampler(100, root=str(tmp_path)) as s:
        s.sample()
        idle.state, idle.voluntary = "R", 99  # woken, waiting for a CPU; status not read
        fake.write(proc)
        again = {t.tid: t for t in s.sample().processes[100].threads}[101]
        assert (again.state, again.voluntary_ctx, again.involuntary_ctx) == ("R", 7, 9)
        idle.cpu_ns += 500  # it ran: status is read again
        fake.write(proc)
        ran = {t.tid: t for t in s.sample().processes[100].threads}[101]
        assert (ran.state, ran.voluntary_ctx, ran.cpu_ns) == ("R", 99, 2500)
        # Nothing moved, to the byte: the very same reading is carried, no object made.
        same = {t.tid: t for t in s.sample().processes[100].threads}[101]
        assert same is ran
        idle.run_delay_ns += 40  # it waited for a CPU without running yet: read again
        fake.write(proc)
        waited = {t.tid: t for t in s.sample().processes[100].threads}[101]
        assert (waited.run_delay_ns, waited.cpu_ns) == (ran.run_delay_ns + 40, 2500)


def _no_descriptor_for(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """os.open of a path ending in `suffix` fails as when the process has no descriptor left."""
    real_open = os.open

    def starved_open(p: Any, *args: Any, **kwargs: Any) -> int:
        if str(p).endswith(suffix):
            raise OSError(errno.EMFILE, "Too many open files", p)
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", starved_open)


@pytest.mark.parametrize("suffix", ["/300/stat", "/300/task", "101/schedstat", "101/status"])
def test_a_file_not_opened_for_want_of_descriptors_is_not_seen_not_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """EMFILE is no exit: the sample goes on, and says a process of the tree was not seen
    (never "ok" for what could not be read), where a thread or process skipped silently
    would make the tree look smaller."""
    _tree(tmp_path)
    _no_descriptor_for(monkeypatch, suffix)
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert "processes" in sample.unavailable
    assert 200 in sample.processes  # the others are read as usual


def _listings(monkeypatch: pytest.MonkeyPatch, proc: Path) -> list[int]:
    """Counts the listings of `proc` (one entry per os.listdir of it)."""
    calls: list[int] = []
    real_listdir = os.listdir

    def counting(path: Any = ".") -> list[str]:
        if str(path) == str(proc):
            calls.append(1)
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    return calls


def test_a_tree_none_of_whose_processes_ran_is_not_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process can join a tree unless one of the tree runs (a fork runs the parent): while
    every tracked CPU clock stands still, /proc is not listed and only the tree's stat lines
    are read; a clock that moves (or a process gone, or one first seen) lists it again."""
    fake = _tree(tmp_path)
    listed = _listings(monkeypatch, tmp_path / "proc")
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        assert set(s.sample().processes) == {100, 200, 300}
        s.sample()
        assert len(listed) == 2  # the first sample's processes had no clock from before it
        fake.add_process(901, 900, comm="unrelated")  # outside the tree: not its business
        s.sample()
        s.sample()
        assert len(listed) == 2
        fake.processes[200].threads[0].cpu_ns += 5  # 200 runs and forks 201
        fake.write_thread(fake.processes[200], fake.processes[200].threads[0])
        fake.add_process(201, 200, comm="new", start_ticks=2100)
        assert 201 in s.sample().processes
        assert len(listed) == 3
        s.sample()  # 201 has no clock from before the last scan: listed once more
        assert len(listed) == 4
        s.sample()
        assert len(listed) == 4
        fake.remove(300)
        assert 300 not in s.sample().processes
        assert len(listed) == 5


def test_a_tree_with_an_adopter_is_listed_at_every_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oversub's own children belong to the tree it started: they may be orphans that no
    clock of the tree tells about."""
    fake = _tree(tmp_path)
    listed = _listings(monkeypatch, tmp_path / "proc")
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock, adopter=1) as s:
        for _ in range(4):
            s.sample()
    assert len(listed) == 4
