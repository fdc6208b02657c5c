"""The one rule that keeps a process's last reading (`TreeSampler._reusable`), on fake /proc
trees with a fake process CPU clock (`FakeProc.cpu_clock`): what it reuses, and every
condition that forces a real reading, for `watch PID` and for node mode alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from oversub.analysis.rates import counted, interval
from oversub.core.names import Signal
from oversub.core.targets import Target
from oversub.core.thresholds import Thresholds
from oversub.probe import processcache, procstat
from oversub.probe.cgroup import CgroupMount
from oversub.probe.cgroup_sampler import NodeSampler
from oversub.probe.cgroup_target import CgroupRef, Hierarchy
from oversub.probe.sampler import TreeSampler
from tests.support.fake_proc import FakeProc, FakeThread


def _tree(tmp_path: Path) -> FakeProc:
    """root(100, two sleeping threads) -> child(200); nothing runnable."""
    fake = FakeProc(tmp_path)
    fake.write_host()
    fake.add_process(1, 0, comm="init")
    fake.add_process(
        100,
        1,
        threads=[
            FakeThread(100, cpu_ns=1000, run_delay_ns=10, voluntary=5, involuntary=1),
            FakeThread(101, cpu_ns=2000, run_delay_ns=20, voluntary=7, involuntary=9),
        ],
    )
    fake.add_process(200, 100, comm="worker", start_ticks=2000)
    return fake


def _node(fake: FakeProc, tmp_path: Path, clock: Callable[[], float]) -> NodeSampler:
    top = tmp_path / "cg"
    top.mkdir()
    (top / "cgroup.procs").write_text("1\n100\n200\n")
    hierarchy = Hierarchy(1, CgroupMount(1, "/", "/sys/fs/cgroup", frozenset({"cpu"})), str(top))
    return NodeSampler(
        CgroupRef("/", str(top), hierarchy),
        root=str(tmp_path),
        clock=clock,
        cpu_clock=fake.cpu_clock,
    )


def _sampler(kind: str, fake: FakeProc, tmp_path: Path) -> TreeSampler:
    ticks = iter(range(1000))

    def clock() -> float:
        return float(next(ticks))

    if kind == "node":
        return _node(fake, tmp_path, clock)
    return TreeSampler(1, root=str(tmp_path), clock=clock, cpu_clock=fake.cpu_clock)


KINDS = ["tree", "node"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_process_that_did_not_run_keeps_its_reading_files_and_owners(
    tmp_path: Path, kind: str
) -> None:
    fake = _tree(tmp_path)
    with _sampler(kind, fake, tmp_path) as s:
        # A process's owners are read from its second reading on (its first is at start-up,
        # when nothing says it will run), so let it run once.
        assert s.sample().processes[100].owners is None
        fake.processes[100].threads[1].cpu_ns += 10
        fake.write(fake.processes[100])
        first = s.sample()
        assert first.processes[100].owners is not None
        held = len(s._threads.held)
        owners = s._owners._known[(100, 1000)]
        fake.processes[100].threads[1].run_delay_ns += 700  # waited, did not run: late
        fake.write(fake.processes[100])
        second = s.sample()
        assert second.processes[100] is first.processes[100]
        assert second.processes[100].owners == first.processes[100].owners
        assert len(s._threads.held) == held  # the held files stay open
        third = s.sample()  # kept twice: still remembered by the thread and owner readers
        assert third.processes[100] is first.processes[100]
        assert s._owners._known[(100, 1000)] is owners
        fake.processes[100].threads[1].cpu_ns += 50  # it ran: read again, the delay with it
        fake.write(fake.processes[100])
        fourth = s.sample()
    again = {t.tid: t for t in fourth.processes[100].threads}
    assert (again[101].cpu_ns, again[101].run_delay_ns) == (2060, 720)
    iv = counted(interval(second, third, 2), Thresholds())
    idle = next(p for p in iv.processes if p.pid == 100)
    assert (idle.cpu_s, idle.delay_s, idle.active_threads, idle.voluntary_ctx) == (0, 0, 0, 0)
    assert idle.owner_counts is not None and sum(c.threads for c in idle.owner_counts) == 2
    iv = counted(interval(third, fourth, 2), Thresholds())
    ran = next(p for p in iv.processes if p.pid == 100)
    assert ran.delay_s == pytest.approx(700e-9)


def _changed(fake: FakeProc, what: str) -> None:
    """One change that moves no CPU clock, to process 100 (or its thread 101)."""
    proc = fake.processes[100]
    if what == "threads":
        proc.threads.append(FakeThread(102))  # a new thread that has not run yet
    elif what == "children":
        proc.children_ticks = (3, 1)  # reaped a child
    elif what == "comm":
        proc.comm = "renamed"
    elif what == "ppid":
        proc.ppid = 900  # re-parented (to a subreaper)
    elif what == "state":
        proc.threads[0].state = "T"
    elif what == "main-runnable":
        proc.threads[0].state = "R"  # woken, waiting for a CPU
    fake.write(proc)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("what", ["threads", "children", "comm", "ppid", "state", "main-runnable"])
def test_what_moves_without_the_clock_forces_a_real_reading(
    tmp_path: Path, kind: str, what: str
) -> None:
    fake = _tree(tmp_path)
    with _sampler(kind, fake, tmp_path) as s:
        first = s.sample().processes[100]
        clock = fake.cpu_clock(100)
        _changed(fake, what)
        assert fake.cpu_clock(100) == clock
        again = s.sample().processes[100]
    assert again is not first
    if what == "threads":
        assert len(again.threads) == 3
    if what == "main-runnable":
        assert again.threads[0].state == "R"


@pytest.mark.parametrize("kind", KINDS)
def test_a_process_with_a_runnable_thread_is_read_at_every_sample(
    tmp_path: Path, kind: str
) -> None:
    # A starved process may not run at all while its threads wait: nothing of its stat line
    # or its clock moves, but its run delay (shown when the kernel moves the thread between
    # run queues) must be read, or an oversubscribed cgroup is judged starved, or not seen.
    fake = _tree(tmp_path)
    proc = fake.processes[100]
    proc.threads[1].state = "R"
    fake.write(proc)
    with _sampler(kind, fake, tmp_path) as s:
        first = s.sample()
        proc.threads[1].run_delay_ns += 900_000_000
        fake.write(proc)
        second = s.sample()
    assert second.processes[100] is not first.processes[100]
    assert second.processes[200] is first.processes[200]  # asleep: still reused
    waiting = next(
        p for p in counted(interval(first, second, 1), Thresholds()).processes if p.pid == 100
    )
    assert waiting.delay_s == pytest.approx(0.9)


@pytest.mark.parametrize("kind", KINDS)
def test_a_main_thread_runnable_in_the_stat_line_is_read_again(tmp_path: Path, kind: str) -> None:
    # The scan saw it runnable, its thread's own file a moment later asleep: the next sample
    # reads it again while the stat line says R.
    fake = _tree(tmp_path)
    stat = tmp_path / "proc" / "100" / "stat"
    stat.write_text(stat.read_text().replace(") S ", ") R ", 1))
    with _sampler(kind, fake, tmp_path) as s:
        first = s.sample().processes[100]
        assert all(t.state == "S" for t in first.threads)
        assert s.sample().processes[100] is not first


def test_a_kept_reading_still_says_what_it_could_not_measure(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    fake.processes[200].threads[0].schedstat = False  # a kernel without CONFIG_SCHED_INFO
    fake.write(fake.processes[200])
    with _sampler("tree", fake, tmp_path) as s:
        first = s.sample()
        second = s.sample()
    assert second.processes[200] is first.processes[200]
    assert Signal.SCHEDSTAT in first.unavailable and Signal.SCHEDSTAT in second.unavailable


def test_a_kept_root_that_dies_is_seen_gone(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    with TreeSampler(100, root=str(tmp_path), cpu_clock=fake.cpu_clock) as s:
        first = s.sample()
        assert s.sample().processes[100] is first.processes[100]
        proc = fake.processes[100]
        for t in proc.threads:
            t.state = "Z"  # exited, not reaped yet (its clock: as it was)
        fake.write(proc)
        zombie = s.sample()
        fake.remove(100)
        reaped = s.sample()
    target = Target.tree(100)
    assert not target.gone(first) and target.gone(zombie) and target.gone(reaped)


def test_a_new_process_on_a_reused_pid_is_read(tmp_path: Path) -> None:
    fake = _tree(tmp_path)
    with _sampler("node", fake, tmp_path) as s:
        first = s.sample().processes[200]
        fake.add_process(200, 100, comm="worker", start_ticks=2500)  # same counters
        again = s.sample().processes[200]
    assert again is not first and again.start_ticks == 2500


def test_maps_are_refreshed_on_their_schedule_only_for_a_process_that_ran(
    tmp_path: Path,
) -> None:
    # Mapping a library, exec'ing or starting a pool needs the process to run.
    fake = _tree(tmp_path)
    now = [0.0]
    s = TreeSampler(1, root=str(tmp_path), clock=lambda: now[0], cpu_clock=fake.cpu_clock)
    assert s.sample().processes[200].pools == ()
    proc = fake.processes[200]
    proc.libraries = ("/site/numpy.libs/libscipy_openblas64_-ff651d7f.so",)
    fake.write(proc)  # planted without its clock moving: a fake, but it shows the rule
    now[0] = processcache.MAPS_REFRESH_S
    assert s.sample().processes[200].pools == ()
    proc.threads[0].cpu_ns += 1
    fake.write(proc)
    now[0] += 0.5  # it ran and the maps' period is over: read them (its threads too)
    assert s.sample().processes[200].pools == ("openblas",)
    now[0] += processcache.MAPS_REFRESH_S
    proc.libraries = ()
    fake.write(proc)  # gone from maps without running: nothing re-reads them
    assert s.sample().processes[200].pools == ("openblas",)


def test_maps_due_while_the_process_sleeps_are_read_after_it_ran(tmp_path: Path) -> None:
    # It ran after its maps were read, then stopped: the reading is kept until the maps are
    # due, then the maps (and the threads) are read once more.
    fake = _tree(tmp_path)
    now = [0.0]
    s = TreeSampler(1, root=str(tmp_path), clock=lambda: now[0], cpu_clock=fake.cpu_clock)
    s.sample()
    proc = fake.processes[200]
    proc.threads[0].cpu_ns += 1
    proc.libraries = ("/site/numpy.libs/libscipy_openblas64_-ff651d7f.so",)
    fake.write(proc)
    now[0] = 1.0
    ran = s.sample().processes[200]  # threads read, maps not due yet
    assert ran.pools == ()
    now[0] = 2.0
    assert s.sample().processes[200] is ran
    now[0] = processcache.MAPS_REFRESH_S
    assert s.sample().processes[200].pools == ("openblas",)


def test_without_a_cpu_clock_every_process_is_read(tmp_path: Path) -> None:
    _tree(tmp_path)  # a fake /proc has no process CPU clock unless one is given
    with TreeSampler(100, root=str(tmp_path)) as s:
        first = s.sample().processes[100]
        assert s.sample().processes[100] is not first
    with TreeSampler(100, root=str(tmp_path), cpu_clock=lambda pid: None) as s:
        first = s.sample().processes[100]
        assert s.sample().processes[100] is not first


def test_the_process_cpu_clock_of_real_processes() -> None:
    import os
    import subprocess
    import sys
    import threading
    import time

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    worker = threading.Thread(target=spin)
    before = procstat.process_cpu_ns(os.getpid())
    worker.start()
    try:
        deadline = time.monotonic() + 10
        assert before is not None
        while procstat.process_cpu_ns(os.getpid()) == before:  # another thread's time counts
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        stop.set()
        worker.join()
    total = procstat.process_cpu_ns(os.getpid())
    assert total is not None and before < total <= time.process_time_ns()  # the same clock
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert procstat.process_cpu_ns(child.pid) is None  # reaped: no such process


@pytest.mark.parametrize("kind", KINDS)
def test_thread_starts_follow_children_in_tree_and_node_mode(tmp_path: Path, kind: str) -> None:
    """A parent's threads get their start times (forktime), a leaf's do not; a leaf that
    forks later is read again for them, though it did not run."""
    fake = _tree(tmp_path)
    with _sampler(kind, fake, tmp_path) as s:
        first = s.sample().processes
        assert [t.start_ticks for t in first[100].threads] == [1000, 1000]
        assert [t.start_ticks for t in first[200].threads] == [None]
        assert s.sample().processes[200] is first[200]  # kept: it did not run
        # 300 is adopted by 200, which does not run: its parent forked it and exited
        # (the root's thread runs for that, as a fork runs the parent: /proc is listed).
        fake.processes[100].threads[1].cpu_ns += 10
        fake.write_thread(fake.processes[100], fake.processes[100].threads[1])
        fake.add_process(300, 200, comm="late", start_ticks=3000)
        if kind == "node":
            (tmp_path / "cg" / "cgroup.procs").write_text("1\n100\n200\n300\n")
        later = s.sample().processes
    assert later[200] is not first[200]
    assert [t.start_ticks for t in later[200].threads] == [2000]
    assert [t.start_ticks for t in later[300].threads] == [None]
