"""Wall time of `oversub merge` over many node reports (a multi-node job's gate).

Writes N reports (default 64) to a temporary directory: each a real `check --json` document
(a static preflight, so no process is sampled) with P process entries (default 100, about
the size of a DataLoader-heavy node's report) and its own `node`; one node in eight
oversubscribed. Then times `oversub merge DIR/*.json --format F` as a user runs it, the
median of R rounds per format, against `python -c pass` (the interpreter's floor).

    python bench/merge_cost.py [--nodes 64] [--procs 100] [--rounds 11]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SCRIPT = Path(sys.executable).with_name("oversub")
_LAUNCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "oversub"]


def _template(directory: Path, threads: int) -> dict[str, object]:
    path = directory / "template.json"
    argv = [*_LAUNCH, "check", "--procs", "4", "--threads", str(threads), "--cpus", "8"]
    subprocess.run([*argv, "--json", str(path)], capture_output=True, check=False)
    doc: dict[str, object] = json.loads(path.read_text())
    path.unlink()
    return doc


def write_reports(directory: Path, nodes: int, procs: int) -> None:
    ok, hot = _template(directory, 2), _template(directory, 8)
    process = {
        "pid": 1000,
        "ppid": 1,
        "name": "pt_data_worker",
        "cmdline": "python train.py --workers 8 --batch-size 256",
        "threads": 12,
        "cpu_percent": 95.0,
        "thread_env": {"OMP_NUM_THREADS": "4"},
    }
    for i in range(nodes):
        doc = dict(hot if i % 8 == 0 else ok)
        doc["node"] = f"gpu-{i:03d}"
        doc["launcher_env"] = {"SLURM_JOB_ID": "4242", "SLURM_NODEID": str(i)}
        doc["processes"] = [{**process, "pid": 1000 + p} for p in range(procs)]
        (directory / f"gpu-{i:03d}.json").write_text(json.dumps(doc, indent=2))


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--procs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write_reports(directory, args.nodes, args.procs)
        files = sorted(str(p) for p in directory.glob("*.json"))
        size = sum(Path(f).stat().st_size for f in files)
        commands = {"floor (python -c pass)": [sys.executable, "-c", "pass"]}
        for fmt in ("text", "json", "markdown", "junit"):
            commands[f"merge --format {fmt}"] = [*_LAUNCH, "merge", *files, "--format", fmt]
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):  # interleaved, so machine noise hits all alike
            for name, argv in commands.items():
                times[name].append(_time(argv))
        print(f"{args.nodes} reports of {args.procs} processes each, {size / 1e6:.1f} MB in all")
        for name, values in times.items():
            print(f"  {name}: median {statistics.median(values) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
