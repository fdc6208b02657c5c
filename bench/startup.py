"""Start-up cost of `oversub recommend --procs 4 --format env` (users run it in launch scripts).

Compares, in the same run and interleaved so machine noise hits both alike, the median wall
time of the command against `python -c "import click, psutil"` (the floor for a click tool
that reads processes). Goal: ratio <= 1.2. Also prints which heavy modules the command loads.

    python bench/startup.py [--runs 21]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The console script users run (installed beside this interpreter), else `python -m oversub`.
_SCRIPT = Path(sys.executable).with_name("oversub")
_LAUNCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oversub"]
COMMAND = [*_LAUNCH, "recommend", "--procs", "4", "--format", "env"]
BASELINE = [sys.executable, "-c", "import click, psutil"]
HEAVY = ("rich", "cpuinfo", "psutil")


def _time(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _loaded_heavy_modules() -> list[str]:
    probe = (
        "import sys, runpy; sys.argv = ['oversub', 'recommend', '--procs', '4', '--format', 'env'];"
        "import io, contextlib\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try:\n"
        "        runpy.run_module('oversub', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def _byte_compile() -> None:
    """Compile oversub's modules like an installed package is (pip byte-compiles on install).

    In an editable checkout with PYTHONDONTWRITEBYTECODE set (as on this machine) every run
    would otherwise recompile every module from source, which no installed user pays.
    """
    import compileall

    import oversub

    compileall.compile_dir(str(Path(oversub.__file__).parent), quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    _byte_compile()
    _time(COMMAND)  # warm the page cache and .pyc files once; not counted
    _time(BASELINE)
    cmd_times: list[float] = []
    base_times: list[float] = []
    for _ in range(args.runs):
        cmd_times.append(_time(COMMAND))
        base_times.append(_time(BASELINE))
    cmd, base = statistics.median(cmd_times), statistics.median(base_times)
    heavy = _loaded_heavy_modules()
    print(f"start-up, median of {args.runs} interleaved runs")
    baseline_label = 'python -c "import click, psutil"'
    print(f"  {baseline_label:<48} {base * 1000:7.1f} ms")
    print(f"  {'oversub recommend --procs 4 --format env':<48} {cmd * 1000:7.1f} ms")
    print(f"  ratio {cmd / base:.2f} (goal <= 1.20)")
    print(f"  heavy modules loaded by the command: {', '.join(heavy) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
