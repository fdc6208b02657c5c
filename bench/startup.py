"""Start-up cost of short commands as users type them (and launch scripts run them).

Times, in rounds with a rotated order so machine noise hits all alike, the wall time of

  `oversub recommend --procs 4`               to a pipe, and to a terminal (a pty)
  `oversub recommend --procs 4 --format env`  to a pipe (launch scripts: eval "$(...)")
  `oversub cpus`                              to a pipe, and to a terminal
  `oversub cpus --format json`                to a pipe
  `oversub --help`                            to a pipe

against `python -c "import click, psutil"` (the floor for a click tool that reads
processes). Each figure is the median; each ratio the median of the per-round ratios to the
floor of the same round. Goal: every ratio <= 1.2. Also lists which heavy modules (rich,
py-cpuinfo, psutil, importlib.metadata, prometheus_client) each command imports, read from
`sys.modules` by a hook on `os._exit` (oversub leaves through it: nothing after it runs),
with stdout as in the timed row; a probe that reports nothing is an error, never "none".

oversub's modules are byte-compiled first, as pip does on install: in an editable checkout
with PYTHONDONTWRITEBYTECODE set (as on the benchmark machine) every run would otherwise
recompile every module from source, which no installed user pays.

    python bench/startup.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import statistics
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GOAL = 1.2

# The console script users run (installed beside this interpreter), else `python -m oversub`.
_SCRIPT = Path(sys.executable).with_name("oversub")
_LAUNCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oversub"]


@dataclass(frozen=True)
class Command:
    args: tuple[str, ...]
    terminal: bool = False
    """stdout is a terminal (a pty of 80 x 24, TERM=xterm-256color), else a pipe."""

    @property
    def label(self) -> str:
        return "oversub " + " ".join(self.args) + (", to a terminal" if self.terminal else "")


COMMANDS = (
    Command(("recommend", "--procs", "4")),
    Command(("recommend", "--procs", "4"), terminal=True),
    Command(("recommend", "--procs", "4", "--format", "env")),
    Command(("cpus",)),
    Command(("cpus",), terminal=True),
    Command(("cpus", "--format", "json")),
    Command(("--help",)),
)
BASELINE = [sys.executable, "-c", "import click, psutil"]
BASELINE_LABEL = 'python -c "import click, psutil"'
HEAVY = ("rich", "cpuinfo", "psutil", "importlib.metadata", "prometheus_client")
"""Costly to import, so never on these commands' path (importlib.metadata: --version only)."""


@dataclass(frozen=True)
class Row:
    label: str
    median_ms: float
    ratio: float | None
    """Median of per-round ratios to the floor (None for the floor itself)."""
    heavy: tuple[str, ...]
    """Heavy modules the command imports."""

    @property
    def passed(self) -> bool:
        return self.ratio is not None and self.ratio <= GOAL


@dataclass(frozen=True)
class StartupResult:
    rounds: int
    rows: tuple[Row, ...]
    """The floor first, then one per command."""


class Terminal:
    """A pty of 80 x 24 whose output is read and dropped as it comes (a full pty would
    block the command): the `stdout` of the rows that go to a terminal."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.master, 65536):
                pass

    def close(self) -> None:
        os.close(self.slave)  # the reader sees EOF (EIO) and ends
        self._reader.join(timeout=5)
        os.close(self.master)


@contextlib.contextmanager
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    try:
        yield term
    finally:
        term.close()


def _env(on_terminal: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    if on_terminal:
        env["TERM"] = "xterm-256color"
    return env


def _run(argv: list[str], stdout: int, env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> None:
    subprocess.run(
        argv, check=True, stdout=stdout, stderr=subprocess.DEVNULL, env=env, pass_fds=pass_fds
    )


def _time(argv: list[str], stdout: int, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    _run(argv, stdout, env)
    return time.perf_counter() - t0


# argv: the write end of a pipe, the module names, then oversub's arguments.
_PROBE = r"""
import os, runpy, sys
fd, names = int(sys.argv[1]), sys.argv[2].split(",")
sys.argv = ["oversub", *sys.argv[3:]]
said = []
def say():
    if not said:
        said.append(True)
        loaded = ",".join(name for name in names if name in sys.modules)
        os.write(fd, f"loaded:{loaded}\n".encode())
real_exit = os._exit
def report_then_exit(code):
    say()
    real_exit(code)
os._exit = report_then_exit  # oversub leaves through os._exit: no code after it would run
try:
    runpy.run_module("oversub", run_name="__main__", alter_sys=True)
finally:
    say()
"""


def loaded_modules(
    args: tuple[str, ...], names: tuple[str, ...] = HEAVY, stdout: int | None = None
) -> tuple[str, ...]:
    """Which of `names` `oversub ARGS` has imported when it exits (stdout: a pipe unless
    given). Raises RuntimeError when the probe reports nothing: a probe that cannot run must
    not read as "none imported"."""
    read_end, write_end = os.pipe()
    try:
        argv = [sys.executable, "-c", _PROBE, str(write_end), ",".join(names), *args]
        on_terminal = stdout is not None
        _run(
            argv,
            stdout if stdout is not None else subprocess.PIPE,
            _env(on_terminal),
            pass_fds=(write_end,),
        )
        os.close(write_end)
        write_end = -1
        chunks = []
        while chunk := os.read(read_end, 4096):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    said = b"".join(chunks).decode()
    if not said.startswith("loaded:"):
        raise RuntimeError(f"the module probe of `oversub {' '.join(args)}` reported nothing")
    return tuple(name for name in said[len("loaded:") :].strip().split(",") if name)


def byte_compile() -> None:
    """Compile oversub's modules like an installed package is (pip byte-compiles on install)."""
    import compileall

    import oversub

    compileall.compile_dir(str(Path(oversub.__file__).parent), quiet=1)


def run(rounds: int) -> StartupResult:
    byte_compile()
    with terminal() as term:
        runs = [(BASELINE, subprocess.PIPE, _env(False))]
        for c in COMMANDS:
            stdout = term.slave if c.terminal else subprocess.PIPE
            runs.append(([*_LAUNCH, *c.args], stdout, _env(c.terminal)))
        for argv, stdout, env in runs:  # warm the page cache once; not counted
            _time(argv, stdout, env)
        times: list[list[float]] = [[] for _ in runs]
        ratios: list[list[float]] = [[] for _ in runs]
        for i in range(rounds):
            k = i % len(runs)
            this_round = [0.0] * len(runs)
            for j in [*range(k, len(runs)), *range(k)]:
                this_round[j] = _time(*runs[j])
            for j, seconds in enumerate(this_round):
                times[j].append(seconds)
                ratios[j].append(seconds / this_round[0])
        rows = [Row(BASELINE_LABEL, statistics.median(times[0]) * 1000, None, ())]
        for j, c in enumerate(COMMANDS, start=1):
            heavy = loaded_modules(c.args, stdout=term.slave if c.terminal else None)
            rows.append(
                Row(
                    c.label,
                    statistics.median(times[j]) * 1000,
                    statistics.median(ratios[j]),
                    heavy,
                )
            )
    return StartupResult(rounds, tuple(rows))


def format_text(r: StartupResult) -> str:
    lines = [f"start-up, median of {r.rounds} interleaved rounds"]
    for row in r.rows:
        line = f"  {row.label:<58} {row.median_ms:7.1f} ms"
        if row.ratio is not None:
            verdict = "PASS" if row.passed else "MISS"
            line += f"  x{row.ratio:5.2f} (goal <= {GOAL}: {verdict})"
            line += f"  heavy modules: {', '.join(row.heavy) or 'none'}"
        lines.append(line)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    print(format_text(run(args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
