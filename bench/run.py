"""The benchmark suite behind `make bench`: runs every measurement, writes bench/RESULTS.md.

  1. start-up of short commands (startup.py)
  2. one full sample of synthetic trees, oversub against a plain-read floor, psutil, ps and
     pidstat (sampling.py); and a busy tree of 20,000 threads, the sampler that reads every
     process against the floor
  3. CPU and peak RSS of `oversub watch` at the default 1 s interval (watch_cost.py)
  4. CPU of `oversub watch --all` on ~2,000 threads in 20 real cgroups (node_cost.py)
  5. one window of the PC sampler on 2 busy threads, against the floor (perfpc_cost.py)

Each script also runs alone and prints its figures. The trees are 50 processes x 20 idle
threads (~1,000 threads) and 250 x 20 (~5,000); every process they start is killed on exit,
Ctrl-C and SIGTERM included.

    python bench/run.py [--quick] [--output bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import node_cost
import perfpc_cost
import sampling
import startup
import tune_cost
import watch_cost
from trees import INTERRUPTED

from oversub.run.stopsignals import interrupt as stop_signals_interrupt

TREES = [(50, 20), (250, 20)]
BUSY_TREES = [(1000, 20)]
"""Measured only as a busy tree (`sampling.measure_busy`): 20,000 threads."""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _tools() -> str:
    return "; ".join(
        f"{name}: {sampling.tool_version(name) or f'not installed (package {pkg})'}"
        for name, pkg in sampling.TOOLS.items()
    )


def _revision() -> str:
    """The commit measured, and whether oversub/ had uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "oversub"], capture_output=True)
    return head.stdout.strip() + (" with uncommitted changes in oversub/" if dirty.stdout else "")


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _host_processes() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def _command() -> str:
    here = Path.cwd()
    exe = Path(sys.executable)
    with_venv = exe.relative_to(here) if exe.is_relative_to(here) else exe
    argv = shlex.join([str(with_venv), *sys.argv])
    return f"`make bench` (`{argv}`)" if "MAKELEVEL" in os.environ else f"`{argv}`"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "**MISS**"


def startup_table(r: startup.StartupResult) -> list[str]:
    lines = [
        f"## Start-up (median of {r.rounds} interleaved rounds, modules byte-compiled)",
        "",
        "| command | median | ratio to floor | goal | result | heavy modules imported |",
        "|---|---:|---:|---|---|---|",
    ]
    for row in r.rows:
        if row.ratio is None:
            lines.append(f"| `{row.label}` (floor) | {row.median_ms:.1f} ms | 1.00 | | | |")
        else:
            lines.append(
                f"| `{row.label}` | {row.median_ms:.1f} ms | {row.ratio:.2f} | "
                f"<= {startup.GOAL} | {_verdict(row.passed)} | {', '.join(row.heavy) or 'none'} |"
            )
    return lines


def sampling_table(r: sampling.TreeResult) -> list[str]:
    lines = [
        f"### {_n(r.procs)} processes, {_n(r.threads)} threads "
        f"(median of {r.rounds} interleaved rounds; oversub's warm-up sample saw "
        f"{_n(r.sampled_threads)} threads)",
        "",
        "| method | median | ratio to floor | goal | result |",
        "|---|---:|---:|---|---|",
    ]
    for row in r.rows:
        if row.median_ms is None or row.ratio is None:
            lines.append(f"| {row.name}: {row.what} | - | - | | |")
            continue
        goal = result = ""
        if sampling.has_goal(row.name):
            goal, result = f"<= {r.goal:g}", _verdict(row.ratio <= r.goal)
        figures = f"{row.median_ms:.2f} ms | {row.ratio:.2f}"
        lines.append(f"| {row.name}: {row.what} | {figures} | {goal} | {result} |")
    if r.attribution is not None:
        ok = r.attribution <= sampling.ATTRIBUTION_GOAL
        lines += [
            "",
            f"Thread attribution (`probe.owners`) costs a sample that reads every process "
            f"{r.attribution:.2f} x the same sampler without it (the ratio of their ratios to "
            f"the floor; goal <= {sampling.ATTRIBUTION_GOAL}): {_verdict(ok)}.",
        ]
    if r.held is not None:
        lines += ["", f"The sampler that reads every process {sampling.held_line(r.held)}."]
    return lines


def watch_table(results: list[watch_cost.WatchResult]) -> list[str]:
    lines = [
        "| tree | runs: whole run % each | CPU (user+sys) / wall | whole run, % of one CPU | "
        "steady state | one-off | peak RSS | goals | result |",
        "|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        steady = "-" if r.steady_pct is None else f"{r.steady_pct:.2f} %"
        one_off = "-" if r.one_off_ms is None else f"{r.one_off_ms:.0f} ms"
        runs = f"{len(r.runs_pct)}: " + ", ".join(f"{p:.2f} %" for p in r.runs_pct)
        if r.has_goals:
            goals = f"CPU < {watch_cost.CPU_GOAL_PCT:g} %; RSS < {watch_cost.RSS_GOAL_MIB:g} MiB"
            result = f"CPU {_verdict(r.cpu_pass)}; RSS {_verdict(r.rss_pass)}"
        else:
            goals = result = "none"
        lines.append(
            f"| {_n(r.procs)} processes, {_n(r.threads)} threads | {runs} | "
            f"{r.cpu_s * 1000:.0f} ms / {r.wall_s:.1f} s | {r.whole_pct:.2f} % | {steady} | "
            f"{one_off} | {r.peak_rss_mib:.1f} MiB | {goals} | {result} |"
        )
    return lines


def node_table(r: node_cost.NodeResult, watch_s: float) -> list[str]:
    steady = "-" if r.steady_pct is None else f"{r.steady_pct:.2f} %"
    runs = f"{len(r.runs_pct)}: " + ", ".join(f"{p:.2f} %" for p in r.runs_pct)
    return [
        f"## `oversub watch --all --format ndjson --duration {watch_s:g}` (node mode) at the "
        "default 1 s interval",
        "",
        f"A tree of {node_cost.PROCS} processes x {node_cost.THREADS} idle threads spread over "
        f"{node_cost.CGROUPS} real cgroups (5 processes each), plus the host's own processes: "
        "node mode reads every process of the node once per interval and splits the reading "
        "by cgroup. Measured as the watch runs above; see bench/node_cost.py.",
        "",
        "| node | runs: whole run % each | CPU (user+sys) / wall | whole run, % of one CPU | "
        "steady state | goal | result |",
        "|---|---|---:|---:|---:|---|---|",
        f"| {node_cost.describe(r)} | {runs} | {r.cpu_s * 1000:.0f} ms / {r.wall_s:.1f} s | "
        f"{r.whole_pct:.2f} % | {steady} | CPU < {node_cost.CPU_GOAL_PCT:g} % | "
        f"{_verdict(r.passed)} |",
    ]


def tune_table(r: tune_cost.TuneCost) -> list[str]:
    bare, trial = statistics.median(r.bare_s), statistics.median(r.trial_s)
    return [
        f"## `oversub tune`: its own cost per {r.seconds:g} s trial",
        "",
        "Bare: `python -c 'time.sleep(S)'` started and waited for; trial: the same command as "
        "one trial of `oversub tune` (the `seconds` of its JSON: variables set, started under "
        "the subreaper, sampled each second, tree stopped and reaped); medians.",
        "",
        "| bare | trial | overhead | goal | result |",
        "|---:|---:|---:|---|---|",
        f"| {bare:.3f} s | {trial:.3f} s | {1000 * r.overhead_s:.0f} ms = "
        f"{r.overhead_pct:.2f} % | <= {tune_cost.GOAL_PCT:g} % | "
        f"{_verdict(r.overhead_pct <= tune_cost.GOAL_PCT)} |",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds, short watch runs")
    parser.add_argument("--output", default=str(Path(__file__).with_name("RESULTS.md")))
    args = parser.parse_args()
    startup_rounds = 7 if args.quick else 21
    sample_rounds = [5, 3] if args.quick else [21, 11]
    busy_rounds = [3] if args.quick else [11]
    watch_s = 5.0 if args.quick else 20.0
    watch_runs = [1, 1] if args.quick else [3, 3]  # medians of 3 where the goals apply

    for tool in sampling.missing_tools():
        # `make bench` installs them first where it can (tools/syspkg.py says why not).
        print(f"bench: {tool} not found: its rows will say 'not installed'", file=sys.stderr)
    t0 = time.monotonic()
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before, host_procs, revision = _loadavg(), _host_processes(), _revision()
    nofile = sampling.raise_limit()  # as oversub does at start: the samplers run in here
    try:
        with stop_signals_interrupt():
            print("start-up ...", flush=True)
            st = startup.run(startup_rounds)
            print(startup.format_text(st), flush=True)
            print("sampling ...", flush=True)
            samples = sampling.run(TREES, sample_rounds)
            for s in samples:
                print(sampling.format_text(s), flush=True)
            print("sampling a busy tree ...", flush=True)
            busy = sampling.run(BUSY_TREES, busy_rounds, busy_only=True)
            for s in busy:
                print(sampling.format_text(s), flush=True)
            print(f"watch, {watch_s:g} s per run ...", flush=True)
            watches = watch_cost.run(TREES, watch_s, watch_runs)
            for w in watches:
                print(watch_cost.format_text(w), flush=True)
            print(f"watch --all, {watch_s:g} s per run ...", flush=True)
            node = node_cost.run(watch_s, 1 if args.quick else 3)
            print(node_cost.format_text(node), flush=True)
            trial_s = 3.0 if args.quick else 10.0
            print(f"tune, {trial_s:g} s trials ...", flush=True)
            tuned = tune_cost.run(trial_s, 1 if args.quick else 2)
            print(tune_cost.format_text(tuned), flush=True)
            print("PC sampler ...", flush=True)
            pc_lines = list(perfpc_cost.measure(5 if args.quick else 11, 0.3, 2, None))
            print("\n".join(pc_lines), flush=True)
    except KeyboardInterrupt:
        print(f"{INTERRUPTED}; {args.output} not written", file=sys.stderr)
        return 130
    took = time.monotonic() - t0

    lines = [
        "# Benchmark results",
        "",
        f"- Machine: {_cpu_model()}, {os.cpu_count()} vCPUs, kernel {platform.release()}, "
        f"{platform.python_implementation()} {platform.python_version()}",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC; took {took:.0f} s",
        f"- Command: {_command()}, on commit {revision}",
        f"- Host: {host_procs} processes before the trees started; load average "
        f"{load_before} before, {_loadavg()} after (other jobs may share the machine); "
        f"{nofile}, as oversub raises it",
        f"- Comparison tools: {_tools()}",
        "- Figures are medians of rounds that run every method once in a rotated order; a "
        "ratio is the median of the per-round ratios to the floor of the same round.",
        "",
        *startup_table(st),
        "",
        "## One full sample of a tree (after a warm-up sample)",
        "",
        "oversub keeps the last reading of a process whose CPU clock did not move (every "
        "process of these idle trees; docs/signals.md, Reading only what can have changed); "
        "`every process read` turns that off, as for a tree whose every process ran while "
        "its threads slept, with and without thread attribution (each timed in rounds of its "
        "own with the floor). The floor reads exactly the files the sampler reads then "
        "(/proc/*/stat, each tree process's task directory, each thread's schedstat and "
        "stat, /proc/stat, /proc/pressure/cpu) with plain os.open/os.read/os.close; "
        "floor+status reads status instead of stat per thread, as oversub does for a thread "
        "that ran since the last sample (none in these idle trees) and as a sampler that "
        "re-reads every thread's switch counters would; see bench/sampling.py.",
        "",
    ]
    for s in samples:
        lines += [*sampling_table(s), ""]
    lines += [
        "### A busy tree",
        "",
        "Every process of the tree read at every sample (as when each ran since the last one), "
        "against the floor: the other tools are left out at this size (seconds a round).",
        "",
    ]
    for s in busy:
        lines += [*sampling_table(s), ""]
    lines += [
        f"## `oversub watch ROOT --format ndjson --duration {watch_s:g}` at the default 1 s "
        "interval",
        "",
        "Whole run: (ru_utime + ru_stime) from wait4 over the wall time from start to exit, "
        "start-up and first sample included; steady state: utime + stime from /proc/PID/stat "
        f"from {watch_cost.STEADY_AFTER_S:g} s after the start to the exit; one-off: the rest "
        "(start-up, first sample, summary), so whole run = steady + one-off / wall. Peak RSS: "
        "VmHWM from /proc/PID/status (highest of the runs). With several runs on a tree, the "
        "figures are the median run's. The goals apply to the whole-run figure at ~1,000 "
        "and ~5,000 threads (issue 21).",
        "",
        *watch_table(watches),
        "",
        *node_table(node, watch_s),
        "",
        *tune_table(tuned),
        "",
        "## The PC sampler (`probe.perfpc`): one 0.3 s window, bench/perfpc_cost.py",
        "",
        *(f"- {line}" for line in pc_lines),
        "",
    ]
    Path(args.output).write_text("\n".join(lines))
    print(f"wrote {args.output} ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
