"""Which threads a runtime starts, and whom `oversub.probe.owners` says they belong to.

Imports one runtime, makes one parallel call (examples/runtimes.py's workload, once), waits
for its threads to go idle (or, with `--busy`, keeps calling it from another thread), then
reads this process's own threads from outside the way oversub reads a watched process's:
name, start routine, blocked PC, return addresses. docs/pools.md's tables come from it:

    .venv-real/bin/python tools/runtime_threads.py polars
    .venv-real/bin/python tools/runtime_threads.py numba --busy
    OMP_NUM_THREADS=1 .venv-real/bin/python tools/runtime_threads.py onnxruntime
    .venv-real/bin/python tools/runtime_threads.py onnxruntime --intra-op 1

Prints one line per thread (tid, name, owner), then `threads=<n>` and, for ONNX Runtime,
`session_threads=<threads the session added>`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oversub.core.samples import ThreadSample
from oversub.probe.owners import OwnerReader


def _workloads() -> Any:
    """examples/runtimes.py as a module."""
    path = Path(__file__).resolve().parents[1] / "examples" / "runtimes.py"
    spec = importlib.util.spec_from_file_location("runtimes_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def threads_now() -> tuple[ThreadSample, ...]:
    out = []
    for name in os.listdir("/proc/self/task"):
        stat = Path(f"/proc/self/task/{name}/stat").read_text()
        state = stat[stat.rfind(")") + 2]
        out.append(ThreadSample(int(name), state, 0, 0, 0, 0))
    return tuple(out)


def main() -> int:
    workloads = _workloads()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runtime", choices=[r for r in workloads.RUNTIMES if r != "gil"])
    parser.add_argument("--intra-op", type=int, default=0)
    parser.add_argument(
        "--busy", action="store_true", help="read while the workload runs, not once it is idle"
    )
    args = parser.parse_args()
    if args.runtime == "onnxruntime":
        importlib.import_module("onnxruntime")  # its import starts threads (and NumPy's)
    before = len(os.listdir("/proc/self/task"))
    if args.runtime == "onnxruntime":
        step = workloads._onnxruntime(args.intra_op)
    else:
        step = {
            "polars": workloads._polars,
            "pyarrow": workloads._pyarrow,
            "numexpr": workloads._numexpr,
            "numba": workloads._numba,
        }[args.runtime]()
    step()
    stop = threading.Event()
    worker = threading.Thread(target=lambda: [step() for _ in iter(stop.is_set, True)])
    if args.busy:
        worker.start()  # its pool's threads run (or spin) while they are read
    time.sleep(1.0)  # idle: let the pool's threads block
    threads = threads_now()
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    owners = OwnerReader().read(os.getpid(), start, threads)
    comms = {t.tid: Path(f"/proc/self/task/{t.tid}/comm").read_text().strip() for t in threads}
    stop.set()
    if args.busy:
        worker.join()
    for t in sorted(threads, key=lambda t: t.tid):
        caller = " (the calling thread)" if t.tid == worker.native_id else ""
        print(f"{t.tid} {comms[t.tid]!r} {owners.get(t.tid)}{caller}")
    print(f"threads={len(threads)}")
    if args.runtime == "onnxruntime":
        print(f"session_threads={len(threads) - before}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
