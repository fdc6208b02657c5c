"""Cost of one full sample of a process tree: oversub's sampler against four other ways.

On a synthetic tree (bench/trees.py: idle threads), after one warm-up sample, each round
times these once, in a rotated order so machine noise and drift hit all alike:

  oversub   `TreeSampler(root_pid).sample()` (steady state: files held open, re-read
            with pread; a process whose CPU clock did not move since its last reading keeps
            it, so in these idle trees no per-thread file is read: docs/signals.md,
            "Reading only what can have changed").
  oversub, every process read
            the same sampler with that shortcut off (`cpu_clock` that never answers): what
            a tree costs whose every process ran while most threads slept. cmdline and maps
            are re-read every 5 s for such processes, which lands in a few rounds and the
            median leaves out; `watch_cost.py` pays it.
  oversub, every process read, no attribution
            the same without thread attribution (`probe.owners`): the goal is that
            attribution costs at most 10 % more (`ATTRIBUTION_GOAL`: the ratio of the two
            rows' ratios to the floor).
  floor     plain os.open/os.read/os.close (os.listdir for directories) of exactly the
            files the sampler reads when it reads every process, with just enough parsing
            to find the tree:
              - list /proc, read /proc/PID/stat of every process (the ppid scan, which
                also gives each tree process's stat line),
              - per tree process: list /proc/PID/task,
              - per thread: /proc/PID/task/TID/schedstat and /proc/PID/task/TID/stat
                (the sampler reads status instead of stat only for a thread that ran since
                the last sample: none in these idle trees),
              - host: /proc/stat and /proc/pressure/cpu (no cgroup cpu.stat: the sampler
                is built without a quota, as `TreeSampler(root_pid)`).
  floor+status  the same, with status and schedstat per thread: what a sampler reads
            when it re-reads every thread's switch counters (oversub before it skipped
            threads that had not run); the price of the naive choice of files.
  psutil    a naive psutil sampler: `Process(root).children(recursive=True)`, the thread
            ids of each process from `threads()`, then per thread `psutil.Process(tid)`
            and, inside one `oneshot()`, cpu_times(), num_ctx_switches() and status();
            plus psutil.cpu_times() for the host.
  ps        `ps -L -o pid,tid,stat,time,pcpu,comm -p PIDS` (wall time of the subprocess,
            output read through a pipe).
  pidstat   `pidstat -u -w -t -p PIDS`: one report (since boot) of CPU and context
            switches per thread.
  A tool that is not on PATH gets a row that says "not installed" and names its package
  (`make bench` installs both first where it can: tools/syspkg.py).

Each figure is the median wall time; each ratio is the median of the per-round ratios to
the floor of the same round (the two rows that read every process are timed in rounds of
their own, each with the floor, after the others: one sampler at a time). Goals: both
oversub rows with attribution <= 1.15 x the floor, and attribution <= 1.10 x the same
sampler without it (the ratio of their ratios to the floor); a busy tree (`--busy`: every
process read) <= 1.0 x the floor, where the held files must keep it below.

The soft RLIMIT_NOFILE is raised to the hard one first, as `oversub` does at start
(`run.fdlimit`; `--no-raise` keeps it as started). `--busy` measures only the sampler that
reads every process against the floor (the 20,000-thread row of `make bench`).

    python bench/sampling.py [--trees 50x20,250x20] [--rounds 15] [--busy] [--no-raise]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
from trees import Tree, print_until_stopped, tree

from oversub.probe.sampler import TreeSampler

GOAL = 1.15
"""oversub's sample / the floor, at most."""
ATTRIBUTION_GOAL = 1.10
"""The sampler with thread attribution / without it, at most (issue 21)."""
BUSY_GOAL = 1.0
"""A busy tree's sample (every process read) / the floor at 20,000 threads, at most: what
the held files buy must not be lost to the descriptor limit (issue 39)."""

EVERY = "oversub, every process read"
"""The row of the sampler without its process-level shortcut."""
PLAIN = "oversub, every process read, no attribution"
"""The same without thread attribution."""


def _never(pid: int) -> int | None:
    """A CPU clock that never answers: every process is read at every sample."""
    return None


class _NoOwners:
    """An owner reader that attributes nothing (`ProcessSample.owners` None)."""

    def read(self, *args: object) -> None:
        return None

    def keep(self, pid: int, start_ticks: int) -> None:
        return None

    def end_sample(self) -> None:
        return None


def unattributed(root_pid: int) -> TreeSampler:
    """A sampler that reads every process at every sample, without thread attribution."""
    sampler = TreeSampler(root_pid, cpu_clock=_never)
    sampler._owners = _NoOwners()  # type: ignore[assignment]
    return sampler


def has_goal(name: str) -> bool:
    """The rows the floor goal applies to."""
    return name in ("oversub", EVERY)


PS_FIELDS = "pid,tid,stat,time,pcpu,comm"

TOOLS = {"ps": "procps", "pidstat": "sysstat"}
"""The commands the table compares against, and the Debian package of each."""


def tool_version(name: str) -> str | None:
    """First line of `NAME -V` (both tools print their version so), or None when absent."""
    if shutil.which(name) is None:
        return None
    out = subprocess.run([name, "-V"], capture_output=True, text=True, check=False)
    lines = (out.stdout + out.stderr).splitlines()
    return lines[0].strip() if lines else "version unknown"


def missing_tools() -> list[str]:
    """'pidstat (package sysstat)' for each comparison tool not on PATH."""
    return [f"{name} (package {pkg})" for name, pkg in TOOLS.items() if shutil.which(name) is None]


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 16384)
    finally:
        os.close(fd)


def _read_to_end(path: str) -> bytes:
    # /proc/stat and /proc/pressure/cpu are seq_files: read until end of file, as the
    # sampler does (a short read does not mean the end).
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def floor_read(root_pid: int, leaves: tuple[str, ...] = ("schedstat", "stat")) -> int:
    """The files the sampler reads in a steady-state tick, read plainly (`leaves` per
    thread). Returns the number of threads read."""
    ppids: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                data = _read(f"/proc/{name}/stat")
            except OSError:
                continue
            ppids[int(name)] = int(data[data.rfind(b")") + 2 :].split(None, 2)[1])
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    tree_pids, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        tree_pids.append(pid)
        todo.extend(children.get(pid, ()))
    n = 0
    for pid in tree_pids:
        task = f"/proc/{pid}/task"
        try:
            tids = os.listdir(task)
        except OSError:
            continue
        for tid in tids:
            try:
                for leaf in leaves:
                    _read(f"{task}/{tid}/{leaf}")
            except OSError:
                continue
            n += 1
    _read_to_end("/proc/stat")
    with contextlib.suppress(OSError):  # no PSI on this kernel
        _read_to_end("/proc/pressure/cpu")
    return n


def psutil_naive(root_pid: int) -> int:
    """A per-thread psutil sampler as one would first write it. Returns threads read."""
    root = psutil.Process(root_pid)
    n = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            tids = [t.id for t in proc.threads()]
        except psutil.Error:
            continue
        for tid in tids:
            try:
                thread = psutil.Process(tid)
                with thread.oneshot():
                    thread.cpu_times()
                    thread.num_ctx_switches()
                    thread.status()
            except psutil.Error:
                continue
            n += 1
    psutil.cpu_times()
    return n


def _command(argv: list[str]) -> Callable[[], int]:
    def run() -> int:
        out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
        return out.stdout.count(b"\n")

    return run


@dataclass(frozen=True)
class Method:
    name: str
    what: str
    run: Callable[[], object] | None
    """None: not available on this machine (`what` says why)."""


@dataclass(frozen=True)
class Row:
    name: str
    what: str
    median_ms: float | None
    ratio: float | None
    """Median of per-round ratios to the floor."""


@dataclass(frozen=True)
class TreeResult:
    procs: int
    threads: int
    sampled_threads: int
    """Threads in oversub's warm-up sample (should equal `threads`)."""
    rounds: int
    rows: tuple[Row, ...]
    attribution: float | None = None
    """The sampler with attribution / without it: the ratio of their ratios to the floor."""
    held: tuple[int, int] | None = None
    """(files held open, files read) by the sampler that reads every process, in its last
    sample: what the descriptor limit let it hold (`procfiles._default_max_fds`)."""
    goal: float = GOAL
    """The rows with a goal (`has_goal`), at most this ratio to the floor."""

    @property
    def oversub_ratio(self) -> float:
        ratio = self.rows[0].ratio
        assert ratio is not None
        return ratio


def _external(argv: list[str]) -> Method:
    """A row for a comparison tool, timed as a subprocess, or 'not installed'."""
    name = argv[0]
    what = f"`{' '.join(argv[:-1])} PIDS`"
    if shutil.which(name) is None:
        return Method(name, f"{what}: not installed (package {TOOLS[name]})", None)
    return Method(name, what, _command(argv))


def methods(t: Tree, sampler: TreeSampler) -> list[Method]:
    pids = ",".join(map(str, t.pids))
    return [
        Method("oversub", "`TreeSampler(root).sample()`", sampler.sample),
        _floor(t),
        Method(
            "floor+status",
            "the same, reading status + schedstat per thread",
            lambda: floor_read(t.root_pid, ("status", "schedstat")),
        ),
        Method(
            "psutil",
            "naive: `Process(tid)` per thread, cpu_times + num_ctx_switches + status",
            lambda: psutil_naive(t.root_pid),
        ),
        _external(["ps", "-L", "-o", PS_FIELDS, "-p", pids]),
        _external(["pidstat", "-u", "-w", "-t", "-p", pids]),
    ]


def _floor(t: Tree) -> Method:
    return Method(
        "floor", "os.open/os.read/os.close of the same files", lambda: floor_read(t.root_pid)
    )


def _rounds(ms: list[Method], rounds: int) -> list[dict[str, float]]:
    """Each round's wall time per method, in a rotated order, after one warm-up run each."""
    live = [m for m in ms if m.run is not None]
    for m in live:  # warm every path (page cache, imports, psutil's caches) once
        assert m.run is not None
        m.run()
    out = []
    for i in range(rounds):
        k = i % len(live)
        this_round: dict[str, float] = {}
        for m in live[k:] + live[:k]:
            assert m.run is not None
            t0 = time.perf_counter()
            m.run()
            this_round[m.name] = time.perf_counter() - t0
        out.append(this_round)
    return out


def _rows(ms: list[Method], measured: list[dict[str, float]]) -> list[Row]:
    return [
        Row(
            m.name,
            m.what,
            statistics.median(r[m.name] for r in measured) * 1000 if m.run else None,
            statistics.median(r[m.name] / r["floor"] for r in measured) if m.run else None,
        )
        for m in ms
    ]


EVERY_WHAT = "the same, every process read (`cpu_clock=lambda pid: None`)"


def _held(s: TreeSampler, t: Tree) -> tuple[int, int]:
    """Per-thread files the sampler holds open, and the files a sample reads (schedstat and
    stat of each thread)."""
    return len(s._threads.held), 2 * t.threads


def measure_tree(t: Tree, rounds: int) -> TreeResult:
    """Three phases, each with one sampler (each may hold what RLIMIT_NOFILE leaves it, as
    `watch` does) and its own floor: the sampler as `watch` runs it against the other tools;
    then the sampler that reads every process; then the same without attribution. The cost
    of attribution is the ratio of the last two rows' ratios to their floors."""
    with TreeSampler(t.root_pid) as sampler:
        first = sampler.sample()  # reads environ, cmdline and maps of every process
        sampled = sum(len(p.threads) for p in first.processes.values())
        ms = methods(t, sampler)
        rows = _rows(ms, _rounds(ms, rounds))
    plain_what = "the same without thread attribution (`probe.owners`)"
    held = None
    for i, (name, what, make) in enumerate(
        (
            (EVERY, EVERY_WHAT, lambda: TreeSampler(t.root_pid, cpu_clock=_never)),
            (PLAIN, plain_what, lambda: unattributed(t.root_pid)),
        )
    ):
        with make() as s:
            s.sample()
            pair = [Method(name, what, s.sample), _floor(t)]
            rows.insert(1 + i, _rows(pair, _rounds(pair, rounds))[0])
            held = held or _held(s, t)
    every, plain = (next(r.ratio for r in rows if r.name == n) for n in (EVERY, PLAIN))
    assert every is not None and plain is not None
    return TreeResult(t.procs, t.threads, sampled, rounds, tuple(rows), every / plain, held)


def measure_busy(t: Tree, rounds: int) -> TreeResult:
    """Only the sampler that reads every process (a busy tree: every process ran since the
    last sample) against the floor: the row of a tree too big for the other tools' rounds
    (ps, pidstat and psutil take seconds at 20,000 threads)."""
    with TreeSampler(t.root_pid, cpu_clock=_never) as s:
        first = s.sample()
        sampled = sum(len(p.threads) for p in first.processes.values())
        pair = [Method(EVERY, EVERY_WHAT, s.sample), _floor(t)]
        rows = _rows(pair, _rounds(pair, rounds))
        held = _held(s, t)
    return TreeResult(t.procs, t.threads, sampled, rounds, tuple(rows), None, held, BUSY_GOAL)


def raise_limit() -> str:
    """Raise the soft RLIMIT_NOFILE as `oversub` does at start (`run.fdlimit`): the samplers
    measured here run in this process. Says what it was and is."""
    import resource

    from oversub.run import fdlimit

    before = fdlimit.raise_soft()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    was = "" if before is None else f"{before} at start, raised to "
    return f"RLIMIT_NOFILE soft {was}{soft} (hard {hard})"


def run(
    shapes: list[tuple[int, int]], rounds: list[int], *, busy_only: bool = False
) -> list[TreeResult]:
    """One result per tree shape; `busy_only`: only the sampler that reads every process
    against the floor (`measure_busy`)."""
    measure = measure_busy if busy_only else measure_tree
    results = []
    for (procs, threads), n in zip(shapes, rounds, strict=True):
        with tree(procs, threads, timeout_s=max(60.0, procs * 0.2)) as t:
            results.append(measure(t, n))
    return results


def format_text(r: TreeResult) -> str:
    lines = [
        f"one sample of {r.procs} processes, {r.threads} threads "
        f"(median of {r.rounds} interleaved rounds)"
    ]
    for row in r.rows:
        if row.median_ms is None or row.ratio is None:
            lines.append(f"  {row.name:<44} {'-':>10}  {row.what}")
            continue
        goal = ""
        if has_goal(row.name):
            goal = f"  goal <= {r.goal:.2f}: {'PASS' if row.ratio <= r.goal else 'MISS'}"
        lines.append(f"  {row.name:<44} {row.median_ms:8.2f} ms  x{row.ratio:6.2f}{goal}")
    lines.append(attribution_line(r))
    if r.held is not None:
        lines.append(f"  {held_line(r.held)}")
    return "\n".join(lines)


def held_line(held: tuple[int, int]) -> str:
    """How many of the files a sample reads the sampler that reads every process held."""
    kept, read = held
    return f"held open: {kept:,} of the {read:,} per-thread files a sample reads"


def attribution_line(r: TreeResult) -> str:
    """What thread attribution costs a sample that reads every process, and its goal."""
    if r.attribution is None:
        return "  attribution: not measured (a busy tree: the sampler that reads every process)"
    verdict = "PASS" if r.attribution <= ATTRIBUTION_GOAL else "MISS"
    return (
        f"  attribution: x{r.attribution:.2f} the sampler without it "
        f"(goal <= {ATTRIBUTION_GOAL:.2f}: {verdict})"
    )


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for part in text.split(","):
        procs, threads = part.lower().split("x")
        shapes.append((int(procs), int(threads)))
    return shapes


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trees", default="50x20,250x20", help="PROCSxTHREADS,...")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--busy",
        action="store_true",
        help="only the sampler that reads every process, against the floor (big trees)",
    )
    parser.add_argument(
        "--no-raise",
        action="store_true",
        help="keep the soft RLIMIT_NOFILE as started (oversub raises it to the hard one)",
    )
    args = parser.parse_args()
    if not args.busy:
        for tool in missing_tools():
            print(f"sampling: {tool} not found: its row says 'not installed'", file=sys.stderr)
    shapes = parse_shapes(args.trees)
    if not args.no_raise:
        print(raise_limit())
    rounds = [args.rounds] * len(shapes)
    return print_until_stopped(lambda: map(format_text, run(shapes, rounds, busy_only=args.busy)))


if __name__ == "__main__":
    sys.exit(main())
