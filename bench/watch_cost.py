"""CPU and memory cost of `oversub watch` at its default 1 s interval, on synthetic trees.

Runs the real command, `oversub watch ROOT --format ndjson --duration D`, as a subprocess
with stdout to a file, against a tree from bench/trees.py (idle threads), and reaps it with
os.wait4, whose rusage gives its user + system CPU time. While it runs, this script reads
its /proc/PID/stat and /proc/PID/status every 0.25 s.

  whole run     (ru_utime + ru_stime) / wall time from start to exit, in % of one CPU:
                what the command costs, start-up and first sample (environ and maps of
                every process) included.
  steady state  utime + stime from /proc/PID/stat, read by this script every 0.25 s, between
                the first reading at least 3 s after the start and the last one before the
                exit, over the wall time between them: what each further second costs.
  one-off       whole-run CPU minus the steady-state rate times the wall time: start-up,
                the first sample (environ, cmdline and maps of every process) and the summary.
                The whole-run percentage is steady state + one-off / duration.
  peak RSS      VmHWM of /proc/PID/status, the last reading before the exit. Not wait4's
                ru_maxrss: on Linux that also counts the high-water mark of the memory the
                child was forked (vforked) from, this benchmark's own.

Goals at 1,000 and at 5,000 threads (issue 21): whole run < 3% of one CPU, peak RSS
< 60 MiB. The idle threads of these trees are what most threads of a real job are between
its bursts: `watch` reads again only the processes that ran (docs/signals.md).

    python bench/watch_cost.py [--trees 50x20,250x20] [--duration 20] [--runs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import startup
from trees import print_until_stopped, tree

CPU_GOAL_PCT = 3.0
RSS_GOAL_MIB = 60.0
GOAL_THREADS = 5000
"""The goals apply to the trees of up to this many threads."""
STEADY_AFTER_S = 3.0
POLL_S = 0.25

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SCRIPT = Path(sys.executable).with_name("oversub")
LAUNCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oversub"]


@dataclass(frozen=True)
class WatchResult:
    procs: int
    threads: int
    duration_s: float
    """--duration given."""
    wall_s: float
    cpu_s: float
    """ru_utime + ru_stime."""
    steady_pct: float | None
    """None when the run was too short to have a steady-state window."""
    peak_rss_mib: float
    lines: int
    """ndjson lines written (one per interval plus the summary)."""
    runs_pct: tuple[float, ...] = ()
    """Whole-run % of every run on this tree; the figures above are the median run's."""

    @property
    def whole_pct(self) -> float:
        return self.cpu_s / self.wall_s * 100

    @property
    def one_off_ms(self) -> float | None:
        """CPU beyond the steady-state rate: start-up, first sample, summary."""
        if self.steady_pct is None:
            return None
        return (self.cpu_s - self.steady_pct / 100 * self.wall_s) * 1000

    @property
    def has_goals(self) -> bool:
        return self.threads <= GOAL_THREADS * 1.05

    @property
    def cpu_pass(self) -> bool:
        return self.whole_pct < CPU_GOAL_PCT

    @property
    def rss_pass(self) -> bool:
        return self.peak_rss_mib < RSS_GOAL_MIB


def _cpu_ticks(pid: int) -> int | None:
    """utime + stime of a live process, in clock ticks; None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[11]) + int(fields[12])


def _hwm_kib(pid: int) -> int | None:
    """VmHWM of a live process in KiB; None once it has exited (a zombie has no memory)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass(frozen=True)
class _Run:
    wall_s: float
    cpu_s: float
    steady_pct: float | None
    hwm_kib: int
    lines: int
    output: bytes = b""
    """What the command wrote to stdout."""


def watch_once(root_pid: int | None, duration_s: float, target: list[str] | None = None) -> _Run:
    """Run `oversub watch` once on `root_pid` (or on `target`, e.g. ["--all"]) and measure it."""
    what = target if target is not None else [str(root_pid)]
    argv = [*LAUNCH, "watch", *what, "--format", "ndjson", "--duration", str(duration_s)]
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    hwm = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        try:
            # Not proc.poll(): it reaps the child and loses its rusage. Look without reaping.
            while not os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                ticks, kib, now = _cpu_ticks(proc.pid), _hwm_kib(proc.pid), time.monotonic()
                if kib is not None:
                    hwm = max(hwm, kib)
                if ticks is not None:
                    if first is None and now - t0 >= STEADY_AFTER_S:
                        first = (now, ticks)
                    last = (now, ticks)
                time.sleep(POLL_S)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.monotonic() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {err.read()!r}")
        out.seek(0)
        output = out.read()
        lines = output.count(b"\n")
    steady = None
    if first is not None and last is not None and last[0] - first[0] >= 2.0:
        steady = (last[1] - first[1]) / CLK_TCK / (last[0] - first[0]) * 100
    return _Run(wall, usage.ru_utime + usage.ru_stime, steady, hwm, lines, output)


def run(shapes: list[tuple[int, int]], duration_s: float, runs: list[int]) -> list[WatchResult]:
    """`runs[i]` watch runs on tree `shapes[i]`; each result is the median run (by whole-run
    CPU %) with every run's figure in `runs_pct`."""
    startup.byte_compile()  # as installed; otherwise every run recompiles oversub's modules
    results = []
    for (procs, threads), n in zip(shapes, runs, strict=True):
        with tree(procs, threads) as t:
            done = [watch_once(t.root_pid, duration_s) for _ in range(n)]
        done.sort(key=lambda r: r.cpu_s / r.wall_s)
        r = done[len(done) // 2]
        results.append(
            WatchResult(
                procs=t.procs,
                threads=t.threads,
                duration_s=duration_s,
                wall_s=r.wall_s,
                cpu_s=r.cpu_s,
                steady_pct=r.steady_pct,
                peak_rss_mib=max(d.hwm_kib for d in done) / 1024,
                lines=r.lines,
                runs_pct=tuple(d.cpu_s / d.wall_s * 100 for d in done),
            )
        )
    return results


def format_text(r: WatchResult) -> str:
    steady = "-" if r.steady_pct is None else f"{r.steady_pct:.2f} %"
    one_off = "-" if r.one_off_ms is None else f"{r.one_off_ms:.0f} ms"
    text = (
        f"watch, {r.procs} processes, {r.threads} threads, --duration {r.duration_s:g}: "
        f"{r.cpu_s * 1000:.0f} ms CPU in {r.wall_s:.1f} s = {r.whole_pct:.2f} % of one CPU "
        f"(steady state {steady}, one-off {one_off}), peak RSS {r.peak_rss_mib:.1f} MiB, "
        f"{r.lines} lines"
    )
    if len(r.runs_pct) > 1:
        text += f"; median of {len(r.runs_pct)} runs: " + ", ".join(
            f"{p:.2f} %" for p in r.runs_pct
        )
    if r.has_goals:
        text += (
            f"\n  goals: CPU < {CPU_GOAL_PCT:g} %: {'PASS' if r.cpu_pass else 'MISS'}, "
            f"RSS < {RSS_GOAL_MIB:g} MiB: {'PASS' if r.rss_pass else 'MISS'}"
        )
    return text


def main() -> int:
    from sampling import parse_shapes

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trees", default="50x20,250x20", help="PROCSxTHREADS,...")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per watch run")
    parser.add_argument("--runs", type=int, default=1, help="watch runs per tree (median)")
    args = parser.parse_args()
    shapes = parse_shapes(args.trees)
    return print_until_stopped(
        lambda: map(format_text, run(shapes, args.duration, [args.runs] * len(shapes)))
    )


if __name__ == "__main__":
    sys.exit(main())
