"""M processes each running one library's own thread pool at its default size, for a while.

One workload per library of issue 41 (docs/pools.md, "More libraries' pools"), each sized
by default unless its own knob is set with --lib-threads (or a variable in the environment):

    tokenizers   HF tokenizers `encode_batch` of 2,000 sentences with a BPE tokenizer trained
                 here on generated text (rayon pool: RAYON_NUM_THREADS,
                 TOKENIZERS_PARALLELISM=false; no code call)
    opencv       `cv2.GaussianBlur` (7x7) and `cv2.resize` of a 1920x1080 colour image
                 (pthreads pool: cv2.setNumThreads, OPENCV_FOR_THREADS_NUM)
    xgboost      `xgb.train` of 10 rounds, tree_method "hist", on 20,000 x 30 rows
                 (OpenMP: the `nthread` parameter, OMP_NUM_THREADS)
    sklearn-hgb  scikit-learn `HistGradientBoostingClassifier(max_iter=10)` on 20,000 x 20
                 (OpenMP: OMP_NUM_THREADS, threadpoolctl; no parameter)
    lightgbm     `lightgbm.train` of 10 rounds on 20,000 x 30 rows
                 (OpenMP: the `num_threads` parameter, OMP_NUM_THREADS)
    faiss        `IndexFlatL2.search` of 500 queries, k = 10, in 50,000 vectors of 64 floats
                 (OpenMP: faiss.omp_set_num_threads, OMP_NUM_THREADS)

    python examples/libraries.py xgboost --procs 2 --seconds 10
    python examples/libraries.py xgboost --procs 2 --seconds 10 --lib-threads 1
    OMP_NUM_THREADS=1 python examples/libraries.py xgboost --procs 2 --seconds 10

The data are generated with a fixed seed (no download). The processes start with spawn (each
imports its library afresh and reads the variables it inherits). Output: one line per
process (the pool size the library reports, the threads the process runs after its steps,
its steps per second), then `steps_per_s=<float>` (the sum) last. Each process says on
stderr when its clock starts (`proc=R pid=P started`: what a probe of its threads awaits).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import Any

GRACE_S = 120.0
"""Time a process may run past --seconds (imports, building the data) before it is stuck."""

LIBRARIES = ("tokenizers", "opencv", "xgboost", "sklearn-hgb", "lightgbm", "faiss")

Step = Callable[[], None]


def _tokenizers(threads: int) -> tuple[Step, str]:
    import random

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if threads:
        raise SystemExit("tokenizers has no call that sizes its pool: use RAYON_NUM_THREADS")
    rng = random.Random(41)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(3000)]
    corpus = [" ".join(rng.choices(words, k=40)) for _ in range(4000)]
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer)
    batch = corpus[:2000]

    def step() -> None:
        tokenizer.encode_batch(batch)

    return step, os.environ.get("RAYON_NUM_THREADS", "default")


def _opencv(threads: int) -> tuple[Step, str]:
    import cv2
    import numpy as np

    if threads:
        cv2.setNumThreads(threads)
    image = np.random.default_rng(41).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)

    def step() -> None:
        blurred = cv2.GaussianBlur(image, (7, 7), 1.5)
        small = cv2.resize(blurred, (960, 540), interpolation=cv2.INTER_AREA)
        cv2.resize(small, (1920, 1080), interpolation=cv2.INTER_LINEAR)

    return step, str(cv2.getNumThreads())


def _rows(n: int, d: int) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(41)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] + 0.1 * rng.standard_normal(n) > 0).astype(np.int32)
    return x, y


def _xgboost(threads: int) -> tuple[Step, str]:
    import xgboost as xgb

    x, y = _rows(20_000, 30)
    params: dict[str, Any] = {"tree_method": "hist", "objective": "binary:logistic"}
    if threads:
        params["nthread"] = threads
    train = xgb.DMatrix(x, label=y, nthread=threads or None)

    def step() -> None:
        xgb.train(params, train, num_boost_round=10)

    return step, str(threads or "default")


def _sklearn_hgb(threads: int) -> tuple[Step, str]:
    from sklearn.ensemble import HistGradientBoostingClassifier

    x, y = _rows(20_000, 20)
    limit: Any = None
    if threads:
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(threads, user_api="openmp")

    def step() -> None:
        HistGradientBoostingClassifier(max_iter=10, early_stopping=False).fit(x, y)

    step.limit = limit  # type: ignore[attr-defined]  # kept alive with the step
    return step, str(threads or "default")


def _lightgbm(threads: int) -> tuple[Step, str]:
    import lightgbm as lgb

    x, y = _rows(20_000, 30)
    params: dict[str, Any] = {"objective": "binary", "verbose": -1}
    if threads:
        params["num_threads"] = threads
    train = lgb.Dataset(x, label=y, params={"verbose": -1}, free_raw_data=False)
    train.construct()

    def step() -> None:
        lgb.train(params, train, num_boost_round=10)

    return step, str(threads or "default")


def _faiss(threads: int) -> tuple[Step, str]:
    import faiss
    import numpy as np

    if threads:
        faiss.omp_set_num_threads(threads)
    rng = np.random.default_rng(41)
    index = faiss.IndexFlatL2(64)
    index.add(rng.standard_normal((50_000, 64)).astype(np.float32))
    queries = rng.standard_normal((500, 64)).astype(np.float32)

    def step() -> None:
        index.search(queries, 10)

    return step, str(faiss.omp_get_max_threads())


BUILDERS: dict[str, Callable[[int], tuple[Step, str]]] = {
    "tokenizers": _tokenizers,
    "opencv": _opencv,
    "xgboost": _xgboost,
    "sklearn-hgb": _sklearn_hgb,
    "lightgbm": _lightgbm,
    "faiss": _faiss,
}


def work(rank: int, args: argparse.Namespace, results: Any) -> None:
    """Build the library's data, then run its step until --seconds have passed."""
    step, size = BUILDERS[args.library](args.lib_threads)
    step()  # warm: the pool is started before the clock
    os.write(sys.stderr.fileno(), f"proc={rank} pid={os.getpid()} started\n".encode())
    count = 0
    start = time.perf_counter()
    deadline = start + args.seconds
    while time.perf_counter() < deadline:
        step()
        count += 1
    rate = count / (time.perf_counter() - start)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
    line = (
        f"proc={rank} pid={os.getpid()} library={args.library} pool={size} threads={threads}"
        f" steps_per_s={rate:.3f}"
    )
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    results.put(rate)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", choices=LIBRARIES)
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--lib-threads",
        type=int,
        default=0,
        help="size the pool with the library's own call or parameter (0: its default)",
    )
    args = parser.parse_args(argv)
    if args.procs < 1 or args.lib_threads < 0 or not args.seconds > 0:
        parser.error("--procs must be >= 1, --lib-threads >= 0, --seconds > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    context = multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    procs = [context.Process(target=work, args=(r, args, results)) for r in range(args.procs)]
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
        print(f"libraries: {len(failed)} process(es) failed or hung", file=sys.stderr)
        return 3
    total = sum(results.get() for _ in procs)
    print(f"steps_per_s={total:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
