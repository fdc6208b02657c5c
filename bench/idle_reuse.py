"""What `watch` misses by keeping the last reading of a process that did not run.

The sampler reads a process's threads again only when its CPU clock moved
(`procstat.process_cpu_ns`: the sum of its threads' scheduler runtime, in ns), or its thread
count, reaped children's time, state, comm, parent or start time did, or its main thread is
runnable, or one of its threads was runnable at its last reading (`TreeSampler._reusable`).
This script checks that rule on real processes and measures what it leaves out, against a
sampler that reads every thread at every sample (a `cpu_clock` that never answers), both
sampling the same tree side by side every 0.5 s:

  bursty tree   PROCS processes of THREADS threads, each sleeping 20 ms to 0.4 (k + 1) s
                (k: the process's index) and then running ~50 µs. For every process
                interval where the rule kept the reading, any per-thread counter other than
                run delay that the full reading shows moved is a violation (expected: 0).
                Also counted: intervals whose clock moved but whose stat utime + stime
                (clock ticks) did not: what a tick-based rule would have counted idle.
  late waiter   a process whose main thread sleeps and whose second thread, SCHED_IDLE,
                sleeps 1.5 s and then always wants to run, beside two busy nice-0 processes
                per CPU in the same session (so that autogroups do not give it a share).
                Once woken it waits; until it first runs, its process's clock and stat line
                do not move and its last reading showed no runnable thread, so the rule
                keeps that reading: the run delay the kernel adds while it waits (when it
                moves the queued thread between CPUs; the rest only when the thread runs)
                is shown late. Counted: intervals kept while the full reading showed more
                run delay, and that delay; and the delay both had seen at the end (equal:
                schedstat is cumulative, nothing is lost once the process is read again).

Run under the CPU lock: the late-waiter part keeps every CPU busy (about SECONDS s).

    python bench/idle_reuse.py [--procs 10] [--threads 3] [--seconds 12]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

from trees import print_until_stopped

from oversub.core.samples import ProcessSample, TreeSample
from oversub.probe.procfiles import read_small
from oversub.probe.procstat import parse_stat, process_cpu_ns
from oversub.probe.sampler import TreeSampler

_BURSTY = r"""
import os, random, sys, threading, time
procs, threads = int(sys.argv[1]), int(sys.argv[2])
def burst(seed, longest):
    rnd = random.Random(seed)
    while True:
        time.sleep(rnd.uniform(0.02, longest))
        end = time.perf_counter() + 50e-6
        while time.perf_counter() < end:
            pass
def member(index):
    for i in range(threads):
        args = (os.getpid() * 100 + i, 0.4 * (index + 1))
        threading.Thread(target=burst, args=args, daemon=True).start()
    time.sleep(3600)
for k in range(1, procs):
    if os.fork() == 0:
        member(k)
member(0)
"""

_LATE = r"""
import os, threading, time
def waiter():
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread only
    time.sleep(1.5)
    while True:
        pass
threading.Thread(target=waiter, daemon=True).start()
time.sleep(3600)
"""

_HOG = "while True: pass"


@contextlib.contextmanager
def _started(*argvs: list[str], session: bool = True) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start `argvs`, each in its own session (killed as a group) unless `session` is False:
    then all stay in this one, so that the kernel's autogroups (one per session) do not give
    each of them an equal share and the SCHED_IDLE thread really waits."""
    procs = [subprocess.Popen(a, start_new_session=session) for a in argvs]
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                if session:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()
            p.wait()


def _never(pid: int) -> int | None:
    return None


def _ticks(pid: int) -> int | None:
    try:
        stat = parse_stat(read_small(f"/proc/{pid}/stat"))
    except (OSError, ValueError):
        return None
    return stat.utime_ticks + stat.stime_ticks


def _counters(p: ProcessSample) -> dict[int, tuple[int, int | None, int | None]]:
    """Per thread what only running moves: CPU time and both switch counters."""
    return {t.tid: (t.cpu_ns, t.voluntary_ctx, t.involuntary_ctx) for t in p.threads}


def _delay(p: ProcessSample) -> int:
    return sum(t.run_delay_ns or 0 for t in p.threads)


def _pair(root: int) -> tuple[TreeSampler, TreeSampler]:
    return TreeSampler(root), TreeSampler(root, cpu_clock=_never)


def bursty(procs: int, threads: int, seconds: float) -> str:
    argv = [sys.executable, "-c", _BURSTY, str(procs), str(threads)]
    with _started(argv) as (root,):
        time.sleep(1.0)
        rule, full = _pair(root.pid)
        still = kept = ran = violations = sub_tick = 0
        sub_tick_ns = 0
        with rule, full:
            prev: TreeSample | None = None
            prev_mine: TreeSample | None = None
            ticks: dict[int, int | None] = {}
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                clocks = {pid: process_cpu_ns(pid) for pid in (prev.processes if prev else ())}
                mine, every = rule.sample(), full.sample()
                now_ticks = {pid: _ticks(pid) for pid in every.processes}
                for pid, p in mine.processes.items():
                    truth = every.processes.get(pid)
                    old = prev.processes.get(pid) if prev is not None else None
                    if truth is None or old is None:
                        continue
                    if (
                        clocks.get(pid) == process_cpu_ns(pid)
                        and p.start_ticks == truth.start_ticks
                    ):
                        # Nothing ran from before the rule's reading to after the full one.
                        still += 1
                        kept += prev_mine is not None and prev_mine.processes.get(pid) is p
                        violations += _counters(p) != _counters(truth)
                    if _counters(old) != _counters(truth):
                        ran += 1
                        if now_ticks.get(pid) is not None and now_ticks[pid] == ticks.get(pid):
                            sub_tick += 1
                            sub_tick_ns += sum(t.cpu_ns for t in truth.threads) - sum(
                                t.cpu_ns for t in old.threads
                            )
                prev, prev_mine, ticks = every, mine, now_ticks
                time.sleep(0.5)
    return (
        f"bursty tree, {procs} processes x {threads} threads, {seconds:g} s at 0.5 s: "
        f"{still} process readings during which its clock did not move ({kept} of them "
        f"kept from an earlier sample), {violations} where a thread counter other than run "
        f"delay differs from the full reading (the rule's violations); "
        f"{ran} that ran, {sub_tick} of "
        f"which left utime + stime unchanged ({sub_tick_ns / 1e6:.1f} ms of CPU a tick-based "
        "rule counts idle)"
    )


def late_waiter(seconds: float) -> str:
    n = os.cpu_count() or 1
    hogs = [[sys.executable, "-c", _HOG] for _ in range(2 * n)]
    with _started([sys.executable, "-c", _LATE], *hogs, session=False) as (victim, *_):
        time.sleep(0.5)  # the waiter is asleep: the first reading shows nothing runnable
        rule, full = _pair(victim.pid)
        intervals = kept = late = 0
        late_ns = 0
        with rule, full:
            prev_mine = prev_every = None
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                mine = rule.sample().processes.get(victim.pid)
                every = full.sample().processes.get(victim.pid)
                if mine is None or every is None:
                    break
                if prev_mine is not None and prev_every is not None:
                    intervals += 1
                    if mine is prev_mine:
                        kept += 1
                        shown = _delay(every) - _delay(prev_every)
                        if shown > 0:
                            late += 1
                            late_ns += shown
                prev_mine, prev_every = mine, every
                time.sleep(0.5)
            seen_rule = _delay(prev_mine) if prev_mine is not None else 0
            seen_full = _delay(prev_every) if prev_every is not None else 0
    return (
        f"late waiter: a SCHED_IDLE second thread woken after 1.5 s beside {2 * n} busy "
        f"processes on {n} CPUs, {seconds:g} s at 0.5 s: its process's reading kept in "
        f"{kept} of {intervals} intervals, {late} of them while the full reading showed new "
        f"run delay ({late_ns / 1e6:.1f} ms shown late); run delay at the end "
        f"{seen_rule / 1e6:.1f} ms with the rule, {seen_full / 1e6:.1f} ms reading every thread"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--procs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args()
    return print_until_stopped(
        lambda: iter([bursty(args.procs, args.threads, args.seconds), late_waiter(args.seconds)])
    )


if __name__ == "__main__":
    sys.exit(main())
