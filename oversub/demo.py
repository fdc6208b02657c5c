"""`make demo`: oversub on this machine, from budget to a red and then a green CI gate.

Every number is computed from this machine's budget N: the oversubscribed run gives each of
M processes N busy threads (what a native pool sized by default does), the fixed run gives
each the recommended floor(N/M). Each step runs the real CLI, so what you see is what a
user gets.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

from oversub.analysis.recommend import threads_for
from oversub.probe.budget import read_budget

SECONDS = 6.0
"""Length of each stress run: warm-up (1 s) plus several 0.5 s intervals."""


def _run(args: list[str]) -> int:
    shown = "oversub " + " ".join(shlex.quote(a) for a in args)
    print(f"\n\033[1m$ {shown}\033[0m" if sys.stdout.isatty() else f"\n$ {shown}", flush=True)
    return subprocess.call([sys.executable, "-m", "oversub", *args])


def main() -> int:
    n = read_budget().vcpus
    procs = min(2, n)
    # A pool sized by default takes all N CPUs; with N = 1 use 2 so that it still oversubscribes.
    bad_threads = max(2, n)
    good_threads = threads_for(n, procs)
    stress = ["stress", "--procs", str(procs), "--seconds", str(SECONDS)]
    gate = ["check", "--interval", "0.5", "--warmup", "1", "--"]

    print(f"oversub demo: this machine's budget is N = {n} vCPUs.")
    _run(["cpus"])
    for m in sorted({1, 2, 4, 2 * n}):
        _run(["recommend", "--procs", str(m), "--format", "env"])
    _run(["recommend", "--procs", str(procs)])

    print(f"\n1) {procs} processes x {bad_threads} busy threads on {n} vCPUs: expect a red gate.")
    red = _run([*gate, sys.executable, "-m", "oversub", *stress, "--threads", str(bad_threads)])
    print(f"\n2) the recommended {good_threads} thread(s) per process: expect a green gate.")
    green = _run([*gate, sys.executable, "-m", "oversub", *stress, "--threads", str(good_threads)])

    print(
        f"\noversub demo: red run exit {red} (1 = oversubscription found), "
        f"green run exit {green} (0 = healthy)."
    )
    return 0 if (red, green) == (1, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
