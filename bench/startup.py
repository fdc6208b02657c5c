"""Start-up cost of short oversub commands (users run `recommend` in launch scripts).

Times, in rounds with a rotated order so machine noise hits all alike, the wall time of

  `oversub recommend --procs 4 --format env`
  `oversub cpus --format json`
  `oversub --help`

against `python -c "import click, psutil"` (the floor for a click tool that reads
processes). Each figure is the median; each ratio the median of the per-round ratios to the
floor of the same round. Goal: every ratio <= 1.2. Also lists which heavy modules (rich,
py-cpuinfo, psutil, importlib.metadata) each command imports.

oversub's modules are byte-compiled first, as pip does on install: in an editable checkout
with PYTHONDONTWRITEBYTECODE set (as on the benchmark machine) every run would otherwise
recompile every module from source, which no installed user pays.

    python bench/startup.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GOAL = 1.2

# The console script users run (installed beside this interpreter), else `python -m oversub`.
_SCRIPT = Path(sys.executable).with_name("oversub")
_LAUNCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oversub"]
COMMANDS = (
    ("recommend", "--procs", "4", "--format", "env"),
    ("cpus", "--format", "json"),
    ("--help",),
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


def _time(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _loaded_heavy_modules(args: tuple[str, ...]) -> tuple[str, ...]:
    probe = (
        "import contextlib, io, runpy, sys\n"
        f"sys.argv = ['oversub', *{list(args)!r}]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        runpy.run_module('oversub', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return tuple(m for m in out.stdout.strip().split(",") if m)


def byte_compile() -> None:
    """Compile oversub's modules like an installed package is (pip byte-compiles on install)."""
    import compileall

    import oversub

    compileall.compile_dir(str(Path(oversub.__file__).parent), quiet=1)


def run(rounds: int) -> StartupResult:
    byte_compile()
    argvs = [BASELINE, *([*_LAUNCH, *args] for args in COMMANDS)]
    for argv in argvs:  # warm the page cache once; not counted
        _time(argv)
    times: list[list[float]] = [[] for _ in argvs]
    ratios: list[list[float]] = [[] for _ in argvs]
    for i in range(rounds):
        k = i % len(argvs)
        this_round = [0.0] * len(argvs)
        for j in [*range(k, len(argvs)), *range(k)]:
            this_round[j] = _time(argvs[j])
        for j, seconds in enumerate(this_round):
            times[j].append(seconds)
            ratios[j].append(seconds / this_round[0])
    rows = [Row(BASELINE_LABEL, statistics.median(times[0]) * 1000, None, ())]
    for j, args in enumerate(COMMANDS, start=1):
        rows.append(
            Row(
                "oversub " + " ".join(args),
                statistics.median(times[j]) * 1000,
                statistics.median(ratios[j]),
                _loaded_heavy_modules(args),
            )
        )
    return StartupResult(rounds, tuple(rows))


def format_text(r: StartupResult) -> str:
    lines = [f"start-up, median of {r.rounds} interleaved rounds"]
    for row in r.rows:
        line = f"  {row.label:<42} {row.median_ms:7.1f} ms"
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
