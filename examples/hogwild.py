"""Hogwild training on CPU: M processes update one shared PyTorch model, the classic pattern.

Each worker is a separate process training the same model (parameters in shared memory,
`model.share_memory()`) on synthetic data, so nothing is downloaded. By default every worker
sizes torch's OpenMP pool to all N vCPUs, so M workers run M*N busy threads on N vCPUs:
the oversubscription `oversub check` is meant to find.

    python examples/hogwild.py --workers 2 --seconds 6 --threads default
    python examples/hogwild.py --workers 2 --seconds 6 --threads recommended
    oversub check -- python examples/hogwild.py --workers 2 --seconds 6

Fork after OpenMP: a parent that ran any OpenMP region before forking leaves libgomp in a
state that makes every forked child hang in its first parallel op (pytorch issue 41197;
examples/fork_after_openmp.py reproduces it). Building `Linear(2048, 2048)` is enough, since
its initialisation fills 4M values in parallel. So the parent builds the model with one
thread, which never starts an OpenMP team, and each worker then sets the thread count it
asked for: `default` restores the count torch picked in the parent before it was lowered,
which is what a fresh (spawned) process would get anyway.

Output: one line per worker, then `steps_per_s=<float>` (the sum over workers) as the last
line on stdout. Exit 0 when every worker finished, 3 when one failed or had to be killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

BATCH = 64
# Distinct synthetic batches per worker, cycled: enough that the model cannot memorise a
# single batch, few enough that generating them costs nothing next to the training time.
BATCHES_PER_WORKER = 8
# Time a worker may run past --seconds (start-up, imports under spawn) before the parent
# decides it is stuck and kills it.
GRACE_S = 60.0


def build_model(size: str) -> nn.Module:
    """`small` = Linear(784, 10) (an MNIST-sized classifier); `large` = 3 x Linear(2048, 2048)."""
    if size == "small":
        return nn.Linear(784, 10)
    return nn.Sequential(
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
    )


def synthetic_batches(size: str, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random inputs and class labels shaped for the model."""
    generator = torch.Generator().manual_seed(seed)
    features, classes = (784, 10) if size == "small" else (2048, 2048)
    return [
        (
            torch.randn(BATCH, features, generator=generator),
            torch.randint(0, classes, (BATCH,), generator=generator),
        )
        for _ in range(BATCHES_PER_WORKER)
    ]


def set_worker_threads(mode: str, workers: int, default_threads: int) -> None:
    """Size this worker's thread pools according to --threads."""
    if mode == "default":
        torch.set_num_threads(default_threads)
    elif mode == "1":
        torch.set_num_threads(1)
    else:
        import oversub

        oversub.apply(oversub.recommend(procs=workers))


def train(
    rank: int,
    model: nn.Module,
    args: argparse.Namespace,
    default_threads: int,
    results: Any,
) -> None:
    """One Hogwild worker: SGD steps on the shared model until --seconds have passed."""
    set_worker_threads(args.threads, args.workers, default_threads)
    batches = synthetic_batches(args.model, seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    steps = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while time.perf_counter() < deadline:
        inputs, labels = batches[steps % len(batches)]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        steps += 1
    elapsed = time.perf_counter() - start
    rate = steps / elapsed
    # One write(2) per line: pipes keep writes below PIPE_BUF whole, while print() from
    # several processes can interleave its parts.
    line = (
        f"worker={rank} pid={os.getpid()} threads={torch.get_num_threads()} "
        f"steps={steps} steps_per_s={rate:.2f}"
    )
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    results.put((rank, rate))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags; --workers defaults to the vCPUs this process may use."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--start-method", choices=["fork", "spawn"], default="fork")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", choices=["default", "1", "recommended"], default="default")
    parser.add_argument("--model", choices=["small", "large"], default="small")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Start the workers, wait for them, print the total steps/s."""
    args = parse_args(argv)
    default_threads = torch.get_num_threads()
    # One thread while building: see the module docstring (fork after OpenMP).
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(args.model)
    model.share_memory()

    context = mp.get_context(args.start_method)
    results = context.SimpleQueue()
    workers = [
        context.Process(target=train, args=(rank, model, args, default_threads, results))
        for rank in range(args.workers)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + args.seconds + GRACE_S
    for worker in workers:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = [worker for worker in workers if worker.is_alive()]
    for worker in stuck:
        worker.kill()
        worker.join()
    failed = [worker for worker in workers if worker.exitcode != 0]
    if failed:
        print(
            f"hogwild: {len(failed)} worker(s) failed or hung: "
            + ", ".join(f"pid {w.pid} exit {w.exitcode}" for w in failed),
            file=sys.stderr,
        )
        return 3
    total = 0.0
    for _ in workers:
        _, rate = results.get()
        total += rate
    print(f"steps_per_s={total:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
