"""Cost of one window of the PC sampler (`probe.perfpc`), against the sampler's floor.

    .venv/bin/python bench/perfpc_cost.py [--rounds 11] [--window 0.3] [--threads 2]
    .venv-real/bin/python bench/perfpc_cost.py --example xgboost   # a real library's worker

Starts a child whose `--threads` threads are busy in Python loops (their PCs lie in the
interpreter's library, whose `.dynsym` the mapper reads, as a real job's do) and a tree of
50 processes x 20 idle threads (bench/trees.py); with `--example LIB`, one process of
`examples/libraries.py LIB` instead, measured once its clock started (its busiest threads).
Then, in rounds: one plain-read floor of that tree (`sampling.floor_read`: the files a
sample reads, the 1,000-thread floor of `make bench`), and one window of the probe on the
child's busy threads: `start` (an event, a ring and its mapping per thread, enabled
together) and `finish` (disabled, every ring read and closed, PCs mapped through maps and
the objects' files). The CPU time of this process is taken around `start` and around
`finish` (the window itself sleeps). Prints the first window (function tables read;
ctypes, imported once per run, apart) and the median of the later ones (tables kept), their
ratio to the floor of the same rounds, the samples per window, the descriptors open before
and after, what the cadence's first minute costs (`perfpc.GAPS_S`: windows at 0, 1, 3, 7,
15, 30 and 60 s) and what one window every K seconds per process costs, in % of one CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sampling import floor_read
from trees import print_until_stopped, tree

from oversub.core.pcprofile import PcProfile
from oversub.core.plural import count
from oversub.probe import perfpc
from oversub.probe.pcmap import PcMapper

CHILD = """
import sys, threading, time
def busy():
    while True:
        sum(i * i for i in range(1000))
for _ in range(int(sys.argv[1])):
    threading.Thread(target=busy, daemon=True).start()
print(" ".join(str(t.native_id) for t in threading.enumerate()[1:]), flush=True)
time.sleep(600)
"""
EVERY_S = (10, 30)
"""Cadences shown: one window per process every 10 s and every 30 s."""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class NotUsable(Exception):
    """perf events cannot be used here: the message says why."""


def _window(pid: int, tids: list[int], seconds: float, mapper: PcMapper) -> tuple[float, int]:
    """CPU seconds of this process spent in start + finish; samples taken."""
    t0 = time.process_time()
    window = perfpc.start(pid, tids, mapper=mapper)
    cpu = time.process_time() - t0
    if isinstance(window, PcProfile):
        raise NotUsable(f"perf events not usable here: {window.why}")
    with window:
        time.sleep(seconds)
        t0 = time.process_time()
        profile = window.finish()
        cpu += time.process_time() - t0
    return cpu, profile.samples


def _busiest(pid: int) -> list[int]:
    def cpu(tid: str) -> int:
        try:
            return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    tids = os.listdir(f"/proc/{pid}/task")
    before = {t: cpu(t) for t in tids}
    time.sleep(0.5)
    ran = {t: cpu(t) - before[t] for t in tids}
    return [int(t) for t in sorted(tids, key=lambda t: -ran[t]) if ran[t] > 0.025e9]


def _target(threads: int, example: str | None) -> tuple[subprocess.Popen[str], int, list[int]]:
    """The process whose threads are sampled: its Popen, pid and busy threads."""
    if example is None:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(threads)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert child.stdout is not None
        return child, child.pid, [int(t) for t in child.stdout.readline().split()]
    script = Path(__file__).resolve().parents[1] / "examples" / "libraries.py"
    argv = [sys.executable, str(script), example, "--procs", "1", "--seconds", "3600"]
    child = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert child.stderr is not None
    line = child.stderr.readline()  # "proc=0 pid=P started", or the end of a failure
    if "started" not in line:
        raise SystemExit(f"examples/libraries.py {example} did not start: {line.strip()}")
    pid = int(line.split("pid=")[1].split()[0])
    return child, pid, _busiest(pid)


def measure(rounds: int, seconds: float, threads: int, example: str | None) -> Iterator[str]:
    """The figures, one line each (one line saying why when perf events cannot be used)."""
    try:
        yield from _measure(rounds, seconds, threads, example)
    except NotUsable as exc:
        yield str(exc)


def _measure(rounds: int, seconds: float, threads: int, example: str | None) -> Iterator[str]:
    child, pid, tids = _target(threads, example)
    try:
        with tree(50, 20) as t:
            mapper = PcMapper()
            t0 = time.process_time()
            perfpc.default_syscall()
            ctypes_s = time.process_time() - t0
            fds_before = _fds()
            first, first_samples = _window(pid, tids, seconds, mapper)
            floors, windows, samples = [], [], []
            for _ in range(rounds):
                t0 = time.process_time()
                floor_read(t.root_pid)
                floors.append(time.process_time() - t0)
                cpu, n = _window(pid, tids, seconds, mapper)
                windows.append(cpu)
                samples.append(n)
            fds_after = _fds()
            floor = statistics.median(floors)
            later = statistics.median(windows)
            ratios = statistics.median(w / f for w, f in zip(windows, floors, strict=True))
            what = f"examples/libraries.py {example}" if example else "Python loops"
            busy = count(len(tids), "busy thread")
            yield f"target: {what}, {busy}, window {seconds:g} s, {count(rounds, 'round')}"
            yield f"floor (plain read of {t.threads:,} threads): {floor * 1e3:.2f} ms"
            yield f"once per run: ctypes imported, perf_event_open found: {ctypes_s * 1e3:.2f} ms"
            yield (
                f"first window (function tables read): {first * 1e3:.2f} ms CPU, "
                f"{first / floor:.2f} x the floor, {first_samples} samples"
            )
            yield (
                f"later windows (tables kept): {later * 1e3:.2f} ms CPU median "
                f"(min {min(windows) * 1e3:.2f}, max {max(windows) * 1e3:.2f}), "
                f"{ratios:.2f} x the floor; {statistics.median(samples):.0f} samples median"
            )
            yield f"descriptors open: {fds_before} before, {fds_after} after"
            # The cadence's first minute (`perfpc.GAPS_S`): the first window, then the later
            # ones at 1, 3, 7, 15, 30 s and each EVERY_S after.
            ramp = [0.0]
            for gap in perfpc.GAPS_S:
                ramp.append(ramp[-1] + gap)
            ramp_s = first + (len(ramp) - 1) * later
            yield (
                f"the cadence's first {ramp[-1]:g} s ({len(ramp)} windows at "
                f"{', '.join(f'{t:g}' for t in ramp)} s): {ramp_s * 1e3:.2f} ms, "
                f"{100 * ramp_s / ramp[-1]:.3f} % of one CPU"
            )
            for every in EVERY_S:
                yield (
                    f"one window every {every} s per process: {100 * later / every:.3f} % of "
                    "one CPU"
                )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--window", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--example", help="an examples/libraries.py library to sample")
    args = parser.parse_args()
    if args.rounds < 1 or not 0 < args.window <= perfpc.MAX_SECONDS or args.threads < 1:
        parser.error(f"--rounds >= 1, 0 < --window <= {perfpc.MAX_SECONDS:g}, --threads >= 1")
    return print_until_stopped(
        lambda: measure(args.rounds, args.window, args.threads, args.example)
    )


if __name__ == "__main__":
    sys.exit(main())
