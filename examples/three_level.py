"""A three-level tree: a launcher -> R ranks -> W DataLoader workers each (issue 42).

The launcher starts R rank processes (`--rank-method spawn|fork`) and waits; each rank
trains a small torch model on batches its DataLoader's W workers compute with NumPy
(`--worker-method fork|spawn`). By default every rank sizes torch's pool to all N vCPUs and
every worker's OpenBLAS keeps N threads: R*(N + W*N) threads on N vCPUs.

    python examples/three_level.py --seconds 6                 # default pools
    python examples/three_level.py --seconds 6 --fix           # oversub's plan, in code
    oversub run -- python examples/three_level.py --seconds 6  # the cure, no code change

--fix applies oversub's plan for R processes with W workers each in every rank
(`oversub.apply(oversub.recommend(procs=R, workers=W))`, `worker_init_fn`).
Output: one line per rank, then `steps_per_s=<float>` (the sum over ranks) last.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

GRACE_S = 90.0
"""Time a rank may run past --seconds (imports, workers starting) before it is stuck."""


class Features(Dataset[tuple[Any, int]]):
    """Items computed by one NumPy matrix product each (OpenBLAS in the workers)."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.left = rng.standard_normal((96, 96))
        self.right = rng.standard_normal((96, 96)) / 10.0

    def __len__(self) -> int:
        return 10**9

    def __getitem__(self, index: int) -> tuple[Any, int]:
        product = np.roll(self.left, index, axis=0) @ self.right
        return torch.from_numpy(np.tanh(product[0]).astype(np.float32)), index % 10


def rank_main(rank: int, args: argparse.Namespace, results: Any) -> None:
    """One rank: train on its DataLoader's batches for --seconds."""
    init_fn = None
    if args.fix:
        import threadpoolctl  # noqa: F401  (lets oversub.apply resize loaded BLAS pools)

        import oversub

        oversub.apply(oversub.recommend(procs=args.ranks, workers=args.workers))
        init_fn = oversub.worker_init_fn
    loader = DataLoader(
        Features(rank),
        batch_size=32,
        num_workers=args.workers,
        worker_init_fn=init_fn,
        multiprocessing_context=args.worker_method,
    )
    model = nn.Sequential(nn.Linear(96, 768), nn.ReLU(), nn.Linear(768, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(loader)
    next(batches)  # the workers are up before the clock starts
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() < start + args.seconds:
        inputs, labels = next(batches)
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
        steps += 1
    rate = steps / (time.perf_counter() - start)
    del batches
    line = f"rank={rank} pid={os.getpid()} threads={torch.get_num_threads()} steps_per_s={rate:.2f}"
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    results.put(rate)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rank-method", choices=["spawn", "fork"], default="spawn")
    parser.add_argument("--worker-method", choices=["fork", "spawn"], default="fork")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fix", action="store_true", help="apply oversub's plan in code")
    args = parser.parse_args(argv)
    if args.ranks < 1 or args.workers < 1:
        parser.error("--ranks and --workers must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    context = multiprocessing.get_context(args.rank_method)
    results = context.SimpleQueue()
    ranks = [context.Process(target=rank_main, args=(r, args, results)) for r in range(args.ranks)]
    for rank in ranks:
        rank.start()
    deadline = time.monotonic() + args.seconds + GRACE_S
    for rank in ranks:
        rank.join(timeout=max(0.0, deadline - time.monotonic()))
    for rank in ranks:
        if rank.is_alive():
            rank.kill()
            rank.join()
    if any(rank.exitcode != 0 for rank in ranks):
        print("three_level: a rank failed or hung", file=sys.stderr)
        return 3
    total = sum(results.get() for _ in ranks)
    print(f"steps_per_s={total:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
