"""`make test-fleet`: a real Prometheus server scrapes `oversub serve` and its HTTP query API
must show the right verdict and demand, for an oversubscribed tree and then a healthy one.

    python tools/fleet_check.py        (as root, with prometheus on PATH: the Makefile
                                        installs Debian's `prometheus` package first)

Each tree is `oversub stress --mode hash` (always-busy threads) in a cgroup of its own with
a CPU quota (the kernel enforces N): 2 processes x 2 busy threads under a 1-CPU quota (N = 1,
demand about 4: oversubscribed), then 1 busy thread under a 2-CPU quota (demand 1 within N:
ok). The trees run one after the other, so neither waits for the other's CPUs, and each
cgroup has the highest CPU weight, so no other load of the shared machine makes its threads
wait.
`oversub serve --cgroup` watches each; one Prometheus (scrape interval 1 s, the
repository's rule file loaded, so a rule that a real server refuses fails here too) scrapes
both exporters. The judged windows
start after the workload is up and the exporter has measured it.

Then node_exporter's textfile path (docs/clusters.md): Debian's prometheus-node-exporter
on a loopback port with only its textfile collector, beside `oversub serve --cgroup PATH
--textfile DIR` (no HTTP) on another oversubscribed tree; Prometheus scrapes node_exporter
as job `node`, and the verdict and demand must arrive through it (no job `oversub` series
for that cgroup); after serve stops, its file is gone and the series are stale.

Skips with exit 0 and a line saying why where it cannot run: not root, no prometheus or
node_exporter, no writable cgroup cpu controller. Exit 1 when an assertion fails, with what
Prometheus said.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "oversub.rules.yml"
OVERSUB = [sys.executable, "-m", "oversub"]
WAIT_S = 60.0
PREFIX = "make test-fleet"


class Skip(Exception):
    """The check cannot run on this machine (said, not failed)."""


def say(message: str) -> None:
    print(f"{PREFIX}: {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:g} s: {what}")
        time.sleep(0.25)


# --------------------------------------------------------------------------- cgroups


def _cpu_directory() -> tuple[int, str]:
    """(cgroup version, the directory new cgroups go in) of the cpu controller."""
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    own = Path("/proc/self/cgroup").read_text().splitlines()
    for line in mounts:
        fields = line.split()
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        if fstype == "cgroup" and "cpu" in options:
            path = next(
                (e.split(":", 2)[2] for e in own if "cpu" in e.split(":")[1].split(",")), "/"
            )
            relative = path[len(fields[3].rstrip("/")) :].lstrip("/")
            return 1, os.path.join(fields[4], relative)
    for line in mounts:
        fields = line.split()
        if fields[fields.index("-") + 1] == "cgroup2":
            return 2, fields[4]
    raise Skip("no cgroup hierarchy with the cpu controller is mounted")


@contextlib.contextmanager
def quota_cgroup(cpus: float) -> Iterator[tuple[str, str]]:
    """A new cgroup with a CPU quota: yields (its directory, its path in the hierarchy)."""
    version, parent = _cpu_directory()
    directory = os.path.join(parent, f"oversub-fleet-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(directory)
    except OSError as error:
        raise Skip(f"cannot create a cgroup under {parent}: {error.strerror}") from None
    try:
        period = 100_000
        # The highest CPU weight: other load on the shared machine cannot make the trees wait,
        # so the healthy one is judged ok whatever else runs (and the busy one is capped by
        # its quota anyway).
        weight = ("cpu.shares", "262144") if version == 1 else ("cpu.weight", "10000")
        if Path(directory, weight[0]).exists():
            Path(directory, weight[0]).write_text(weight[1])
        if version == 1:
            Path(directory, "cpu.cfs_period_us").write_text(str(period))
            Path(directory, "cpu.cfs_quota_us").write_text(str(round(cpus * period)))
        elif Path(directory, "cpu.max").exists():
            Path(directory, "cpu.max").write_text(f"{round(cpus * period)} {period}")
        else:
            raise Skip("the cgroup v2 cpu controller is not enabled for child cgroups")
        mount = _mount_point_of(directory)
        yield directory, "/" + os.path.relpath(directory, mount)
    finally:
        deadline = time.monotonic() + 10
        while os.path.isdir(directory):
            try:
                os.rmdir(directory)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def _mount_point_of(directory: str) -> str:
    best = "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[fields.index("-") + 1] in ("cgroup", "cgroup2"):
            point = fields[4]
            if directory.startswith(point.rstrip("/") + "/") and len(point) > len(best):
                best = point
    return best


# --------------------------------------------------------------------------- processes


@contextlib.contextmanager
def stress_in(directory: str, procs: int, threads: int) -> Iterator[subprocess.Popen[bytes]]:
    """`oversub stress` whose shell joins the cgroup before exec; killed with its group."""
    script = (
        f'echo $$ > {directory}/cgroup.procs && exec "$0" -m oversub stress '
        f"--procs {procs} --threads {threads} --seconds 300 --mode hash"
    )
    job = subprocess.Popen(
        ["sh", "-c", script, sys.executable], stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for(f"{procs} x {threads} busy threads", lambda: _busy(job.pid, procs, threads))
        yield job
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        procs_file = Path(directory, "cgroup.procs")
        wait_for("an empty cgroup", lambda: not procs_file.read_text().strip(), timeout=10)


def _busy(root: int, procs: int, threads: int) -> bool:
    ready = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{name}/stat").read_text()
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            if ppid == root and len(os.listdir(f"/proc/{name}/task")) >= threads + 1:
                ready += 1
    return ready >= procs


@contextlib.contextmanager
def serve(
    path: str, port: int | None, textfile: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`oversub serve --cgroup PATH` on `port`, or only writing `textfile`/oversub.prom."""
    where = ["--bind", "127.0.0.1", "--port", str(port)] if port is not None else []
    if textfile is not None:
        where += ["--textfile", str(textfile)]
    proc = subprocess.Popen(
        [*OVERSUB, "serve", "--cgroup", path, *where],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("oversub serve did not stop on SIGTERM") from None
        if proc.returncode != 130:
            raise AssertionError(f"oversub serve exited {proc.returncode}: {err.decode()}")


@contextlib.contextmanager
def node_exporter(port: int, textfile: Path, workdir: Path) -> Iterator[None]:
    """Debian's prometheus-node-exporter on 127.0.0.1:`port` with only its textfile
    collector, reading `textfile`."""
    binary = shutil.which("prometheus-node-exporter")
    if binary is None:
        raise Skip("prometheus-node-exporter is not installed (see above)")
    log = (workdir / "node_exporter.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfile}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(
            "node_exporter answering",
            lambda: proc.poll() is None and _get(f"http://127.0.0.1:{port}/metrics"),
        )
        yield
    except BaseException:
        log.flush()
        print((workdir / "node_exporter.log").read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@contextlib.contextmanager
def prometheus(targets: list[int], workdir: Path, node: int | None = None) -> Iterator[str]:
    """A Prometheus server scraping `targets` (ports) every second as job `oversub`, and
    node_exporter on port `node` as job `node`; yields its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise Skip("prometheus is not installed (see above)")
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [
                    {
                        "job_name": "oversub",
                        "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in targets]}],
                    },
                    *(
                        [
                            {
                                "job_name": "node",
                                "static_configs": [{"targets": [f"127.0.0.1:{node}"]}],
                            }
                        ]
                        if node is not None
                        else []
                    ),
                ],
            }
        )
    )
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("Prometheus ready", lambda: proc.poll() is None and _get(f"{url}/-/ready"))
        yield url
    except BaseException:
        log.flush()
        print((workdir / "prometheus.log").read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            data: bytes = response.read()
            return data
    except (urllib.error.URLError, OSError):
        return None


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query through Prometheus's HTTP API: its result vector."""
    data = _get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if data is None:
        return []
    answer = json.loads(data)
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def value(url: str, expr: str) -> float | None:
    result = query(url, expr)
    return float(result[0]["value"][1]) if len(result) == 1 else None


# --------------------------------------------------------------------------- the check


def judged(
    url: str, path: str, verdict: str, demand: tuple[float, float], job: str = "oversub"
) -> str:
    """Wait until Prometheus holds 3 s of the target's series (scraped as `job`), then
    assert its verdict and demand over the last 3 s; returns a line that says what was seen."""
    target = f'target="{path}",job="{job}"'
    seen = wait_for(
        f"3 s of oversub_verdict for {path} in Prometheus",
        lambda: (value(url, f"count_over_time(oversub_demand_cpus{{{target}}}[3s])") or 0) >= 3,
    )
    assert seen
    states = {
        r["metric"]["verdict"]: float(r["value"][1])
        for r in query(url, f"min_over_time(oversub_verdict{{{target}}}[3s])")
    }
    assert states.get(verdict) == 1.0, f"{path}: verdict {verdict} not held for 3 s: {states}"
    assert sum(states.values()) == 1.0, states
    low = value(url, f"min_over_time(oversub_demand_cpus{{{target}}}[3s])")
    high = value(url, f"max_over_time(oversub_demand_cpus{{{target}}}[3s])")
    assert low is not None and high is not None, f"no demand series for {path}"
    assert demand[0] < low <= high < demand[1], f"{path}: demand {low:.2f}..{high:.2f}"
    n = value(url, f"oversub_budget_cpus{{{target}}}")
    assert n is not None, f"no budget series for {path}"
    if job == "oversub":
        up = value(url, 'up{job="oversub"} == 1 and on(instance) oversub_targets == 1')
    else:
        up = value(url, f'up{{job="{job}"}} == 1 and on(instance) oversub_up{{job="{job}"}} == 1')
    assert up == 1.0, f"the {job} exporter is not up in Prometheus"
    return f"{path}: {verdict} held for 3 s, demand {low:.2f}..{high:.2f} on N = {n:g} ({job})"


def through_node_exporter(url: str, textfile: Path) -> list[str]:
    """`serve --cgroup --textfile` beside node_exporter on an oversubscribed cgroup: the
    verdict and demand reach Prometheus through node_exporter (job `node`, never scraped
    from oversub), and after `serve` stops its file is gone and the series go stale."""
    lines = []
    with quota_cgroup(1.0) as (directory, path), stress_in(directory, 2, 2):
        with serve(path, None, textfile):
            lines.append(judged(url, path, "oversubscribed", (3.0, 4.5), job="node"))
            served = sorted(p.name for p in textfile.iterdir())
            assert served == ["oversub.prom"], served
            direct = query(url, f'oversub_demand_cpus{{target="{path}",job="oversub"}}')
            assert not direct, f"oversub itself was scraped: {direct}"
        left = sorted(p.name for p in textfile.iterdir())
        assert left == [], f"serve left {left} in the textfile directory"
        started = time.monotonic()
        wait_for(
            f"oversub's series of {path} stale after serve stopped",
            lambda: (
                not query(url, f'oversub_demand_cpus{{target="{path}",job="node"}}')
                and not query(url, 'oversub_up{job="node"}')
            ),
            timeout=20,
        )
        up = value(url, 'up{job="node"}')
        assert up == 1.0, "node_exporter went down with serve"
        lines.append(
            f"{path}: after serve stopped, oversub.prom gone and its series stale within "
            f"{time.monotonic() - started:.1f} s (node_exporter still up)"
        )
    return lines


def main() -> int:
    started = time.monotonic()
    try:
        if os.geteuid() != 0:
            raise Skip("not root: creating the trees' cgroups needs root")
        with tempfile.TemporaryDirectory(prefix="oversub-fleet-") as tmp:
            ports = [free_port(), free_port()]
            node_port = free_port()
            textfile = Path(tmp) / "textfile"
            textfile.mkdir()
            with (
                prometheus(ports, Path(tmp), node=node_port) as url,
                node_exporter(node_port, textfile, Path(tmp)),
            ):
                lines = []
                cases = ((1.0, 2, 2, "oversubscribed", (3.0, 4.5)), (2.0, 1, 1, "ok", (0.6, 1.4)))
                for port, (quota, procs, threads, verdict, demand) in zip(
                    ports, cases, strict=True
                ):
                    with (
                        quota_cgroup(quota) as (directory, path),
                        stress_in(directory, procs, threads),
                        serve(path, port),
                    ):
                        lines.append(judged(url, path, verdict, demand))
                lines += through_node_exporter(url, textfile)
                rules = query(url, "target:oversub_demand_cpus:rate5m")
                if not _rules_loaded(url):
                    raise AssertionError(
                        "Prometheus did not load deploy/prometheus/oversub.rules.yml"
                    )
    except Skip as why:
        say(f"skipped: {why}")
        return 0
    except AssertionError as error:
        say(f"FAILED: {error}")
        return 1
    for line in lines:
        say(line)
    say(f"rule groups loaded by the real server; {len(rules)} recording-rule series")
    say(f"PASSED in {time.monotonic() - started:.0f} s")
    return 0


def _rules_loaded(url: str) -> bool:
    data = _get(f"{url}/api/v1/rules")
    if data is None:
        return False
    groups = json.loads(data)["data"]["groups"]
    return bool(groups) and all(g.get("file") == str(RULES) for g in groups)


if __name__ == "__main__":
    sys.exit(main())
