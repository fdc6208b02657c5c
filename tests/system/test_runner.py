"""start_command, TreeReaper and descendants, with real process trees that try to escape."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.core.errors import CommandError, ExitStatus, UsageError
from oversub.probe.proctree import descendants, read_ppids
from oversub.run.runner import (
    ExitWatch,
    TreeReaper,
    child_subreaper,
    start_command,
)
from tests.support.harness import OVERSUB, SLEEPER, Spawner, parent_of, start_ticks
from tests.support.harness import wait_until as wait_for

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def descendants_now(pid: int, root: str = "/") -> set[int]:
    """Pids of every current descendant of `pid` (not `pid` itself), by one ppid scan."""
    return descendants(pid, read_ppids(root))


# The command under test. Every process writes "label pid" to the pid file once it is set
# up, then sleeps. Labels:
#   root     the command itself
#   plain    a child
#   setsid   a child in a session of its own (leaves the process group)
#   stubborn a child that ignores SIGTERM (needs SIGKILL)
#   orphan   a grandchild whose parent exits at once: re-parented, same group
#   regroup  a grandchild in a process group of its own whose parent exits at once:
#            re-parented and out of the group, found through its session
#   escaped  a grandchild in its own session whose parent exits once GO exists: re-parented
#            out of both the tree and the session, findable only because it was observed
ESCAPING_TREE = r"""
import os, signal, sys, time
pidfile, go = sys.argv[1], sys.argv[2]

def report(label):
    with open(pidfile, "a") as f:
        f.write(f"{label} {os.getpid()}\n")

def child(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid

def sleep_forever(label):
    def body():
        report(label)
        time.sleep(600)
    return body

def own_session(label):
    def body():
        os.setsid()
        sleep_forever(label)()
    return body

def stubborn():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleep_forever("stubborn")()

def own_group(label):
    def body():
        os.setpgid(0, 0)
        sleep_forever(label)()
    return body

def orphan_parent():
    child(sleep_forever("orphan"))
    child(own_group("regroup"))

def escaped_parent():
    child(own_session("escaped"))
    while not os.path.exists(go):
        time.sleep(0.02)

child(sleep_forever("plain"))
child(own_session("setsid"))
child(stubborn)
child(orphan_parent)
child(escaped_parent)
report("root")
time.sleep(600)
"""

LABELS = {"root", "plain", "setsid", "stubborn", "orphan", "regroup", "escaped"}


class Tree:
    """A started ESCAPING_TREE; kills whatever is left of it on close."""

    def __init__(self, tmp_path: Path) -> None:
        script = tmp_path / "tree.py"
        script.write_text(ESCAPING_TREE)
        self.pidfile = tmp_path / "pids"
        self.go = tmp_path / "go"
        self.process = start_command([sys.executable, str(script), str(self.pidfile), str(self.go)])
        self.pids: dict[str, int] = {}
        self.starts: dict[int, int] = {}

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.pidfile.exists():
                for line in self.pidfile.read_text().splitlines():
                    label, pid = line.split()
                    if int(pid) not in self.starts:
                        ticks = start_ticks(int(pid))
                        if ticks is not None:
                            self.pids[label] = int(pid)
                            self.starts[int(pid)] = ticks
            return set(self.pids) == LABELS

        wait_for(ready)

    def alive(self) -> set[str]:
        return {label for label, pid in self.pids.items() if start_ticks(pid) == self.starts[pid]}

    def close(self) -> None:
        self.go.touch()
        for pid in self.starts:
            if start_ticks(pid) == self.starts[pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    started = Tree(tmp_path)
    try:
        yield started
    finally:
        started.close()


@pytest.mark.integration
def test_terminate_stops_children_setsid_orphans_and_sigterm_ignorers(tree: Tree) -> None:
    tree.wait_ready()
    # Their parent exits at once: wait until both have been re-parented away.
    orphans = [tree.pids["orphan"], tree.pids["regroup"]]
    wait_for(lambda: not set(orphans) & descendants_now(tree.process.pid))
    assert tree.alive() == LABELS

    reaper = TreeReaper(tree.process)
    reaper.terminate(grace=0.5)

    # "escaped" is still below its (live) parent here, so the ppid walk finds it.
    assert tree.alive() == set()
    assert tree.process.returncode == -signal.SIGTERM
    assert reaper.interrupted


@pytest.mark.integration
def test_observed_process_is_stopped_after_it_escaped(tree: Tree) -> None:
    tree.wait_ready()
    reaper = TreeReaper(tree.process)
    seen = descendants_now(tree.process.pid)
    assert tree.pids["escaped"] in seen
    reaper.observe(seen | {tree.process.pid})

    escaped_parent = parent_of(tree.pids["escaped"])
    tree.go.touch()  # its parent exits; it is re-parented outside the tree
    wait_for(lambda: parent_of(tree.pids["escaped"]) != escaped_parent)
    assert tree.pids["escaped"] not in descendants_now(tree.process.pid)

    reaper.terminate(grace=0.5)
    assert tree.alive() == set()
    reaper.terminate(grace=0.5)  # twice is harmless
    assert tree.process.returncode == -signal.SIGTERM


@pytest.mark.integration
def test_terminate_after_exit_keeps_the_exit_status() -> None:
    process = start_command([sys.executable, "-c", "import sys; sys.exit(3)"])
    try:
        reaper = TreeReaper(process)
        wait_for(lambda: process.poll() is not None)
        reaper.terminate(grace=0.5)
        reaper.terminate(grace=0.5)
        assert process.returncode == 3
        assert not reaper.interrupted
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.mark.integration
def test_command_runs_in_its_own_session_with_output_passed_through(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = "import os; print(os.getsid(0), os.getpgid(0), flush=True)"
    process = start_command([sys.executable, "-c", code])
    try:
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    sid, pgid = capfd.readouterr().out.split()
    assert int(sid) == int(pgid) == process.pid
    assert os.getsid(0) != process.pid


def test_missing_command_is_command_error() -> None:
    with pytest.raises(CommandError) as caught:
        start_command(["oversub-no-such-command-xyz", "--flag"])
    assert str(caught.value) == (
        "cannot start 'oversub-no-such-command-xyz': No such file or directory"
    )
    assert caught.value.status is ExitStatus.UNOBSERVABLE


def test_not_executable_is_command_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    if os.access(script, os.X_OK):  # root may execute anything with an x bit; this has none
        pytest.skip("file is executable for this user")
    with pytest.raises(CommandError, match="Permission denied"):
        start_command([str(script)])


def test_empty_command_is_usage_error() -> None:
    with pytest.raises(UsageError):
        start_command([])


def fake_stat(
    proc: Path, pid: int, ppid: int, comm: str = "python", pgrp: int = 1, start: int = 100
) -> None:
    """Write proc/PID/stat with the fields the runner reads, others zero."""
    rest = ["S", str(ppid), str(pgrp), str(pgrp)] + ["0"] * 15 + [str(start)] + ["0"] * 30
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")


def test_descendants_now_on_a_fake_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    fake_stat(proc, 1, 0, "init")
    fake_stat(proc, 10, 1, "job")
    fake_stat(proc, 11, 10, "weird) (name 2")  # comm with spaces and parentheses
    fake_stat(proc, 12, 11, "grandchild")
    fake_stat(proc, 13, 10, "x")
    fake_stat(proc, 20, 1, "other")
    fake_stat(proc, 21, 20, "other child")
    (proc / "self").mkdir()  # non-numeric entries are skipped
    (proc / "30").mkdir()  # a process that vanished mid-scan: no stat file
    assert descendants_now(10, root=str(tmp_path)) == {11, 12, 13}
    assert descendants_now(12, root=str(tmp_path)) == set()
    assert descendants_now(1, root=str(tmp_path)) == {10, 11, 12, 13, 20, 21}


def test_descendants_now_of_real_child() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process.pid in descendants_now(os.getpid())
        assert os.getpid() not in descendants_now(os.getpid())
    finally:
        process.kill()
        process.wait()


# The main thread returns (pthread_exit) while a second thread lives on: the process runs.
_LEADER_EXITS = (
    "import ctypes, threading, time; "
    "threading.Thread(target=time.sleep, args=(60,), daemon=False).start(); "
    "ctypes.CDLL(None).pthread_exit(None)"
)


def _main_thread_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rfind(b")") + 2 :][:1].decode()


@pytest.fixture(params=["pidfd", "proc"])
def exit_watch_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test of ExitWatch runs twice: through a pidfd, and through /proc (the fallback
    where os.pidfd_open is missing)."""
    if request.param == "proc":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open on this platform")
    return str(request.param)


@pytest.mark.integration
@pytest.mark.usefixtures("exit_watch_way")
def test_exit_watch_follows_the_process_not_its_main_thread() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    leaderless = subprocess.Popen([sys.executable, "-c", _LEADER_EXITS])
    try:
        with ExitWatch(sleeper.pid) as running, ExitWatch(leaderless.pid) as headless:
            deadline = time.monotonic() + 30
            while _main_thread_state(leaderless.pid) != "Z":
                assert time.monotonic() < deadline, "the main thread never exited"
                time.sleep(0.02)
            assert not running.gone()
            assert not headless.gone()  # a zombie main thread, a live process
            sleeper.kill()
            deadline = time.monotonic() + 30
            while not running.gone():  # a zombie until reaped: gone already
                assert time.monotonic() < deadline, "a killed process never read as gone"
                time.sleep(0.02)
            sleeper.wait(timeout=30)
            assert running.gone()  # and still gone once reaped
    finally:
        for proc in (sleeper, leaderless):
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.integration
@pytest.mark.usefixtures("exit_watch_way")
def test_exit_watch_wait_ends_at_the_exit_and_not_before_its_time() -> None:
    # `watch` waits out each interval here: a live process keeps it waiting the whole time
    # asked, an exit ends the wait at once (not at the end of a 60 s interval).
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with ExitWatch(sleeper.pid) as watch:
            began = time.monotonic()
            watch.wait(0.3)
            assert time.monotonic() - began >= 0.3  # a live process: the whole wait
            assert not watch.gone()
            threading.Timer(0.2, sleeper.kill).start()
            began = time.monotonic()
            watch.wait(60)
            assert time.monotonic() - began < 30, "the wait outlived the process"
            assert watch.gone()
            began = time.monotonic()
            watch.wait(60)  # gone already: no wait at all
            assert time.monotonic() - began < 30
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)


def test_exit_watch_of_a_missing_pid_is_gone() -> None:
    with ExitWatch(2**22 + 12345) as missing:  # above any pid_max
        assert missing.gone()


# ------------------------------------------------ daemons: the child subreaper (issue 10)

# Double fork: the middle process calls setsid and forks the daemon, then exits at once, so
# the daemon is re-parented before any sample can see the middle. argv: pidfile, delay
# before daemonising, seconds the command lives on, exit status.
DAEMONIZER = r"""
import os, sys, time
pidfile, status = sys.argv[1], int(sys.argv[4])
delay, lives = float(sys.argv[2]), float(sys.argv[3])
time.sleep(delay)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
os.wait()
while not os.path.exists(pidfile) or not open(pidfile).read():
    time.sleep(0.01)
time.sleep(lives)
sys.exit(status)
"""


@pytest.mark.integration
def test_reaper_stops_and_reaps_what_the_subreaper_adopted(tmp_path: Path, spawn: Spawner) -> None:
    pidfile = tmp_path / "daemon"
    argv = [sys.executable, "-c", DAEMONIZER, str(pidfile), "0", "0", "7"]
    with child_subreaper() as adopting:
        assert adopting
        process = subprocess.Popen(argv, start_new_session=True, env=spawn.env)
        try:
            reaper = TreeReaper(process, adopter=os.getpid())
            assert process.wait(timeout=30) == 7
            daemon = int(pidfile.read_text())
            assert parent_of(daemon) == os.getpid()  # adopted, not init's
            reaper.terminate(grace=0.5)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
    assert process.returncode == 7  # the command's own status was not taken by the reaping
    assert not Path(f"/proc/{daemon}").exists()  # stopped, and reaped: not even a zombie
    assert spawn.alive() == set()


@pytest.mark.integration
@pytest.mark.parametrize("when", ["before-the-first-sample", "mid-run"])
def test_check_counts_and_stops_a_daemon_that_left_with_setsid(
    tmp_path: Path, spawn: Spawner, when: str
) -> None:
    # A double-forked daemon in a session of its own was never seen and survived check.
    pidfile = tmp_path / "daemon"
    delay, lives = ("0", "0.8") if when == "before-the-first-sample" else ("0.5", "0.6")
    argv = [sys.executable, "-c", DAEMONIZER, str(pidfile), delay, lives, "0"]
    run = subprocess.run(
        [*OVERSUB, "check", "--interval", "0.2", "--warmup", "0", "--json", "r.json", "--", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=spawn.env,
    )
    assert run.returncode in (0, 1), run.stderr
    daemon = int(pidfile.read_text())
    assert spawn.alive() == set(), run.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert daemon in {p["pid"] for p in report["processes"]}  # counted as the command's


@pytest.mark.integration
def test_check_stops_setsid_fork_of_a_command_that_exits_at_once(spawn: Spawner) -> None:
    # `setsid -f sleep 600`: the command is gone before the first sample; the sleep is not.
    run = subprocess.run(
        [*OVERSUB, "check", "--", "setsid", "-f", *SLEEPER],
        capture_output=True,
        text=True,
        timeout=60,
        env=spawn.env,
    )
    assert run.returncode == ExitStatus.UNOBSERVABLE, run.stderr  # nothing measured
    assert spawn.alive() == set()


# The command lives on while its double-forked children die at once: each becomes a zombie
# of the subreaper, which must collect them during the run, not only at the end.
SHORT_DAEMONS = r"""
import os, sys, time
for _ in range(5):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.wait()
print("done", flush=True)
time.sleep(600)
"""


@pytest.mark.integration
def test_adopted_orphans_that_exit_are_reaped_during_the_run(spawn: Spawner) -> None:
    def zombies_of_mine() -> set[int]:
        found = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                text = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            fields = text[text.rfind(")") + 2 :].split()
            # Zombies of this test process born after the command: other tests' are not ours.
            if fields[0] == "Z" and int(fields[1]) == os.getpid() and int(fields[19]) >= born:
                found.add(int(name))
        return found

    with child_subreaper():
        process = subprocess.Popen(
            [sys.executable, "-c", SHORT_DAEMONS],
            start_new_session=True,
            stdout=subprocess.PIPE,
            env=spawn.env,
        )
        try:
            born = start_ticks(process.pid) or 0
            reaper = TreeReaper(process, adopter=os.getpid())
            assert process.stdout is not None and process.stdout.readline() == b"done\n"
            wait_for(lambda: len(zombies_of_mine()) >= 5)
            reaper.reap_adopted()
            assert zombies_of_mine() == set()
            assert process.poll() is None  # the command itself was left alone
            reaper.terminate(grace=0.5)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    assert process.returncode == -signal.SIGTERM
