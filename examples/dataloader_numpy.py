"""DataLoader workers doing NumPy work while the main process trains: hidden OpenBLAS threads.

The Dataset computes each item with a NumPy matrix product, a stand-in for real feature
extraction or augmentation. torch sets its own pool to one thread in DataLoader workers,
but numpy's OpenBLAS keeps one thread per vCPU in each of them, and the main process trains
with torch's full OpenMP pool: W workers + 1 main process, each sized to all N vCPUs.

    python examples/dataloader_numpy.py --seconds 6          # default pools
    python examples/dataloader_numpy.py --seconds 6 --fix    # oversub's plan

--fix applies oversub's plan for 1 main process with W single-thread workers: the main
process gets floor((N - W) / 1) threads (at least 1) through `oversub.apply`, and each
worker one thread through `DataLoader(worker_init_fn=oversub.worker_init_fn)`. threadpoolctl
is imported first so that those calls can also resize OpenBLAS pools that already exist
(in a forked worker numpy was imported, and its pool started, before worker_init_fn runs).

--workers defaults to max(1, N // 2): the plan then fits N exactly (1 main thread per
leftover vCPU, 1 per worker); with W >= N even the fixed job asks for W + 1 threads.

Output: the main process's training steps/s as the last line, `steps_per_s=<float>`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class MatmulFeatures(Dataset[tuple[torch.Tensor, int]]):
    """Items computed by one size x size NumPy matrix product each (OpenBLAS-threaded)."""

    def __init__(self, size: int, length: int) -> None:
        self.size = size
        self.length = length
        rng = np.random.default_rng(0)
        self.left = rng.standard_normal((size, size))
        self.right = rng.standard_normal((size, size)) / np.sqrt(size)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        # Rolling the rows makes each item different at the cost of one copy.
        product = np.roll(self.left, index, axis=0) @ self.right
        features = np.tanh(product[0]).astype(np.float32)
        return torch.from_numpy(features), index % 10


def build_model(size: int, hidden: int) -> nn.Module:
    """A small MLP, big enough that torch's intra-op pool uses all its threads."""
    return nn.Sequential(nn.Linear(size, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags; the worker default derives from the vCPUs this process may use."""
    vcpus = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=max(1, vcpus // 2))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=128, help="matrix side in each item")
    parser.add_argument("--hidden", type=int, default=1024, help="hidden units of the MLP")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--fix", action="store_true", help="apply oversub's thread plan")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be >= 1 (the point is DataLoader worker processes)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Train on the loader's batches for --seconds; print steps/s."""
    args = parse_args(argv)
    init_fn = None
    if args.fix:
        import threadpoolctl  # noqa: F401  (lets oversub.apply resize loaded BLAS pools)

        import oversub

        oversub.apply(oversub.recommend(procs=1, workers=args.workers))
        init_fn = oversub.worker_init_fn
    dataset = MatmulFeatures(args.size, length=10**9)
    loader = DataLoader(
        dataset,
        batch_size=args.batch,
        num_workers=args.workers,
        worker_init_fn=init_fn,
        shuffle=False,
    )
    model = build_model(args.size, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(loader)
    steps = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while time.perf_counter() < deadline:
        inputs, labels = next(batches)
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
        steps += 1
    elapsed = time.perf_counter() - start
    del batches  # shuts the workers down before the interpreter exits
    print(
        f"main pid={os.getpid()} threads={torch.get_num_threads()} workers={args.workers} "
        f"fix={args.fix} steps={steps}",
        flush=True,
    )
    print(f"steps_per_s={steps / elapsed:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
