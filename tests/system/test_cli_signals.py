"""Signals and closed pipes against the real CLI: no tree left running, no lost summary.

`check -- CMD` must stop CMD's whole tree whatever ends it: one or two SIGTERMs (a CI
runner that insists), SIGINT twice, SIGHUP (a closed terminal). `watch` must end on SIGTERM
and SIGHUP the way it ends on Ctrl-C: summary on stdout, exit 130. A reader that closes the
pipe early is not an error.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus
from oversub.probe.proctree import descendants, read_ppids
from tests.support.harness import OVERSUB, SLEEPER, Spawner, alive, wait_until

pytestmark = pytest.mark.integration

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
    spawn: Spawner, signals: tuple[signal.Signals, ...]
) -> None:
    argv = [*OVERSUB, "check", "--interval", "0.5", "--warmup", "0"]
    check = spawn(
        [*argv, "--", sys.executable, "-c", COMMAND],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert check.stdout is not None
    line = check.stdout.readline().decode().split()  # CMD's stdout passes through
    assert line[:1] == ["ready"], line
    tree = descendants(check.pid, read_ppids("/")) | {int(pid) for pid in line[1:]}
    spawn.pids |= tree
    assert len(tree) >= 3, tree  # CMD, its child, its setsid child
    assert all(alive(pid) for pid in tree)
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.5)  # the second one lands while the tree is being stopped
        check.send_signal(sig)
    _, err = check.communicate(timeout=60)
    assert check.returncode == ExitStatus.INTERRUPTED, err.decode()
    survivors = sorted(pid for pid in tree if alive(pid))
    assert survivors == [], err.decode()
    assert b"Traceback" not in err


@pytest.fixture
def sleeper(spawn: Spawner) -> subprocess.Popen[bytes]:
    """A quiet process for `watch` to look at."""
    return spawn([sys.executable, "-c", "import time; time.sleep(600)"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_watch_ends_on_signal_with_its_summary(
    spawn: Spawner, sleeper: subprocess.Popen[bytes], sig: signal.Signals
) -> None:
    watch = spawn(
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
    # Ctrl-C is the normal way to leave `watch`: the summary, exit 130, and no error line.
    assert b"error" not in err, err.decode()


def test_watch_ends_soon_after_the_target_exits(spawn: Spawner) -> None:
    target = spawn([sys.executable, "-c", "import time; time.sleep(2)"])
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
    spawn: Spawner, sleeper: subprocess.Popen[bytes]
) -> None:
    # `oversub watch PID | head -n 1`
    watch = spawn(
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


# ------------------------------------------------ issue 10: every path, every moment


def test_stop_signal_while_the_command_starts_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, spawn: Spawner
) -> None:
    # A signal between the fork and the moment check held the child gave "internal error:
    # AssertionError", exit 3, and a command running on in its own session.
    from oversub.analysis.plans import synthetic_budget
    from oversub.cli.check.runners import CheckOptions, check_command
    from oversub.run import runner
    from oversub.run.session import SessionOptions

    real = runner.start_command
    started: list[subprocess.Popen[bytes]] = []

    def start_then_signal(argv: list[str]) -> subprocess.Popen[bytes]:
        proc = real(argv)
        started.append(proc)
        os.kill(os.getpid(), signal.SIGTERM)  # lands before check holds `proc`
        return proc

    monkeypatch.setattr(runner, "start_command", start_then_signal)
    monkeypatch.setattr(os, "environ", spawn.env)
    opts = CheckOptions(session=SessionOptions(interval=0.5), grace=1.0)
    try:
        status = check_command(SLEEPER, synthetic_budget(2), opts, err=io.StringIO())
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert status == ExitStatus.INTERRUPTED
    assert started and started[0].returncode is not None  # stopped and reaped by check
    assert spawn.alive() == set()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_stop_signal_injected_at_the_fork_gives_130_and_leaves_nothing(spawn: Spawner) -> None:
    # The reproduction: strace delivers SIGINT to oversub as its clone() returns.
    inject = "inject=vfork,clone,clone3:signal=SIGINT:when=1"
    argv = ["strace", "-o", os.devnull, "-e", "trace=vfork,clone,clone3", "-e", inject]
    run = subprocess.run(
        [*argv, *OVERSUB, "check", "--", *SLEEPER],
        capture_output=True,
        text=True,
        timeout=60,
        env=spawn.env,
    )
    if "ptrace" in run.stderr and run.returncode != ExitStatus.INTERRUPTED:
        pytest.skip(f"strace cannot trace here: {run.stderr.strip()}")
    assert run.returncode == ExitStatus.INTERRUPTED, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr
    assert spawn.alive() == set()


def _caught(pid: int) -> set[int]:
    """Signals `pid` has handlers for (SigCgt of /proc/PID/status); empty when gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return set()
    mask = int(
        next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16
    )
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signal_during_start_up_gives_130_without_traceback(
    sig: signal.Signals, tmp_path: Path
) -> None:
    # SIGTERM or SIGHUP in the first fraction of a second killed oversub by the signal
    # (143/129); SIGINT during the imports printed a KeyboardInterrupt traceback. The signal
    # is sent the moment oversub's handlers exist: while click and the CLI are imported.
    proc = subprocess.Popen(
        [*OVERSUB, "check", "-M", "1", "-T", "1", "--json", "r.json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        handled = wait_until(lambda: {signal.SIGTERM, signal.SIGHUP} <= _caught(proc.pid), 10)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert handled, "oversub never handled SIGTERM and SIGHUP"
    assert proc.returncode == ExitStatus.INTERRUPTED, err
    assert "Traceback" not in err and "error:" not in err, err


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_stress_stopped_while_it_spawns_gives_130_and_no_worker_traceback(
    sig: str, spawn: Spawner
) -> None:
    # SIGTERM during a spawn printed a worker's EOFError traceback (the root stopped before
    # the worker had read its instructions); SIGHUP killed the root by the signal. strace
    # delivers the signal as each fork of the root returns: the resource tracker's and each
    # worker's.
    for when in (1, 2, 3):
        inject = f"inject=vfork,clone,clone3:signal={sig}:when={when}"
        argv = ["strace", "-o", os.devnull, "-e", "trace=vfork,clone,clone3", "-e", inject]
        run = subprocess.run(
            [*argv, *OVERSUB, "stress", "--procs", "3", "--threads", "0", "--seconds", "60"],
            capture_output=True,
            text=True,
            timeout=60,
            env=spawn.env,
        )
        assert run.returncode == ExitStatus.INTERRUPTED, (when, run.stderr)
        assert "Traceback" not in run.stderr and "EOFError" not in run.stderr, (when, run.stderr)
        assert wait_until(lambda: spawn.alive() == set(), 10), (when, spawn.alive())


def test_sigkill_of_oversub_takes_the_command_with_it(spawn: Spawner) -> None:
    # Nothing of oversub runs after SIGKILL: the kernel ends CMD (PR_SET_PDEATHSIG). What CMD
    # started lives on, re-parented (docs/guarantees.md, Limits): here its sleeping child.
    cmd = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen({SLEEPER!r})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    check = subprocess.Popen(
        [*OVERSUB, "check", "--interval", "0.5", "--", sys.executable, "-c", cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=spawn.env,
    )
    try:
        assert check.stdout is not None
        child = int(check.stdout.readline())
        command = _parent(child)
        check.kill()
        check.wait(timeout=30)
        assert wait_until(lambda: not alive(command), 10), "CMD outlived oversub's SIGKILL"
        assert alive(child)  # the documented remainder
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
        if check.stdout is not None:
            check.stdout.close()


def _parent(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2 :].split()[1])
