"""A pid that vanishes between the /proc listing and the read of each of its files.

`fault_tree.VanishingPid` makes one process of a small real tree "vanish" at its first
access of one file kind (ENOENT or ESRCH, as the kernel says for a gone pid): the sampler
must never raise after the first sample, must keep the other processes whole, and the pure
analysis must take the partial samples as they come.
"""

from __future__ import annotations

import errno
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.analysis.plans import synthetic_budget
from oversub.analysis.rates import counted, interval
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.core import errors
from oversub.core.samples import TreeSample
from oversub.core.targets import Target
from oversub.core.thresholds import Thresholds
from oversub.probe.sampler import TreeSampler
from oversub.run.session import SessionOptions, follow
from oversub.run.sources import OneSource
from tests.support.fault_tree import KINDS, VanishingPid

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


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


def _sampler(root: int, fault: VanishingPid | None = None) -> TreeSampler:
    # Each sample 10 s after the previous: maps and cmdline are due again on every sample
    # for a process that ran, and the victim has no CPU clock once armed (as a gone
    # process), so its files are read on a later sample although this tree is idle.
    ticks = itertools.count(0.0, 10.0)
    cpu_clock = fault.cpu_clock if fault is not None else None
    return TreeSampler(root, clock=lambda: next(ticks), cpu_clock=cpu_clock)


def _analyse(samples: list[TreeSample], target_exited: bool) -> None:
    """The pure analysis must take partial samples as they come."""
    th = Thresholds()
    run = RunSummary()
    for prev, curr in itertools.pairwise(samples):
        iv = counted(interval(prev, curr, 2), th)
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


def _expect_vanished(
    samples: list[TreeSample], tree: dict[str, int], who: str, kind: str, at: int
) -> None:
    """`tree[who]` vanished while sample `at` read its `kind`: partial there, absent after,
    the other processes whole throughout, and the analysis takes it all."""
    victim = tree[who]
    _expect_partial(samples[at], victim, kind, first=at == 0)
    for later in samples[at + 1 :]:
        assert victim not in later.processes
    others = [pid for label, pid in tree.items() if label != who]
    for sample in samples:
        _expect_bystanders(sample, others)
    _analyse(samples, target_exited=who == "root")


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
    with _sampler(small_tree["root"], fault) as s:
        samples = [s.sample() for _ in range(3)]
    monkeypatch.undo()
    assert fault.fired, f"the {kind} {phase} of pid {victim} was never attempted"
    _expect_vanished(samples, small_tree, "gomp", kind, at=0)


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
    with _sampler(root, fault) as s:
        if kind == "stat":
            with pytest.raises(errors.NoSuchProcess, match=f"no process with pid {root}"):
                s.sample()
            return
        samples = [s.sample() for _ in range(3)]
    monkeypatch.undo()
    assert fault.fired
    _expect_vanished(samples, small_tree, "root", kind, at=0)


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

    with TreeSampler(root, cpu_clock=fault.cpu_clock) as s:
        source = OneSource(Target.tree(root), s, synthetic_budget(2), "")
        result = follow(source, SessionOptions(interval=0.1), should_stop=should_stop)
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
    with _sampler(small_tree["root"], fault) as s:
        first = s.sample()
        assert victim in first.processes
        fault.arm()
        samples = [first, s.sample(), s.sample()]
    monkeypatch.undo()
    assert fault.fired, f"the {kind} of pid {victim} was not read on a later sample"
    _expect_vanished(samples, small_tree, who, kind, at=1)


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
