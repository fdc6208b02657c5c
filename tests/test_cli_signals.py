"""Signals and closed pipes against the real CLI: no tree left running, no lost summary.

`check -- CMD` must stop CMD's whole tree whatever ends it: one or two SIGTERMs (a CI
runner that insists), SIGINT twice, SIGHUP (a closed terminal). `watch` must end on SIGTERM
and SIGHUP the way it ends on Ctrl-C: summary on stdout, exit 130. A reader that closes the
pipe early is not an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from oversub.errors import ExitStatus
from oversub.probe.proctree import descendants, read_ppids

pytestmark = pytest.mark.integration

OVERSUB = [sys.executable, "-m", "oversub"]

# A process that ignores SIGTERM (only SIGKILL ends it) and sleeps.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"

# CMD: ignores SIGTERM, starts a stubborn child and a stubborn child in a session of its own
# (setsid: out of CMD's process group), then says which pids it made.
COMMAND = f"""
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", {STUBBORN!r}])
escaped = subprocess.Popen([sys.executable, "-c", {STUBBORN!r}], start_new_session=True)
print("ready", child.pid, escaped.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in (b"Z", b"X")


class Started:
    """Processes a test starts, and every pid of their trees it has seen."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: set[int] = set()

    def popen(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = subprocess.Popen(argv, **kwargs)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc


@pytest.fixture
def started() -> Iterator[Started]:
    """Kills every process (and remembered tree member) a test started, even on failure."""
    record = Started()
    try:
        yield record
    finally:
        for proc in record.procs:
            record.pids |= descendants(proc.pid, read_ppids("/")) | {proc.pid}
        for pid in record.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for proc in record.procs:
            proc.wait(timeout=30)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.mark.parametrize(
    "signals",
    [
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGHUP,),
        (signal.SIGHUP, signal.SIGTERM),
    ],
    ids=lambda sigs: "-".join(signal.Signals(s).name for s in sigs),
)
def test_check_stops_the_whole_tree_whatever_signals_arrive(
    started: Started, signals: tuple[signal.Signals, ...]
) -> None:
    argv = [*OVERSUB, "check", "--interval", "0.5", "--warmup", "0"]
    check = started.popen(
        [*argv, "--", sys.executable, "-c", COMMAND],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert check.stdout is not None
    line = check.stdout.readline().decode().split()  # CMD's stdout passes through
    assert line[:1] == ["ready"], line
    tree = descendants(check.pid, read_ppids("/")) | {int(pid) for pid in line[1:]}
    started.pids |= tree
    assert len(tree) >= 3, tree  # CMD, its child, its setsid child
    assert all(_alive(pid) for pid in tree)
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.5)  # the second one lands while the tree is being stopped
        check.send_signal(sig)
    _, err = check.communicate(timeout=60)
    assert check.returncode == ExitStatus.INTERRUPTED, err.decode()
    survivors = sorted(pid for pid in tree if _alive(pid))
    assert survivors == [], err.decode()
    assert b"Traceback" not in err


@pytest.fixture
def sleeper(started: Started) -> subprocess.Popen[bytes]:
    """A quiet process for `watch` to look at."""
    return started.popen([sys.executable, "-c", "import time; time.sleep(600)"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_watch_ends_on_signal_with_its_summary(
    started: Started, sleeper: subprocess.Popen[bytes], sig: signal.Signals
) -> None:
    watch = started.popen(
        [*OVERSUB, "watch", str(sleeper.pid), "--interval", "0.2", "--format", "ndjson"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert watch.stdout is not None
    first = json.loads(watch.stdout.readline())  # sampling has started
    assert first["type"] == "interval"
    watch.send_signal(sig)
    out, err = watch.communicate(timeout=60)
    assert watch.returncode == ExitStatus.INTERRUPTED, err.decode()
    records = [json.loads(x) for x in out.splitlines()]
    assert records and records[-1]["type"] == "summary"
    assert records[-1]["root_pid"] == sleeper.pid


def test_watch_ends_soon_after_the_target_exits(started: Started) -> None:
    target = started.popen([sys.executable, "-c", "import time; time.sleep(2)"])
    # The interval is far longer than the target lives: watch must not wait it out (the
    # target stays a zombie of this test until reaped, which counts as gone).
    watch = subprocess.run(
        [*OVERSUB, "watch", str(target.pid), "--interval", "120", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert watch.returncode == ExitStatus.OK, watch.stderr
    assert json.loads(watch.stdout)["target_exited"] is True


def test_watch_piped_to_a_reader_that_leaves_exits_0(
    started: Started, sleeper: subprocess.Popen[bytes]
) -> None:
    # `oversub watch PID | head -n 1`
    watch = started.popen(
        [*OVERSUB, "watch", str(sleeper.pid), "--interval", "0.2", "--format", "ndjson"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert watch.stdout is not None and watch.stderr is not None
    assert json.loads(watch.stdout.readline())["type"] == "interval"
    watch.stdout.close()  # the reader leaves; the next interval's write gets EPIPE
    assert watch.wait(timeout=60) == ExitStatus.OK
    err = watch.stderr.read()
    assert b"Traceback" not in err and b"Exception ignored" not in err, err
