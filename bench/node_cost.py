"""CPU cost of `oversub watch --all` (node mode) on a node of ~2,000 threads in 20 cgroups.

Starts a synthetic tree of 100 processes x 20 idle threads (bench/trees.py), creates 20 real
cgroups in the hierarchy that holds the cpu controller and moves 5 processes into each, then
runs `oversub watch --all --format ndjson --duration D` at the default 1 s interval and
measures it as bench/watch_cost.py does (wait4's rusage; steady state from /proc/PID/stat).
The node's other processes are read too: node mode reads every process, so the figure is for
the whole node, whose thread count (from the last NDJSON round) is reported beside it.

Creating cgroups needs root and a writable cpu hierarchy; without them the tree stays where
it is and the line says so (the cost is then one cgroup's, still with every thread read).
Every cgroup made here is removed on exit, once its processes are gone.

Goal: the whole run stays under 3 % of one CPU.

    python bench/node_cost.py [--duration 20] [--runs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import watch_cost
from trees import print_until_stopped, tree

PROCS, THREADS, CGROUPS = 100, 20, 20
CPU_GOAL_PCT = 3.0


@dataclass(frozen=True)
class NodeResult:
    cgroups: int
    """Cgroups made and filled (0 when they could not be created)."""
    why_not: str
    """Why no cgroup was made; "" when they were."""
    node_threads: int
    """Threads on the whole node in the last round (what node mode reads)."""
    targets: int
    """Cgroup targets in the last round's output (those holding load: idle trees hold none)."""
    wall_s: float
    cpu_s: float
    steady_pct: float | None
    runs_pct: tuple[float, ...]

    @property
    def whole_pct(self) -> float:
        return self.cpu_s / self.wall_s * 100

    @property
    def passed(self) -> bool:
        return self.whole_pct < CPU_GOAL_PCT


def _cpu_hierarchy() -> str | None:
    """The directory of the cgroup hierarchy with the cpu controller, as oversub finds it."""
    from oversub.core.errors import OversubError
    from oversub.probe.cgroup_target import find_hierarchy

    try:
        return find_hierarchy().directory
    except OversubError:
        return None


@contextlib.contextmanager
def cgroups(count: int) -> Iterator[tuple[list[str], str]]:
    """`count` new cgroups (their directories) and why none could be made ("" when made).
    They are removed on exit: leave the block only once their processes are gone."""
    top = _cpu_hierarchy()
    if os.geteuid() != 0 or top is None:
        yield [], "not root" if os.geteuid() != 0 else "no cgroup hierarchy with cpu"
        return
    base = os.path.join(top, f"oversub-bench-{uuid.uuid4().hex[:8]}")
    made: list[str] = []
    try:
        try:
            os.mkdir(base)
            made.append(base)
            for i in range(count):
                os.mkdir(os.path.join(base, f"job_{i}"))
                made.append(os.path.join(base, f"job_{i}"))
        except OSError as error:
            yield [], f"cannot create cgroups under {top}: {error.strerror}"
            return
        yield made[1:], ""
    finally:
        _remove(made)


def fill(directories: list[str], pids: tuple[int, ...]) -> None:
    """Move `pids` into `directories`, round robin (a process moves with all its threads)."""
    for n, pid in enumerate(pids):
        Path(directories[n % len(directories)], "cgroup.procs").write_text(str(pid))


def _remove(directories: list[str]) -> None:
    for directory in reversed(directories):
        deadline = time.monotonic() + 10
        while os.path.isdir(directory):
            try:
                os.rmdir(directory)
            except OSError:
                if time.monotonic() > deadline:
                    print(f"bench: could not remove {directory}", file=sys.stderr)
                    break
                time.sleep(0.05)


def _last_round(output: bytes) -> dict[str, object]:
    rounds = [json.loads(line) for line in output.splitlines() if b'"node-interval"' in line]
    return rounds[-1] if rounds else {}


def run(duration_s: float, runs: int) -> NodeResult:
    import startup

    startup.byte_compile()
    # The tree is killed before the cgroups are removed (a cgroup with tasks cannot be).
    with cgroups(CGROUPS) as (made, why_not), tree(PROCS, THREADS) as t:
        if made:
            fill(made, t.pids)
        done = [watch_cost.watch_once(None, duration_s, ["--all"]) for _ in range(runs)]
    done.sort(key=lambda r: r.cpu_s / r.wall_s)
    r = done[len(done) // 2]
    last = _last_round(r.output)
    node = last.get("node") or {}
    assert isinstance(node, dict)
    targets = last.get("targets") or []
    assert isinstance(targets, list)
    return NodeResult(
        cgroups=len(made),
        why_not=why_not,
        node_threads=int(node.get("totals", {}).get("threads", 0)),
        targets=len(targets),
        wall_s=r.wall_s,
        cpu_s=r.cpu_s,
        steady_pct=r.steady_pct,
        runs_pct=tuple(d.cpu_s / d.wall_s * 100 for d in done),
    )


def describe(r: NodeResult) -> str:
    where = (
        f"{PROCS} processes x {THREADS} threads in {r.cgroups} cgroups"
        if r.cgroups
        else f"{PROCS} processes x {THREADS} threads, no cgroups ({r.why_not})"
    )
    return f"{where}; {r.node_threads:,} threads on the node"


def format_text(r: NodeResult) -> str:
    steady = "-" if r.steady_pct is None else f"{r.steady_pct:.2f} %"
    return (
        f"watch --all, {describe(r)}: {r.cpu_s * 1000:.0f} ms CPU in {r.wall_s:.1f} s = "
        f"{r.whole_pct:.2f} % of one CPU (steady state {steady}); runs: "
        + ", ".join(f"{p:.2f} %" for p in r.runs_pct)
        + f"\n  goal: CPU < {CPU_GOAL_PCT:g} %: {'PASS' if r.passed else 'MISS'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per run")
    parser.add_argument("--runs", type=int, default=1, help="runs (median)")
    args = parser.parse_args()
    return print_until_stopped(lambda: [format_text(run(args.duration, args.runs))])


if __name__ == "__main__":
    sys.exit(main())
