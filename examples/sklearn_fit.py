"""scikit-learn fits in parallel with joblib: loky (the default) or multiprocessing.

Each fit is a Ridge regression with the Cholesky solver (X.T @ X: BLAS work). joblib's
loky backend sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS... to
cpu_count // n_jobs in its workers; the multiprocessing backend sets nothing, so its forked
workers run OpenBLAS at all N. The parent waits idle while the workers fit, and joblib/
multiprocessing also start a resource tracker: neither competes with the workers.

    python examples/sklearn_fit.py --backend loky --seconds 8
    python examples/sklearn_fit.py --backend multiprocessing --seconds 8

Output: `fits_per_s=<float>` as the last line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def fit(seed: int, rows: int, cols: int) -> float:
    """One task: make a regression problem, fit Ridge with Cholesky (BLAS-bound)."""
    import numpy as np
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols))
    y = x @ rng.standard_normal(cols)
    return float(Ridge(alpha=1.0, solver="cholesky").fit(x, y).coef_[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=("loky", "multiprocessing"), default="loky")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--cols", type=int, default=600)
    args = parser.parse_args(argv)

    import numpy  # noqa: F401  (the parent holds OpenBLAS too, as a real script would)
    import sklearn.linear_model  # noqa: F401
    from joblib import Parallel, delayed, parallel_backend

    fits = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    with parallel_backend(args.backend, n_jobs=args.jobs):
        while time.perf_counter() < deadline:
            batch = 4 * args.jobs
            Parallel()(delayed(fit)(fits + i, args.rows, args.cols) for i in range(batch))
            fits += batch
    elapsed = time.perf_counter() - start
    print(f"fits_per_s={fits / elapsed:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
