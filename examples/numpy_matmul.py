"""M processes doing NumPy matrix products, each with OpenBLAS sized by default.

numpy's OpenBLAS starts one thread per vCPU in every process, so M processes on N vCPUs run
M*N busy threads. The usual fix is OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS) =
floor(N / M), set before numpy is imported, e.g. from `oversub recommend --procs M
--format env`. The processes are started with spawn, so each imports numpy afresh and reads
the variables from the environment it inherits.

    python examples/numpy_matmul.py --procs 2 --seconds 6
    eval "$(oversub recommend --procs 2 --format env)"; python examples/numpy_matmul.py ...

Output: one line per process (its matmuls/s and mean ms per matmul), then
`matmuls_per_s=<float>` (the sum) as the last line on stdout.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from typing import Any

# Time a process may run past --seconds (start-up, numpy import) before it counts as stuck.
GRACE_S = 60.0


def multiply(rank: int, size: int, seconds: float, results: Any) -> None:
    """Multiply two random size x size matrices until --seconds have passed."""
    import numpy as np

    rng = np.random.default_rng(rank)
    left = rng.standard_normal((size, size))
    right = rng.standard_normal((size, size))
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        left @ right
        count += 1
    elapsed = time.perf_counter() - start
    rate = count / elapsed
    # One write(2) per line: pipes keep writes below PIPE_BUF whole, while print() from
    # several processes can interleave its parts.
    line = (
        f"proc={rank} pid={os.getpid()} matmuls={count} matmuls_per_s={rate:.2f} "
        f"ms_per_matmul={1000 * elapsed / max(count, 1):.2f}"
    )
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    results.put(rate)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags; --procs defaults to the vCPUs this process may use."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=512, help="matrix side")
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
        context.Process(target=multiply, args=(rank, args.size, args.seconds, results))
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
        print(f"numpy_matmul: {len(failed)} process(es) failed or hung", file=sys.stderr)
        return 3
    total = sum(results.get() for _ in procs)
    print(f"matmuls_per_s={total:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
