"""Cost of one `TreeSampler.sample()` on a ~1,000-thread tree, against reading /proc by hand.

Starts a tree of 50 processes x 20 threads (idle threads: the cost of sampling depends on
how many threads there are, not on what they do, and busy threads would only add noise on a
small shared machine), waits until every thread is up, then times, interleaved in the same
run so machine noise hits both alike:

  (a) TreeSampler.sample()
  (b) a tight loop of plain os.open/os.read over the files a sampler would naively read:
      the ppid scan of /proc/*/stat, then per process stat and status, per thread
      task/TID/{stat,status,schedstat}.

Goals: (a)/(b) <= 1.3 (median wall time), and the CPU cost of `watch` at a 1 s interval
(CPU time of one sample / 1 s) < 3% of one CPU.

    python bench/sampling.py [--procs 50] [--threads 20] [--runs 25]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oversub.probe.sampler import TreeSampler

# Each process starts its idle threads, then says so by creating a marker file.
MEMBER = """
import os, sys, threading
ready, threads = sys.argv[1], int(sys.argv[2])
stop = threading.Event()
for _ in range(threads - 1):
    threading.Thread(target=stop.wait, daemon=True).start()
open(os.path.join(ready, str(os.getpid())), "w").close()
"""

# The root: a member that also starts the others and reaps them on SIGTERM.
ROOT = (
    MEMBER
    + """
import signal, subprocess
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[4], ready, str(threads)])
        for _ in range(int(sys.argv[3]) - 1)]
def finish(*_):
    for k in kids:
        k.kill()
    for k in kids:
        k.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, finish)
stop.wait()
"""
)
MEMBER += "stop.wait()\n"


def start_tree(ready: Path, procs: int, threads: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", ROOT, str(ready), str(threads), str(procs), MEMBER]
    return subprocess.Popen(argv, start_new_session=True)


def wait_ready(ready: Path, procs: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(os.listdir(ready)) < procs:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(os.listdir(ready))} of {procs} processes started")
        time.sleep(0.05)


def stop_tree(root: subprocess.Popen[bytes]) -> None:
    """Let the root kill and reap its children; SIGKILL the whole session if it does not."""
    try:
        root.terminate()
        root.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root.pid, signal.SIGKILL)
        root.wait()


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 8192)
    finally:
        os.close(fd)


def baseline_read(root_pid: int) -> int:
    """The hand-written loop: ppid scan, then stat+status per process and
    stat+status+schedstat per thread. Returns the number of threads read."""
    ppids: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                data = _read(f"/proc/{name}/stat")
            except OSError:
                continue
            ppids[int(name)] = int(data[data.rfind(b")") + 2 :].split()[1])
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    n = 0
    for pid in tree:
        try:
            _read(f"/proc/{pid}/stat")
            _read(f"/proc/{pid}/status")
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                for leaf in ("stat", "status", "schedstat"):
                    _read(f"/proc/{pid}/task/{tid}/{leaf}")
            except OSError:
                continue
            n += 1
    return n


def measure(root_pid: int, runs: int) -> dict[str, float]:
    sampler = TreeSampler(root_pid)
    sample = sampler.sample()  # first sample reads environ and maps of every process
    threads = sum(len(p.threads) for p in sample.processes.values())
    base_threads = baseline_read(root_pid)
    sampler_s: list[float] = []
    base_s: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sampler.sample()
        sampler_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        baseline_read(root_pid)
        base_s.append(time.perf_counter() - t0)

    # CPU time (user + system of this process) over a few samples, as `watch` would spend it.
    cpu_samples = 10
    c0 = time.process_time()
    for _ in range(cpu_samples):
        sampler.sample()
    cpu_per_sample = (time.process_time() - c0) / cpu_samples
    return {
        "processes": len(sample.processes),
        "threads": threads,
        "baseline_threads": base_threads,
        "sampler_ms": statistics.median(sampler_s) * 1000,
        "baseline_ms": statistics.median(base_s) * 1000,
        "cpu_ms": cpu_per_sample * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--procs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="oversub-bench-") as ready_dir:
        root = start_tree(Path(ready_dir), args.procs, args.threads)
        try:
            wait_ready(Path(ready_dir), args.procs)
            figures = measure(root.pid, max(args.runs, 20))
        finally:
            stop_tree(root)

    ratio = figures["sampler_ms"] / figures["baseline_ms"]
    watch_pct = figures["cpu_ms"] / 1000 * 100  # CPU seconds per 1 s interval, in %
    print(
        f"sampling a tree of {figures['processes']:.0f} processes, "
        f"{figures['threads']:.0f} threads (median of {max(args.runs, 20)} interleaved runs)"
    )
    rows = [
        ("TreeSampler.sample()", f"{figures['sampler_ms']:7.2f} ms", ""),
        ("os.open/os.read loop (baseline)", f"{figures['baseline_ms']:7.2f} ms", ""),
        ("ratio sampler / baseline", f"{ratio:7.2f}", "goal <= 1.3"),
        ("CPU per sample (process_time)", f"{figures['cpu_ms']:7.2f} ms", ""),
        ("watch CPU at 1 s interval", f"{watch_pct:6.2f} %", "goal < 3%"),
    ]
    for label, value, goal in rows:
        print(f"  {label:<34} {value:>10}  {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
