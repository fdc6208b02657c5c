"""`oversub tune`'s own cost per trial: start, sampling, stopping the tree, against the bare CMD.

The command is `python -c "import time; time.sleep(S)"`. Bare: started with subprocess and
waited for, wall time from before Popen to after wait. Under tune: `oversub tune --runs R
--warmup 0 -- CMD`, each trial's `seconds` from the JSON (oversub's wall time of the trial:
environment set, command started under the subreaper, sampled each second with check's
sampler and verdict, its tree stopped and reaped). Bare runs and tune runs alternate; the
overhead is the median trial minus the median bare run, as a share of the trial.

    python bench/tune_cost.py [--seconds 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

GOAL_PCT = 2.0
"""Target: tune's own cost is at most 2 % of a 10 s trial."""


@dataclass(frozen=True)
class TuneCost:
    seconds: float
    bare_s: list[float]
    trial_s: list[float]

    @property
    def overhead_s(self) -> float:
        return statistics.median(self.trial_s) - statistics.median(self.bare_s)

    @property
    def overhead_pct(self) -> float:
        return 100.0 * self.overhead_s / statistics.median(self.bare_s)


def _command(seconds: float) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds})"]


def _bare(seconds: float) -> float:
    start = time.monotonic()
    subprocess.run(_command(seconds), check=True)
    return time.monotonic() - start


def _tuned(seconds: float, runs: int) -> list[float]:
    argv = [sys.executable, "-m", "oversub", "tune", "--max-trials", "2", "--warmup", "0"]
    argv += ["--runs", str(runs), "--budget", "1h", "--format", "json", "--", *_command(seconds)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [t["seconds"] for t in json.loads(done.stdout)["trials"]]


def run(seconds: float, runs: int) -> TuneCost:
    bare: list[float] = []
    trials: list[float] = []
    bare.append(_bare(seconds))
    trials += _tuned(seconds, runs)
    for _ in range(2 * runs - 1):
        bare.append(_bare(seconds))
    return TuneCost(seconds, bare, trials)


def format_text(r: TuneCost) -> str:
    verdict = "met" if r.overhead_pct <= GOAL_PCT else "NOT met"
    return (
        f"tune, {r.seconds:g} s trials: bare {statistics.median(r.bare_s):.3f} s, trial "
        f"{statistics.median(r.trial_s):.3f} s (median of {len(r.trial_s)}): overhead "
        f"{1000 * r.overhead_s:.0f} ms = {r.overhead_pct:.2f} % (goal <= {GOAL_PCT:g} %: {verdict})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print(format_text(run(args.seconds, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
