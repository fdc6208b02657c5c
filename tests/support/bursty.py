"""A bursty pool (issue 43): W outer workers, each one busy thread, of which one now and then
starts K inner processes of its own and waits for them (nested parallelism: a test suite
under `pytest -n W` whose tests use `n_jobs=K`).

    python bursty.py --workers W --inner K --seconds S --burst A:L [--burst A:L ...]

Worker 0 spins from start to end; worker 1 spins, except during each burst (from A seconds
after the start) when it forks K inner processes that each spin L seconds (then sleep
LINGER seconds), and waits for them; the other workers spin. The workers are started with
multiprocessing's spawn (what `watch` names "spawn worker"), the inner processes with its
fork (a "forked worker", busy at once: no interpreter to start). The workers stop S seconds
after the start (a burst under way ends first), and everything stops when its parent dies.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

CTX = mp.get_context("spawn")
FORK = mp.get_context("fork")


def spin(until: float) -> None:
    """Busy on one CPU until `until` (time.monotonic, the same clock in every process)."""
    parent = os.getppid()
    x = 0
    while time.monotonic() < until:
        for _ in range(10_000):
            x += 1
        if os.getppid() != parent:  # orphaned: the test is over
            return


LINGER = 1.5
"""Seconds an inner process sleeps after its burst before it exits: longer than a sample
interval, so a sample sees the end of its burst (the waiting of a process that lived and
died between two samples is not seen, only its CPU, in its parent's)."""


def spin_for(seconds: float) -> None:
    """Busy for `seconds` from its own start, then asleep for LINGER (or until orphaned)."""
    spin(time.monotonic() + seconds)
    parent, until = os.getppid(), time.monotonic() + LINGER
    while time.monotonic() < until and os.getppid() == parent:
        time.sleep(0.1)


def worker(
    index: int, start: float, seconds: float, inner: int, bursts: list[tuple[float, float]]
) -> None:
    end = start + seconds
    if index != 1:
        spin(end)
        return
    for at, length in sorted(bursts):
        spin(min(end, start + at))
        if time.monotonic() >= end:
            break
        # Forked: running at once, whatever starting an interpreter would cost on a loaded
        # machine (imports that wait for the disk), so a burst is as long as asked.
        procs = [FORK.Process(target=spin_for, args=(length,)) for _ in range(inner)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    spin(end)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--inner", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--burst", action="append", default=[], help="A:L seconds")
    args = ap.parse_args()
    bursts = [(float(a), float(b)) for a, b in (x.split(":") for x in args.burst)]
    start = time.monotonic()
    outer = [
        CTX.Process(target=worker, args=(i, start, args.seconds, args.inner, bursts))
        for i in range(args.workers)
    ]
    for p in outer:
        p.start()
    for p in outer:
        p.join()


if __name__ == "__main__":
    main()
