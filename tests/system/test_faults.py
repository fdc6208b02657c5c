"""Faults in the watched tree, through the real CLI: churn, a target killed mid-run, zombies
and orphans (the /proc read faults are in test_probe_faults.py).

The tests run `python -m oversub` on real process trees started in sessions of their own
(`spawn` kills every process they start, even when a test fails); every wait is bounded.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fault_tree import ndjson, sampling
from tests.support.harness import OVERSUB, Spawner, parent_of
from tests.support.harness import state as _state
from tests.support.harness import wait_until as wait_for

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _spawn(started: Spawner, script: str, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    """A Python tree in a session of its own, reaped by the `spawn` fixture."""
    return started([sys.executable, "-c", script, *args], start_new_session=True, **kw)


def _watch(started: Spawner, tmp_path: Path, pid: int, *flags: str) -> subprocess.Popen[bytes]:
    """`oversub watch PID --format ndjson FLAGS` with stdout and stderr in files."""
    out = (tmp_path / "out").open("wb")
    err = (tmp_path / "err").open("wb")
    with out, err:
        return _spawn_argv(
            started, [*OVERSUB, "watch", str(pid), "--format", "ndjson", *flags], out, err
        )


def _spawn_argv(started: Spawner, argv: list[str], out: Any, err: Any) -> subprocess.Popen[bytes]:
    return started(argv, stdout=out, stderr=err, start_new_session=True)


def _finished(proc: subprocess.Popen[bytes], tmp_path: Path, timeout: float) -> tuple[int, str]:
    """Exit status and stderr (file `err`) of an oversub run that must end by itself."""
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"oversub did not end within {timeout} s (hang)") from None
    return code, (tmp_path / "err").read_text()


def _check_output(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Intervals and summary of a finished ndjson run: every line an interval, the last the
    summary."""
    assert records, "no output"
    *intervals, summary = records
    assert summary["type"] == "summary", summary
    assert all(r["type"] == "interval" for r in intervals)
    return intervals, summary


def _watch_to_end(*args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run `oversub watch ARGS` (ndjson on a pipe) to its end: exit 0, nothing on stderr;
    its intervals and summary."""
    out = subprocess.run([*OVERSUB, "watch", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return _check_output([json.loads(line) for line in out.stdout.splitlines()])


def _pids(record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in record["processes"]}


# --------------------------------------------------------------------------- 1. churn

CHURN_SECONDS = 20
CHURN_SEED = "13"
"""Seeds the churn's random lifetimes: a failure can be run again as it happened."""

# ~80 forks a second (os.fork + os._exit: no new interpreter), each child living 0-200 ms so
# that samples catch some of them, reaped without blocking; a second thread starts short
# threads continually. Light enough for 2 shared vCPUs.
CHURN = """
import os, random, sys, threading, time
end = time.monotonic() + float(sys.argv[1])
random.seed(int(sys.argv[2]))  # the same churn on every run

def thread_churn():
    while time.monotonic() < end:
        threading.Thread(target=time.sleep, args=(random.uniform(0, 0.05),)).start()
        time.sleep(0.01)

threading.Thread(target=thread_churn, daemon=True).start()
while time.monotonic() < end:
    life = random.uniform(0, 0.2)
    if os.fork() == 0:
        time.sleep(life)
        os._exit(0)
    while True:
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if done == 0:
            break
    time.sleep(0.01)
time.sleep(600)
"""


@pytest.mark.integration
def test_watch_survives_process_and_thread_churn(spawn: Spawner) -> None:
    root = _spawn(spawn, CHURN, str(CHURN_SECONDS + 60), CHURN_SEED, stderr=subprocess.DEVNULL)
    argv = [*OVERSUB, "watch", str(root.pid), "--interval", "0.1", "--format", "ndjson"]
    out = subprocess.run(
        [*argv, "--duration", str(CHURN_SECONDS)],
        capture_output=True,
        text=True,
        timeout=CHURN_SECONDS + 60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = out.stdout.splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON
    intervals, summary = _check_output(records)
    assert summary["samples"] > 0
    assert summary["target_exited"] is False
    assert len(intervals) >= 2
    # Sanity: the churn was seen: many children, which came and went; threads too.
    children = [set(_pids(r)) - {root.pid} for r in intervals]
    seen = set().union(*children)
    assert len(seen) >= 10, f"only {len(seen)} children seen"
    assert seen - children[-1], "no child was seen to go"
    root_threads = {_pids(r)[root.pid]["threads"] for r in intervals if root.pid in _pids(r)}
    assert len(root_threads) >= 2, root_threads


# --------------------------------------------------------------------------- 2. target killed

# A one-thread root with a child: killing the root leaves the child running (re-parented).
# One thread: a killed multi-thread root hits the bug of
# test_watch_of_a_process_whose_main_thread_exited now and then (leader a zombie, a
# sibling thread still exiting).
SLEEPY = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
time.sleep(600)
"""


def _kill_when_sampled(watcher: subprocess.Popen[bytes], root: subprocess.Popen[bytes]) -> None:
    """SIGKILL the root about 2 s after `watcher` has sampled it."""
    wait_for(lambda: sampling(watcher.pid, root.pid) or watcher.poll() is not None, 30)
    assert watcher.poll() is None, "the watcher ended before the root was killed"
    time.sleep(2)
    os.kill(root.pid, signal.SIGKILL)


@pytest.mark.integration
@pytest.mark.parametrize("reaped", [True, False], ids=["root-reaped", "root-left-zombie"])
def test_watch_ends_with_summary_when_target_is_killed(
    spawn: Spawner, tmp_path: Path, reaped: bool
) -> None:
    root = _spawn(spawn, SLEEPY)
    watcher = _watch(spawn, tmp_path, root.pid, "--interval", "0.2")
    _kill_when_sampled(watcher, root)
    if reaped:
        root.wait(timeout=10)
    code, err = _finished(watcher, tmp_path, 30)
    root.wait(timeout=10)
    assert code == 0, err  # docs/cli.md: watch exits 0 whatever the verdict; the target exited
    assert err == ""
    _intervals, summary = _check_output(ndjson(tmp_path / "out"))
    assert summary["samples"] >= 1
    assert summary["root_pid"] == root.pid
    assert summary["target_exited"] is True
    assert _pids(summary)[root.pid]["exited"] is True  # the root's line agrees


# The main thread exits (pthread_exit) while a second thread keeps working: the thread
# group leader is a zombie, the process lives on.
LEADER_EXITS = """
import ctypes, hashlib, threading, time
def work():
    buf = bytes(1 << 20)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        hashlib.sha256(buf).digest()
threading.Thread(target=work).start()
ctypes.CDLL(None).pthread_exit(None)
"""


@pytest.mark.integration
def test_watch_of_a_process_whose_main_thread_exited(spawn: Spawner) -> None:
    proc = _spawn(spawn, LEADER_EXITS)
    wait_for(lambda: _state(proc.pid) == "Z", 15)
    _intervals, summary = _watch_to_end(str(proc.pid), "--interval", "0.2", "--duration", "1.5")
    assert proc.poll() is None  # it was alive all along
    assert summary["target_exited"] is False
    assert summary["samples"] > 0  # it was watched


@pytest.mark.integration
def test_check_pid_ends_when_target_is_killed(spawn: Spawner, tmp_path: Path) -> None:
    root = _spawn(spawn, SLEEPY)
    report = tmp_path / "report.json"
    argv = [*OVERSUB, "check", "--pid", str(root.pid), "--duration", "10", "--interval", "0.2"]
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        checker = _spawn_argv(spawn, [*argv, "--json", str(report)], out, err)
    _kill_when_sampled(checker, root)
    root.wait(timeout=10)
    code, err_text = _finished(checker, tmp_path, 30)
    assert "Traceback" not in err_text and "error:" not in err_text, err_text
    # docs/guarantees.md: exit 3 for check only when nothing was measured; an idle tree that was
    # measured and then exited is below --fail-on: exit 0.
    assert code == 0, err_text
    doc = json.loads(report.read_text())
    assert doc["target_exited"] is True
    assert doc["exit_status"] == 0
    assert doc["samples"] >= 1
    assert doc["duration_s"] < 10  # ended by the exit, not by --duration


# --------------------------------------------------------------------------- 3. zombies

# Forks a child that exits at once and is never reaped: a zombie in the tree.
ZOMBIE_PARENT = """
import os, time
pid = os.fork()
if pid == 0:
    os._exit(7)
print(pid, flush=True)
time.sleep(600)
"""


@pytest.fixture
def zombie(spawn: Spawner) -> Iterator[tuple[int, int]]:
    """(parent pid, zombie pid)."""
    parent = _spawn(spawn, ZOMBIE_PARENT, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line, "the zombie's parent did not start"
    pid = int(line)
    wait_for(lambda: _state(pid) == "Z", 15)
    yield parent.pid, pid


@pytest.mark.integration
def test_watch_with_zombie_in_tree(zombie: tuple[int, int]) -> None:
    parent, pid = zombie
    intervals, summary = _watch_to_end(str(parent), "--interval", "0.2", "--duration", "1.5")
    assert intervals
    assert all(pid in _pids(r) and parent in _pids(r) for r in intervals)
    assert summary["samples"] > 0 and summary["target_exited"] is False
    assert summary["verdict"] == "ok"
    assert pid in {p["pid"] for p in summary["processes"]}


@pytest.mark.integration
def test_watch_of_a_zombie_target_ends_as_exited(zombie: tuple[int, int]) -> None:
    _parent, pid = zombie
    _intervals, summary = _watch_to_end(str(pid), "--interval", "0.2", "--format", "ndjson")
    assert summary["target_exited"] is True
    assert summary["root_pid"] == pid


@pytest.mark.integration
def test_check_pid_of_a_zombie_target_is_exit_3(zombie: tuple[int, int], tmp_path: Path) -> None:
    """docs/guarantees.md: exit 3 when the target ended before a full interval was measured."""
    _parent, pid = zombie
    report = tmp_path / "report.json"
    out = subprocess.run(
        [*OVERSUB, "check", "--pid", str(pid), "--duration", "5", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    doc = json.loads(report.read_text())
    assert (doc["target_exited"], doc["samples"], doc["exit_status"]) == (True, 0, 3)


# --------------------------------------------------------------------------- 4. orphan

# root -> mid -> busy grandchild; mid exits once GO exists, so the grandchild is re-parented
# (to init or a subreaper) while it keeps working. tests/system/test_watch_real.py checks the
# `orphan` rule; this checks, in the ndjson stream, that the grandchild stays counted.
ORPHANING = """
import hashlib, os, sys, time
go = sys.argv[1]
mid = os.fork()
if mid == 0:
    grand = os.fork()
    if grand == 0:
        buf = bytes(1 << 20)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            hashlib.sha256(buf).digest()
        os._exit(0)
    print(os.getpid(), grand, flush=True)
    while not os.path.exists(go):
        time.sleep(0.02)
    os._exit(0)
os.waitpid(mid, 0)
time.sleep(600)
"""


@pytest.mark.integration
def test_watch_keeps_counting_reparented_grandchild(spawn: Spawner, tmp_path: Path) -> None:
    go = tmp_path / "go"
    root = _spawn(spawn, ORPHANING, str(go), stdout=subprocess.PIPE)
    assert root.stdout is not None
    mid, grand = (int(x) for x in root.stdout.readline().split())
    watcher = _watch(spawn, tmp_path, root.pid, "--interval", "0.25", "--duration", "6")

    def seen_under_mid() -> bool:
        records = ndjson(tmp_path / "out")
        return watcher.poll() is not None or any(
            _pids(r).get(grand, {}).get("ppid") == mid for r in records
        )

    wait_for(seen_under_mid, 30)
    go.touch()
    wait_for(lambda: parent_of(grand) not in (mid, None), 15)
    code, err = _finished(watcher, tmp_path, 60)
    assert code == 0, err
    assert err == ""
    intervals, summary = _check_output(ndjson(tmp_path / "out"))
    ppids = [_pids(r).get(grand, {}).get("ppid") for r in intervals]
    assert mid in ppids, "the grandchild was never seen under its first parent"
    after = ppids[ppids.index(mid) :]
    reparented = [p for p in after if p not in (mid, None)]
    assert reparented, f"no interval after the re-parenting: {ppids}"
    # Once re-parented, it is in every later interval, and in the last one.
    assert None not in after[after.index(reparented[0]) :], ppids
    assert ppids[-1] not in (mid, None)
    proc = {p["pid"]: p for p in summary["processes"]}[grand]
    assert proc["exited"] is False
    assert proc["cpu_percent"] > 5  # busy: wide margin on a shared machine


# ------------------------------------------------ issue 10: namespaces, files, streams


def _unshare_works() -> str | None:
    """Why a new PID namespace cannot be made here (None: it can)."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "--fork", "--pid", "true"], capture_output=True, text=True, timeout=30
    )
    return None if probe.returncode == 0 else f"no PID namespaces here: {probe.stderr.strip()}"


@pytest.mark.integration
@pytest.mark.parametrize(
    "argv", [["check", "--", "sleep", "600"], ["watch", "1", "--once"], ["cpus", "--pid", "1"]]
)
def test_pid_namespace_without_its_own_proc_is_refused(argv: list[str]) -> None:
    # `unshare -fp oversub check -- CMD` sampled host pid 2 (kthreadd) instead of CMD and
    # passed with exit 0; `watch 1` there watched the host's init.
    why = _unshare_works()
    if why is not None:
        pytest.skip(why)
    run = subprocess.run(
        ["unshare", "--fork", "--pid", *OVERSUB, *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 3, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("oversub: error: /proc belongs to another PID namespace"), line
    assert run.stdout == ""


@pytest.mark.integration
def test_report_write_that_fails_keeps_the_previous_report(tmp_path: Path) -> None:
    # On a full filesystem --json/--junit/--markdown left empty files in place of the
    # previous reports. Here the file size limit refuses every write past 64 bytes.
    old = {"r.json": "previous json\n", "r.xml": "previous junit\n", "r.md": "previous md\n"}
    reports = ["--json", "r.json", "--junit", "r.xml", "--markdown", "r.md"]
    for name, text in old.items():
        (tmp_path / name).write_text(text)

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    run = subprocess.run(
        [*OVERSUB, "check", "-M", "1", "-T", "1", *reports],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        preexec_fn=small_files,
    )
    assert run.returncode == 3, run.stderr
    lines = run.stderr.splitlines()
    assert any(x.startswith("oversub check: error: cannot write the --json") for x in lines), (
        run.stderr
    )
    assert lines[-1].endswith("but a file could not be written (above), exit 3"), run.stderr
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old  # no temporary left


@pytest.mark.integration
@pytest.mark.parametrize("verdict", ["ok", "oversubscribed"])
def test_unwritable_stderr_keeps_exit_status_and_reports(tmp_path: Path, verdict: str) -> None:
    # With 2>/dev/full every outcome became exit 1 and the report files were not written.
    threads = "1" if verdict == "ok" else "8"
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            [*OVERSUB, "check", "-M", "2", "-T", threads, "--cpus", "2", "--json", "r.json"],
            stdout=subprocess.PIPE,
            stderr=full,
            timeout=60,
            cwd=tmp_path,
        )
    assert run.returncode == (0 if verdict == "ok" else 1)
    assert json.loads((tmp_path / "r.json").read_text())["exit_status"] == run.returncode


CHATTY = """
import sys, time
end = time.monotonic() + 1.5
while time.monotonic() < end:
    sys.stderr.write("chatter " * 100 + "\\n")
"""


@pytest.mark.integration
def test_stderr_pipe_closed_under_a_chatty_command_keeps_exit_status(tmp_path: Path) -> None:
    # `oversub check ... -- CMD 2>&1 | true`: the reader is gone at once, CMD dies writing
    # to it (its failure is exit 3, its status in the report); oversub's own lines are lost.
    script = (
        f"{shlex.join(OVERSUB)} check --interval 0.2 --warmup 0 --json r.json -- "
        f"{shlex.join([sys.executable, '-c', CHATTY])} 2>&1 | true; "
        "echo ${PIPESTATUS[0]} > status"
    )
    subprocess.run(["bash", "-c", script], timeout=60, cwd=tmp_path, check=True)
    status = int((tmp_path / "status").read_text())
    report = json.loads((tmp_path / "r.json").read_text())
    assert status == report["exit_status"] == 3
    assert report["command_status"] != 0


@pytest.mark.integration
def test_duration_ends_a_run_in_the_middle_of_an_interval(spawn: Spawner) -> None:
    # `watch PID --interval 5 --duration 1` took 5 s; `--interval 1e308` never returned.
    root = _spawn(spawn, SLEEPY)
    began = time.monotonic()
    _intervals, summary = _watch_to_end(
        str(root.pid), "--interval", "60", "--duration", "0.5", "--format", "ndjson"
    )
    assert time.monotonic() - began < 30  # far below the 60 s interval: no timing margin here
    assert summary["samples"] == 1 and summary["duration_s"] < 5
