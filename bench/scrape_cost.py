"""What a scrape of `oversub serve` costs: building the exposition, and a real HTTP scrape.

exposition  `cli.serve.exposition` of the most `--top 20` can export: 20 loaded targets
            and the node (the targets copy one real round's target), median of 50.
HTTP        `oversub serve --all` on the node of bench/node_cost.py (100 processes x 20
            idle threads in 20 real cgroups, when root), 50 scrapes of /metrics with
            urllib, median and max (the series are what that node exports).

  python bench/scrape_cost.py
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

from node_cost import CGROUPS, PROCS, THREADS, cgroups, fill
from trees import print_until_stopped, tree

ROUNDS = 50


def exposition_cost() -> str:
    from oversub.cli.serve import exposition
    from oversub.probe.cgroup_target import find_hierarchy, ref_of
    from oversub.run.exporter import Exporter
    from oversub.run.session import SessionOptions
    from oversub.run.sources import NodeSource

    hierarchy = find_hierarchy()
    source = NodeSource(ref_of(hierarchy.mount.root, hierarchy))
    exporter = Exporter(
        source,
        SessionOptions(interval=0.3, max_intervals=2),
        top=20,
        only_loaded=False,
        version="bench",
    )
    try:
        exporter.run()
    finally:
        source.close()
    state = exporter.latest()
    assert state.round is not None and state.round.node is not None
    template = state.round.node._replace(kind="cgroup", state="oversubscribed")
    targets = tuple(
        template._replace(target=f"/kubepods/pod{i:02d}", cgroup=f"/kubepods/pod{i:02d}")
        for i in range(20)
    )
    state = state._replace(round=state.round._replace(targets=targets, found=len(targets)))
    times = []
    body = b""
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        body = exposition(state)
        times.append(time.perf_counter() - t0)
    series = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
    return (
        f"exposition of 20 loaded targets and the node: {series} series, "
        f"{len(body) / 1024:.1f} KiB, median {statistics.median(times) * 1000:.2f} ms "
        f"({ROUNDS} runs)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            data: bytes = response.read()
            return data
    except (urllib.error.URLError, OSError):
        return None


def http_cost() -> str:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with cgroups(CGROUPS) as (made, why_not), tree(PROCS, THREADS) as t:
        if made:
            fill(made, t.pids)
        argv = [sys.executable, "-m", "oversub", "serve", "--all", "--bind", "127.0.0.1"]
        serve = subprocess.Popen([*argv, "--port", str(port)], stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while b"oversub_threads{" not in (_get(url) or b""):
                if time.monotonic() > deadline or serve.poll() is not None:
                    raise RuntimeError("oversub serve did not export the node")
                time.sleep(0.2)
            times = []
            body = b""
            for _ in range(ROUNDS):
                t0 = time.perf_counter()
                body = _get(url) or b""
                times.append(time.perf_counter() - t0)
                time.sleep(0.05)
        finally:
            serve.terminate()
            serve.wait(timeout=30)
    ours = sum(1 for line in body.splitlines() if line.startswith(b"oversub_"))
    where = f"{len(made)} cgroups" if made else f"no cgroups ({why_not})"
    return (
        f"HTTP scrape of serve --all ({PROCS} x {THREADS} threads in {where}): {ours} "
        f"oversub_ series, {len(body) / 1024:.1f} KiB, median "
        f"{statistics.median(times) * 1000:.2f} ms, max {max(times) * 1000:.2f} ms "
        f"({ROUNDS} scrapes)"
    )


def main() -> int:
    return print_until_stopped(lambda: [exposition_cost(), http_cost()])


if __name__ == "__main__":
    sys.exit(main())
