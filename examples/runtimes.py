"""M processes each running one runtime's own thread pool (or Python threads), for a while.

One workload per runtime whose threads oversub attributes (docs/pools.md, "Runtimes and
their knobs"), each sized by default unless its knob is set:

    polars       group-by and sort of a 1M-row frame (rayon pool: POLARS_MAX_THREADS)
    pyarrow      group-by of a 1M-row table (Arrow's CPU pool: OMP_NUM_THREADS)
    numexpr      evaluate on 2M-element arrays (NUMEXPR_NUM_THREADS)
    numba        a parallel=True prange loop (NUMBA_NUM_THREADS)
    onnxruntime  a 256x256 MatMul model built with onnx's helper API
                 (SessionOptions.intra_op_num_threads: --intra-op)
    gil          --threads pure-Python threads per process (the GIL)

    python examples/runtimes.py polars --procs 2 --seconds 6
    POLARS_MAX_THREADS=1 python examples/runtimes.py polars --procs 2 --seconds 6

The processes start with spawn (each imports its library afresh and reads the variables
it inherits). Output: one line per process, then `ops_per_s=<float>` (the sum) last.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

GRACE_S = 90.0
"""Time a process may run past --seconds (imports, numba's compilation) before it is stuck."""

RUNTIMES = ("polars", "pyarrow", "numexpr", "numba", "onnxruntime", "gil")


def _polars() -> Callable[[], None]:
    import polars as pl

    df = pl.DataFrame({"k": [i % 1000 for i in range(1_000_000)], "v": range(1_000_000)})

    def step() -> None:
        df.group_by("k").agg(pl.col("v").sum().alias("s"), pl.col("v").mean().alias("m")).sort("k")
        df.sort("v", descending=True)

    return step


def _pyarrow() -> Callable[[], None]:
    import pyarrow as pa

    table = pa.table({"k": [i % 1000 for i in range(1_000_000)], "v": range(1_000_000)})

    def step() -> None:
        table.group_by("k").aggregate([("v", "sum"), ("v", "mean")])

    return step


def _numexpr() -> Callable[[], None]:
    import numexpr
    import numpy as np

    a = np.linspace(0.0, 1.0, 2_000_000)
    b = np.linspace(1.0, 2.0, 2_000_000)

    def step() -> None:
        numexpr.evaluate("sin(a) * cos(b) + sqrt(a * b)", local_dict={"a": a, "b": b})

    return step


def _numba() -> Callable[[], None]:
    import numba
    import numpy as np

    @numba.njit(parallel=True, cache=False)  # type: ignore[misc]
    def kernel(x: Any) -> float:
        total = 0.0
        for i in numba.prange(x.shape[0]):
            total += np.sin(x[i]) * np.cos(x[i])
        return total

    x = np.linspace(0.0, 1.0, 2_000_000)
    kernel(x)  # compile before the clock starts

    def step() -> None:
        kernel(x)

    return step


def onnx_model(side: int = 256) -> bytes:
    """A one-node MatMul model (Y = X @ W), built with onnx's helper API."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, side])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, side])
    w = helper.make_tensor("W", TensorProto.FLOAT, [side, side], [0.001] * (side * side))
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "mm", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _onnxruntime(intra_op: int) -> Callable[[], None]:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    if intra_op:
        options.intra_op_num_threads = intra_op
    session = ort.InferenceSession(onnx_model(), options, providers=["CPUExecutionProvider"])
    feed = {"X": np.ones((512, 256), dtype=np.float32)}

    def step() -> None:
        session.run(None, feed)

    return step


def _spin(deadline: float, counts: list[int], slot: int) -> None:
    n = 0
    while time.perf_counter() < deadline:
        total = 0
        for i in range(20_000):
            total += i * i
        n += 1
    counts[slot] = n


def work(rank: int, args: argparse.Namespace, results: Any) -> None:
    """Run the runtime's step until --seconds have passed; report steps per second."""
    start = time.perf_counter()
    count = 0
    if args.runtime == "gil":
        counts = [0] * args.threads
        deadline = start + args.seconds
        threads = [
            threading.Thread(target=_spin, args=(deadline, counts, i)) for i in range(args.threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        count = sum(counts)
    else:
        step = {
            "polars": _polars,
            "pyarrow": _pyarrow,
            "numexpr": _numexpr,
            "numba": _numba,
            "onnxruntime": lambda: _onnxruntime(args.intra_op),
        }[args.runtime]()
        start = time.perf_counter()
        deadline = start + args.seconds
        while time.perf_counter() < deadline:
            step()
            count += 1
    rate = count / (time.perf_counter() - start)
    line = f"proc={rank} pid={os.getpid()} runtime={args.runtime} ops_per_s={rate:.2f}"
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    results.put(rate)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runtime", choices=RUNTIMES)
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--intra-op", type=int, default=0, help="ORT intra_op_num_threads")
    parser.add_argument("--threads", type=int, default=8, help="Python threads (gil)")
    args = parser.parse_args(argv)
    if args.procs < 1 or args.threads < 1 or args.intra_op < 0:
        parser.error("--procs and --threads must be >= 1, --intra-op >= 0")
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
        print(f"runtimes: {len(failed)} process(es) failed or hung", file=sys.stderr)
        return 3
    total = sum(results.get() for _ in procs)
    print(f"ops_per_s={total:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
