"""M idle processes that imported NumPy: latent oversubscription before any work starts.

numpy's OpenBLAS starts its pool (N - 1 threads beside the caller) when it is imported, so
M idle processes already hold M pools of N threads: the moment they all call BLAS, M*N
threads compete for N CPUs. `--limit T` calls threadpoolctl.threadpool_limits(T) in each
process after the import, a setting made in code that only a read of the process's memory
can see (the threads stay; the pool size changes).

    python examples/idle_numpy.py --procs 2 --seconds 6
    python examples/idle_numpy.py --procs 2 --seconds 6 --limit 1

Output: one line per process (pid, OpenBLAS threads as threadpoolctl reports them).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time


def idle(rank: int, limit: int | None, seconds: float) -> None:
    """Import numpy, optionally limit its pool in code, then sleep."""
    import numpy  # noqa: F401  (starts OpenBLAS's pool)
    import threadpoolctl

    if limit is not None:
        # Kept referenced for the life of the process: the limit holds while it exists.
        idle.limiter = threadpoolctl.threadpool_limits(limit)  # type: ignore[attr-defined]
    pools = threadpoolctl.threadpool_info()
    blas = [p["num_threads"] for p in pools if p["internal_api"] == "openblas"]
    line = f"proc={rank} pid={os.getpid()} openblas_threads={blas}"
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    time.sleep(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--limit", type=int, default=None, help="threadpool_limits(T) in code")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(target=idle, args=(rank, args.limit, args.seconds))
        for rank in range(args.procs)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=args.seconds + 60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return 0 if all(proc.exitcode == 0 for proc in procs) else 3


if __name__ == "__main__":
    sys.exit(main())
