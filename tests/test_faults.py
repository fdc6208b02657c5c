"""Faults in the watched tree and in /proc: churn, a target killed mid-run, zombies, orphans,
and a pid that vanishes between listing and reading each of its /proc files.

The CLI tests run `python -m oversub` on real process trees started in sessions of their
own (`started` kills each group, even when a test fails); every wait is bounded.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub import errors
from oversub.analysis.rates import interval
from oversub.analysis.recommend import synthetic_budget
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.model import Thresholds
from oversub.probe.sampler import TreeSampler
from oversub.samples import TreeSample
from oversub.session import SessionOptions, run_session
from tests import test_watch_real
from tests.fault_tree import KINDS, VanishingPid, ndjson, sampling
from tests.test_runner import parent_of, wait_for
from tests.test_watch_real import OVERSUB

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

Started = list[subprocess.Popen[bytes]]

started = test_watch_real.started
"""Process groups a test starts, each killed at teardown (the fixture of test_watch_real)."""


def _spawn(started: Started, script: str, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    """A Python tree in a session of its own, killed (whole group) by `started`."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], start_new_session=True, **kw)
    started.append(proc)
    return proc


def _watch(started: Started, tmp_path: Path, pid: int, *flags: str) -> subprocess.Popen[bytes]:
    """`oversub watch PID --format ndjson FLAGS` with stdout and stderr in files."""
    out = (tmp_path / "out").open("wb")
    err = (tmp_path / "err").open("wb")
    with out, err:
        return _spawn_argv(
            started, [*OVERSUB, "watch", str(pid), "--format", "ndjson", *flags], out, err
        )


def _spawn_argv(started: Started, argv: list[str], out: Any, err: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
    started.append(proc)
    return proc


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


def _state(pid: int) -> str | None:
    """State letter of /proc/PID/stat (Z: zombie), None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()[0]


def _pids(record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in record["processes"]}


# --------------------------------------------------------------------------- 1. churn

CHURN_SECONDS = 20

# ~80 forks a second (os.fork + os._exit: no new interpreter), each child living 0-200 ms so
# that samples catch some of them, reaped without blocking; a second thread starts short
# threads continually. Light enough for 2 shared vCPUs.
CHURN = """
import os, random, sys, threading, time
end = time.monotonic() + float(sys.argv[1])

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
def test_watch_survives_process_and_thread_churn(started: Started) -> None:
    root = _spawn(started, CHURN, str(CHURN_SECONDS + 60), stderr=subprocess.DEVNULL)
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
    started: Started, tmp_path: Path, reaped: bool
) -> None:
    root = _spawn(started, SLEEPY)
    watcher = _watch(started, tmp_path, root.pid, "--interval", "0.2")
    _kill_when_sampled(watcher, root)
    if reaped:
        root.wait(timeout=10)
    code, err = _finished(watcher, tmp_path, 30)
    root.wait(timeout=10)
    assert code == 0, err  # README: watch exits 0 whatever the verdict; the target exited
    assert err == ""
    _intervals, summary = _check_output(ndjson(tmp_path / "out"))
    assert summary["samples"] >= 1
    assert summary["root_pid"] == root.pid
    assert summary["target_exited"] is True


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
def test_watch_of_a_process_whose_main_thread_exited(started: Started) -> None:
    proc = _spawn(started, LEADER_EXITS)
    wait_for(lambda: _state(proc.pid) == "Z", 15)
    _intervals, summary = _watch_to_end(str(proc.pid), "--interval", "0.2", "--duration", "1.5")
    assert proc.poll() is None  # it was alive all along
    assert summary["target_exited"] is False
    assert summary["samples"] > 0  # it was watched


@pytest.mark.integration
def test_check_pid_ends_when_target_is_killed(started: Started, tmp_path: Path) -> None:
    root = _spawn(started, SLEEPY)
    report = tmp_path / "report.json"
    argv = [*OVERSUB, "check", "--pid", str(root.pid), "--duration", "10", "--interval", "0.2"]
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        checker = _spawn_argv(started, [*argv, "--json", str(report)], out, err)
    _kill_when_sampled(checker, root)
    root.wait(timeout=10)
    code, err_text = _finished(checker, tmp_path, 30)
    assert "Traceback" not in err_text and "error:" not in err_text, err_text
    # README: exit 3 for check only when nothing was measured; an idle tree that was
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
def zombie(started: Started) -> Iterator[tuple[int, int]]:
    """(parent pid, zombie pid)."""
    parent = _spawn(started, ZOMBIE_PARENT, stdout=subprocess.PIPE)
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
    """README: exit 3 when the target ended before a full interval was measured."""
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
# (to init or a subreaper) while it keeps working. tests/test_watch_real.py checks the
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
def test_watch_keeps_counting_reparented_grandchild(started: Started, tmp_path: Path) -> None:
    go = tmp_path / "go"
    root = _spawn(started, ORPHANING, str(go), stdout=subprocess.PIPE)
    assert root.stdout is not None
    mid, grand = (int(x) for x in root.stdout.readline().split())
    watcher = _watch(started, tmp_path, root.pid, "--interval", "0.25", "--duration", "6")

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


# --------------------------------------------------------------------------- 5. /proc faults

# root (2 threads) -> "gomp" child (maps libgomp, one sleeping thread: the sampler reads its
# /proc/PID/syscall, the fork-hang check) and "plain" child (2 threads). The children
# report "label pid" on the inherited stdout once set up.
SMALL_TREE_CHILD = """
import ctypes, os, sys, threading, time
label = sys.argv[1]
if label == "gomp":
    try:
        ctypes.CDLL("libgomp.so.1")
    except OSError:
        label = "nogomp"
else:
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
os.write(1, f"{label} {os.getpid()}\\n".encode())  # one write: two children share the pipe
time.sleep(600)
"""

SMALL_TREE = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
for label in ("gomp", "plain"):
    subprocess.Popen([sys.executable, "-c", sys.argv[1], label])
time.sleep(600)
"""


@pytest.fixture(scope="module")
def small_tree() -> Iterator[dict[str, int]]:
    """{"root": pid, "gomp": pid, "plain": pid}, shared by the probe fault tests (they only
    read it)."""
    root = subprocess.Popen(
        [sys.executable, "-c", SMALL_TREE, SMALL_TREE_CHILD],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert root.stdout is not None
        pids = {"root": root.pid}
        for _ in range(2):
            label, pid = root.stdout.readline().split()
            pids[label.decode()] = int(pid)
        if "gomp" not in pids:
            pytest.skip("libgomp.so.1 cannot be loaded here")
        yield pids
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait(timeout=10)


def _sampler(root: int) -> TreeSampler:
    # Each sample 10 s after the previous: maps and cmdline are due again on every sample.
    ticks = itertools.count(0.0, 10.0)
    return TreeSampler(root, clock=lambda: next(ticks))


def _analyse(samples: list[TreeSample], target_exited: bool) -> None:
    """The pure analysis must take partial samples as they come."""
    th = Thresholds()
    run = RunSummary()
    for prev, curr in itertools.pairwise(samples):
        iv = interval(prev, curr, 2, th)
        assess(iv, th)
        run.add(iv)
    run.result(synthetic_budget(2), th, target_exited=target_exited)


def _expect_partial(sample: TreeSample, pid: int, kind: str, first: bool) -> None:
    """A vanished process is absent, or present without what it failed to read."""
    proc = sample.processes.get(pid)
    if proc is None:
        return
    assert kind != "stat", "sampled without its stat line"
    if kind in ("task", "status", "schedstat", "task-stat"):
        assert proc.threads == ()
    if kind == "syscall":
        assert proc.wait is None
    if first:  # later, what was read while it lived is kept (cached per identity)
        if kind == "cmdline":
            assert proc.cmdline == ""
        if kind in ("cmdline", "environ"):
            assert proc.thread_env is None
        if kind in ("cmdline", "environ", "maps"):
            assert proc.pools is None


def _expect_bystanders(sample: TreeSample, pids: list[int]) -> None:
    for pid in pids:
        assert pid in sample.processes, f"bystander {pid} lost"
        assert sample.processes[pid].threads, f"bystander {pid} lost its threads"


FAULTS = [(kind, phase) for kind in KINDS for phase in ("open", "read")]
ERRORS = [FileNotFoundError, ProcessLookupError]


def _ids(value: object) -> str:
    return value.__name__ if isinstance(value, type) else str(value)


@pytest.mark.integration
@pytest.mark.parametrize("exc", ERRORS, ids=_ids)
@pytest.mark.parametrize(("kind", "phase"), FAULTS, ids=[f"{k}-{p}" for k, p in FAULTS])
def test_child_vanishing_on_first_sample(
    small_tree: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    phase: str,
    exc: type[OSError],
) -> None:
    victim = small_tree["gomp"]
    fault = VanishingPid(victim, kind, phase, exc).install(monkeypatch)
    fault.arm()
    with _sampler(small_tree["root"]) as s:
        samples = [s.sample() for _ in range(3)]
    monkeypatch.undo()
    assert fault.fired, f"the {kind} {phase} of pid {victim} was never attempted"
    _expect_partial(samples[0], victim, kind, first=True)
    for later in samples[1:]:
        assert victim not in later.processes
    for sample in samples:
        _expect_bystanders(sample, [small_tree["root"], small_tree["plain"]])
    _analyse(samples, target_exited=False)


@pytest.mark.integration
@pytest.mark.parametrize("exc", ERRORS, ids=_ids)
@pytest.mark.parametrize(
    ("kind", "phase"),
    [f for f in FAULTS if f[0] != "syscall"],  # read only for a one-thread OpenMP process
    ids=[f"{k}-{p}" for k, p in FAULTS if k != "syscall"],
)
def test_root_vanishing_on_first_sample(
    small_tree: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    phase: str,
    exc: type[OSError],
) -> None:
    """Gone before its stat line was read: NoSuchProcess, as for a wrong pid. Gone after it:
    the first sample has the tree without (or with a partial) root, and the run ends as
    "target exited" on the next sample, without an error."""
    root = small_tree["root"]
    fault = VanishingPid(root, kind, phase, exc).install(monkeypatch)
    fault.arm()
    with _sampler(root) as s:
        if kind == "stat":
            with pytest.raises(errors.NoSuchProcess, match=f"no process with pid {root}"):
                s.sample()
            return
        samples = [s.sample() for _ in range(3)]
    monkeypatch.undo()
    assert fault.fired
    _expect_partial(samples[0], root, kind, first=True)
    for later in samples[1:]:
        assert root not in later.processes
    for sample in samples:
        _expect_bystanders(sample, [small_tree["gomp"], small_tree["plain"]])
    _analyse(samples, target_exited=True)


@pytest.mark.integration
def test_session_root_reaped_while_its_threads_are_read(
    small_tree: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `watch` does when the target is killed and reaped: pid_gone says gone (should_stop),
    the last sample finds the root's stat line, then the root is reaped before its threads
    are read."""
    root = small_tree["root"]
    # schedstat: the first file read per thread (status only for threads that ran).
    fault = VanishingPid(root, "schedstat", "any", FileNotFoundError).install(monkeypatch)

    def should_stop() -> bool:
        fault.arm()  # the first call, before any sleep: the next sample is the last one
        return True

    with TreeSampler(root) as s:
        result = run_session(
            s, synthetic_budget(2), SessionOptions(interval=0.1), should_stop=should_stop
        )
    monkeypatch.undo()
    assert fault.fired
    assert result.summary.target_exited is True


# environ is read once per process; syscall only for a one-thread OpenMP process (gomp).
# A thread that has not run since the last sample (every thread of this idle tree) gets its
# state from task/TID/stat instead of status, so later samples read task-stat, not status.
LATER_KINDS = [kind for kind in KINDS if kind not in ("environ", "status")] + ["task-stat"]
LATER = [(who, kind) for who in ("gomp", "root") for kind in LATER_KINDS]
LATER = [(who, kind) for who, kind in LATER if (who, kind) != ("root", "syscall")]


@pytest.mark.integration
@pytest.mark.parametrize("exc", ERRORS, ids=_ids)
@pytest.mark.parametrize(("who", "kind"), LATER, ids=[f"{w}-{k}" for w, k in LATER])
def test_vanishing_on_a_later_sample(
    small_tree: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    who: str,
    kind: str,
    exc: type[OSError],
) -> None:
    """Per-thread files are held open by then: their read (pread) is what fails."""
    victim = small_tree[who]
    fault = VanishingPid(victim, kind, "any", exc).install(monkeypatch)
    with _sampler(small_tree["root"]) as s:
        first = s.sample()
        assert victim in first.processes
        fault.arm()
        samples = [first, s.sample(), s.sample()]
    monkeypatch.undo()
    assert fault.fired, f"the {kind} of pid {victim} was not read on a later sample"
    _expect_partial(samples[1], victim, kind, first=False)
    assert victim not in samples[2].processes
    others = [pid for label, pid in small_tree.items() if label != who]
    for sample in samples:
        _expect_bystanders(sample, others)
    _analyse(samples, target_exited=who == "root")


@pytest.mark.integration
@pytest.mark.parametrize("exc", ERRORS, ids=_ids)
@pytest.mark.parametrize("path", ["/proc/stat", "/proc/pressure/cpu"])
def test_host_files_unreadable(
    small_tree: dict[str, int], monkeypatch: pytest.MonkeyPatch, path: str, exc: type[OSError]
) -> None:
    real_open = os.open
    failed: list[str] = []

    def failing_open(p: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if os.fspath(p) == path:
            failed.append(path)
            code = errno.ENOENT if exc is FileNotFoundError else errno.ESRCH
            raise exc(code, os.strerror(code), path)
        return real_open(p, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", failing_open)
    with _sampler(small_tree["root"]) as s:
        samples = [s.sample() for _ in range(2)]
    monkeypatch.undo()
    assert failed
    for sample in samples:
        if path == "/proc/stat":
            assert sample.host.busy_ns is None and sample.host.steal_ns is None
        else:
            assert sample.host.psi_some_us is None and "psi" in sample.unavailable
        _expect_bystanders(sample, list(small_tree.values()))
    _analyse(samples, target_exited=False)
