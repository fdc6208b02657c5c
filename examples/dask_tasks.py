"""A dask LocalCluster whose task threads oversubscribe, while BLAS is limited to 1.

LocalCluster(n_workers=W, threads_per_worker=T) starts W worker processes; its nannies set
OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS to 1 in each, so NumPy's
OpenBLAS runs one thread there. Each task multiplies NumPy matrices (the GIL is released
during the product), so each worker runs T busy task threads: W*T runnable threads on N
CPUs. The knob is threads_per_worker, not a thread variable.

    python examples/dask_tasks.py --workers 2 --threads-per-worker 2 --seconds 8
    python examples/dask_tasks.py --workers 2 --threads-per-worker 1 --seconds 8

Output: `tasks_per_s=<float>` as the last line.
"""

from __future__ import annotations

import argparse
import sys
import time


def product(seed: int, size: int) -> float:
    """One task: a few matrix products (OpenBLAS, 1 thread in a dask worker)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((size, size))
    for _ in range(4):
        a = np.tanh(a @ a / size)
    return float(a[0, 0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=300)
    args = parser.parse_args(argv)

    from dask.distributed import Client, LocalCluster, as_completed

    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=args.threads_per_worker,
            processes=True,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(args.workers)
        slots = args.workers * args.threads_per_worker
        seed = 0
        futures = as_completed()
        for _ in range(2 * slots):
            futures.add(client.submit(product, seed, args.size, pure=False))
            seed += 1
        done = 0
        start = time.perf_counter()
        deadline = start + args.seconds
        for future in futures:
            future.result()
            done += 1
            if time.perf_counter() < deadline:
                futures.add(client.submit(product, seed, args.size, pure=False))
                seed += 1
        elapsed = time.perf_counter() - start
    print(f"tasks_per_s={done / elapsed:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
