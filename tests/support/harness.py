"""The shared test harness (modelled on psutil's tests): the `oversub` command, processes
that are always reaped, waits on conditions, and small readers of /proc.

Test modules import these helpers from here, never from each other; `conftest.py` turns
`Spawner` into the `spawn` fixture. Every process a test starts through `spawn` carries
a marker in its environment, which its descendants inherit: at teardown (also after a
failure or a timeout of pytest-timeout) every process holding the marker is killed,
wherever it was re-parented, and every child is reaped. Waits take a monotonic deadline
and poll a condition; no test sleeps a fixed time to let a process get ready.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

OVERSUB = [sys.executable, "-m", "oversub"]
"""The `oversub` program, as the console script runs it (`oversub.launch`)."""

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
"""A quiet process that lives long enough for any test (the `spawn` fixture reaps it)."""

MARK_VAR = "OVERSUB_TEST_MARK"
"""The environment variable that marks the processes of one test."""

WAIT_S = 30.0
"""Default bound of a wait; a wait that runs out fails the test, it never passes it."""

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = WAIT_S, interval: float = 0.02, what: str = ""
) -> T:
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout`
    seconds of the monotonic clock."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not reached within {timeout:g} s: {what or predicate}")
        time.sleep(interval)


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after comm (field 3 onwards); None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def state(pid: int) -> str | None:
    """The state letter of a process (Z: zombie), None when it is gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    return state(pid) not in (None, "Z", "X")


def parent_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def start_ticks(pid: int) -> int | None:
    """Start time of a live (not zombie) process, None when it is gone."""
    fields = stat_fields(pid)
    return None if not fields or fields[0] in ("Z", "X") else int(fields[19])


def thread_count(pid: int) -> int:
    """Threads of a process now (0 when it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def descendants(pid: int) -> set[int]:
    """Every current descendant of `pid` (not `pid` itself)."""
    from oversub.probe.proctree import descendants as below
    from oversub.probe.proctree import read_ppids

    return below(pid, read_ppids("/"))


def busy_workers(root: int, procs: int, threads: int) -> bool:
    """`oversub stress` under `root` is up: `procs` worker processes run at least `threads`
    busy threads each besides their main thread."""
    ready = [pid for pid in descendants(root) if thread_count(pid) >= threads + 1]
    return len(ready) >= procs


def pin_to_one_cpu() -> None:
    """preexec_fn: run on one CPU of this process's affinity (inherited by the whole tree),
    so verdicts do not depend on how many CPUs the machine has."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def oversub(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 90,
    pin: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `oversub ARGS` to its end; text output captured."""
    return subprocess.run(
        [*OVERSUB, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=pin_to_one_cpu if pin else None,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


class Spawner:
    """The processes one test starts (the `spawn` fixture).

    `spawn(argv, **popen_kwargs)` starts one with the test's marker in its environment (an
    `env=` given is extended with it); `pids` takes more pids to kill; `alive()` lists every
    live process that holds the marker; `reap()` kills them all and waits for the children.
    """

    def __init__(self) -> None:
        self.mark = f"oversub-test-{uuid.uuid4().hex}"
        self.env = {**os.environ, MARK_VAR: self.mark}
        """An environment with the marker, for processes started by other means."""
        self.procs: list[subprocess.Popen[Any]] = []
        self.pids: set[int] = set()

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        kwargs["env"] = {**(kwargs.get("env") or os.environ), MARK_VAR: self.mark}
        proc: subprocess.Popen[Any] = subprocess.Popen(argv, **kwargs)
        self.procs.append(proc)
        return proc

    def alive(self) -> set[int]:
        """Live processes (not zombies) whose environment holds the marker."""
        needle = f"{MARK_VAR}={self.mark}".encode()
        found = set()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{name}/environ").read_bytes() and alive(int(name)):
                    found.add(int(name))
        return found

    def reap(self) -> None:
        """SIGKILL every process of the test, then wait for each child started here."""
        targets = set(self.pids) | self.alive()
        for proc in self.procs:
            targets |= descendants(proc.pid) | {proc.pid}
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=WAIT_S)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


CPU = min(os.sched_getaffinity(0))
"""The CPU `pin_to_one_cpu` pins to."""

ROOT = Path(__file__).resolve().parents[2]
"""The project's root (pyproject.toml, README.md)."""

LAUNCHER_VARS = (
    "LOCAL_WORLD_SIZE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
)
"""Launcher variables a test must unset so that `--procs auto` sees none."""


def stress(procs: int, threads: int, seconds: float) -> list[str]:
    """`oversub stress --mode hash` with M processes x T busy threads for S seconds: independent
    threads, busy all the time (a team waits at its barrier: tests/system/test_stress.py)."""
    sizes = ["--procs", str(procs), "--threads", str(threads), "--seconds", str(seconds)]
    return [*OVERSUB, "stress", *sizes, "--mode", "hash"]


def run_cli(argv: list[str], capsys: Any) -> tuple[int, str, str]:
    """Run the CLI in-process the way the console script does; (exit code, stdout, stderr)."""
    from oversub.cli.app import main

    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _project() -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.10
        import tomli as tomllib
    table: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return dict(table["project"])


PROJECT = _project()
"""pyproject.toml's [project] table."""
VERSION: str = PROJECT["version"]


def run_in_terminal(
    argv: list[str],
    *,
    columns: int,
    rows: int = 24,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
) -> tuple[int, str]:
    """Run ARGV to its end in a terminal of its own: a pseudo-terminal of `columns` x `rows`
    as stdin, stdout, stderr and controlling terminal, as a person's shell would give it.
    `env` is its whole environment (default: this process's). (exit status, or -signal;
    everything it wrote, as the terminal received it)."""
    import fcntl
    import select
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def controlling_terminal() -> None:  # in the child, after setsid (start_new_session)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(os.environ) if env is None else env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=controlling_terminal,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    seen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:  # read until every holder of the terminal has closed it (EIO)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{argv[:4]}: not done within {timeout:g} s; it printed {bytes(seen[-2000:])!r}"
                )
            ready, _, _ = select.select([master], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal has no writer left
                    break
                if not chunk:
                    break
                seen += chunk
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return status, seen.decode("utf-8", "replace")


def can_be_an_argument(text: str) -> bool:
    """A command line reaches a program as bytes, decoded with the filesystem encoding (and
    surrogateescape), so an argument is always text that encodes back: any text but NUL in a
    UTF-8 locale, only Latin-1's 256 characters in a Latin-1 one. A test that makes up an
    argv in process must keep to those, or it tests what no command line can hold."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return "\x00" not in text
