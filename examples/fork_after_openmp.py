"""Reproduce the fork-after-OpenMP hang on purpose (pytorch issue 41197).

The parent runs an OpenMP parallel region (building `nn.Linear(2048, 2048)` fills 4M values
with torch's parallel kernels, and a matmul follows to be sure), then forks workers that run
one op of their own. GNU libgomp keeps its thread team across fork, but the team's threads do
not exist in the child: each worker blocks forever in its first parallel region, with one OS
thread, asleep, at 0% CPU. Nothing errors and nothing times out, which is why it is worth a
rule of its own (`fork-hang` in `oversub watch` / `oversub check`).

    python examples/fork_after_openmp.py --workers 2 --seconds 20 &
    oversub watch $! --format json --duration 5

The parent waits up to --seconds for the workers, kills the ones still alive, prints one
line per worker and `hung=<count>` last, and exits 0 either way: hanging is the expected
outcome, not a failure of this script. With OMP_NUM_THREADS=1 in the environment the
parent never starts a team and the workers finish.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

import torch
from torch import nn


def run_one_op(layer: nn.Linear) -> None:
    """Worker body: one forward pass, enough to enter an OpenMP region."""
    with torch.no_grad():
        layer(torch.ones(64, 2048)).sum()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags; --workers defaults to the vCPUs this process may use."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="how long to wait before killing workers"
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Poison libgomp in the parent, fork, wait, clean up."""
    args = parse_args(argv)
    layer = nn.Linear(2048, 2048)
    with torch.no_grad():
        layer.weight @ layer.weight  # a second, unmistakable parallel region in the parent
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=run_one_op, args=(layer,)) for _ in range(args.workers)]
    for worker in workers:
        worker.start()
    print(
        f"parent pid={os.getpid()} threads={torch.get_num_threads()} "
        f"workers={','.join(str(w.pid) for w in workers)}",
        flush=True,
    )
    deadline = time.monotonic() + args.seconds
    for worker in workers:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = 0
    for worker in workers:
        if worker.is_alive():
            hung += 1
            worker.kill()
            worker.join()
            print(f"worker pid={worker.pid} hung: killed after {args.seconds:g} s", flush=True)
        else:
            print(f"worker pid={worker.pid} finished: exit {worker.exitcode}", flush=True)
    print(f"hung={hung}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
