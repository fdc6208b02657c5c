"""M processes evaluating a numexpr expression, each with numexpr's own thread pool.

numexpr runs no BLAS and no OpenMP: its virtual machine splits each array into blocks and
hands them to a pool of its own threads, sized by NUMEXPR_NUM_THREADS (by default one per
detected core, capped at NUMEXPR_MAX_THREADS), read when numexpr is imported. M processes
on N vCPUs therefore run up to M*N busy threads. The processes are started with spawn, so
each imports numexpr afresh and reads the variables it inherits.

    python examples/numexpr_procs.py --procs 2 --seconds 6
    oversub tune --procs 2 --metric evals_per_s --trial-seconds 30 -- \\
        python examples/numexpr_procs.py --procs 2 --seconds 6

Output: one line per process (its evaluations/s), then `evals_per_s=<float>` (the sum) as the
last line on stdout.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from typing import Any

# Time a process may run past --seconds (start-up, imports) before it counts as stuck.
GRACE_S = 60.0
EXPRESSION = "sin(a) * exp(-b * b) + sqrt(abs(a * b))"


def evaluate(rank: int, size: int, seconds: float, results: Any) -> None:
    """Evaluate a few-operation expression on `size`-element arrays until --seconds pass."""
    import numexpr as ne
    import numpy as np

    rng = np.random.default_rng(rank)
    a = rng.standard_normal(size)
    b = rng.standard_normal(size)
    out = np.empty_like(a)
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        ne.evaluate(EXPRESSION, local_dict={"a": a, "b": b}, out=out)
        count += 1
    rate = count / (time.perf_counter() - start)
    line = f"proc={rank} pid={os.getpid()} threads={ne.get_num_threads()} evals_per_s={rate:.2f}"
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    results.put(rate)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=1_000_000, help="elements per array")
    args = parser.parse_args(argv)
    if args.procs < 1 or args.size < 1:
        parser.error("--procs and --size must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Start the processes, wait for them, print the total throughput."""
    args = parse_args(argv)
    context = multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    procs = [
        context.Process(target=evaluate, args=(rank, args.size, args.seconds, results))
        for rank in range(args.procs)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + args.seconds + GRACE_S
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    failed = [proc for proc in procs if proc.exitcode != 0]
    if failed:
        print(f"numexpr_procs: {len(failed)} process(es) failed or hung", file=sys.stderr)
        return 3
    total = sum(results.get() for _ in procs)
    print(f"evals_per_s={total:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
