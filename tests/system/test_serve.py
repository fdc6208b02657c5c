"""`oversub serve` against the metric contract (docs/metrics.md): a real scrape of a real
cgroup's stress tree and of the whole node compared family by family with the doc's tables,
the textfile written atomically and removed on a stop signal, and the bad-input paths."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from oversub.core.names import Signal
from oversub.core.rules import RUNTIME_RULES
from tests.support.cgroup_sandbox import pinned_cgroup
from tests.support.harness import OVERSUB, Spawner, busy_workers, oversub, wait_until
from tests.support.metrics_contract import Family, documented_metrics, parse_exposition

METRICS = documented_metrics()
STATES = ["oversubscribed", "starved", "at-risk", "ok", "not-judged"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text: str = response.read().decode("utf-8")
        return text


def ours(text: str) -> dict[str, Family]:
    """The oversub_ families of a scrape (serve also exposes process_* and python_*)."""
    return {k: v for k, v in parse_exposition(text).items() if k.startswith("oversub_")}


def check_contract(families: dict[str, Family]) -> None:
    """Every family is documented, with its type and exactly its labels (the client sorts
    them by name; order means nothing to Prometheus), in the doc's order; every documented
    family is exported."""
    assert list(families) == list(METRICS)
    for name, family in families.items():
        spec = METRICS[name]
        assert family.type == ("gauge" if spec.type == "info" else spec.type), name
        for sample in family.samples:
            assert sorted(sample.labels) == sorted(spec.labels), (name, sample.labels)
            assert sample.value == sample.value, name  # never NaN
            if spec.type == "info":
                assert sample.value == 1.0


def by_target(families: dict[str, Family], name: str) -> dict[str, float]:
    return {s.labels["target"]: s.value for s in families[name].samples}


def verdicts(families: dict[str, Family], target: str) -> dict[str, float]:
    return {
        s.labels["verdict"]: s.value
        for s in families["oversub_verdict"].samples
        if s.labels["target"] == target
    }


def start_serve(spawn: Spawner, args: list[str]) -> subprocess.Popen[Any]:
    return spawn(
        [*OVERSUB, "serve", "--interval", "0.5", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def scraped_when(port: int, ready: Any, proc: subprocess.Popen[Any]) -> dict[str, Family]:
    """Scrape until `ready(families)` holds (the exporter has measured what is asked)."""
    found: dict[str, dict[str, Family]] = {}

    def attempt() -> bool:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(OSError):
            found["f"] = ours(scrape(port))
            return bool(ready(found["f"]))
        return False

    wait_until(attempt, timeout=60, interval=0.25, what="the exporter's series")
    return found["f"]


def stop(proc: subprocess.Popen[Any]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


@pytest.mark.integration
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 1, reason="needs a CPU")
def test_serve_cgroup_scrape_is_the_contract(spawn: Spawner, tmp_path: Path) -> None:
    """A cgroup pinned to one CPU running 2 x 2 busy threads: oversubscribed, N = 1, demand
    near 4; every family of the doc, typed and labelled as documented; the textfile holds the
    same families without process_*; SIGTERM ends it with 130 and removes the file."""
    cpu = min(os.sched_getaffinity(0))
    with pinned_cgroup(cpu) as (path, joins):
        join = " && ".join(f"echo $$ > {j}" for j in joins)
        job = spawn(
            [
                "sh",
                "-c",
                f'{join} && exec "$0" -m oversub stress --mode hash -M 2 -T 2 -S 90',
                sys.executable,
            ],
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            wait_until(lambda: busy_workers(job.pid, 2, 2), what="the stress workers")
            port = free_port()
            serve = start_serve(
                spawn, ["--cgroup", path, "--port", str(port), "--textfile", str(tmp_path)]
            )
            families = scraped_when(
                port, lambda f: by_target(f, "oversub_demand_cpus").get(path, 0) > 0, serve
            )
            # Two more intervals: the counters grow, the gauges are the last interval's.
            first_cpu = by_target(families, "oversub_cpu_seconds_total")[path]
            families = scraped_when(
                port,
                lambda f: by_target(f, "oversub_cpu_seconds_total").get(path, 0) > first_cpu + 0.5,
                serve,
            )
            text = (tmp_path / "oversub.prom").read_text("utf-8")
            status, err = stop(serve)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=10)
    assert status == 130, err
    assert not (tmp_path / "oversub.prom").exists()
    assert not list(tmp_path.iterdir())  # no temporary file left either
    check_contract(families)
    assert by_target(families, "oversub_budget_cpus") == {path: 1.0}
    assert by_target(families, "oversub_demand_cpus")[path] > 3.0
    assert verdicts(families, path) == {s: float(s == "oversubscribed") for s in STATES}
    findings = {
        s.labels["rule"]: s.value
        for s in families["oversub_findings"].samples
        if s.labels["target"] == path
    }
    assert list(findings) == [r.value for r in RUNTIME_RULES]
    assert findings["oversubscribed-threads"] == 1.0
    signals = [s.labels["signal"] for s in families["oversub_signal_unavailable"].samples]
    assert signals == [s.value for s in Signal]
    (info,) = families["oversub_target_info"].samples
    assert info.labels["kind"] == "cgroup" and info.labels["cgroup"] == path
    assert info.labels["limited_by"] == "cpuset"
    assert families["oversub_up"].samples[0].value == 1.0
    assert families["oversub_targets"].samples[0].value == 1.0
    # The textfile: the same families, no process_* or python_*, no timestamps.
    from_file = parse_exposition(text)
    assert list(from_file) == list(METRICS)
    assert all(len(line.split()) == 2 for line in text.splitlines() if not line.startswith("#"))


@pytest.mark.integration
def test_serve_all_exports_the_node(spawn: Spawner) -> None:
    port = free_port()
    serve = start_serve(spawn, ["--all", "--port", str(port), "--top", "3"])
    families = scraped_when(port, lambda f: "/" in by_target(f, "oversub_threads"), serve)
    status, err = stop(serve)
    assert status == 130, err
    assert err.splitlines()[0] == f"oversub serve: http://0.0.0.0:{port}/metrics", err
    check_contract(families)
    kinds = {s.labels["target"]: s.labels["kind"] for s in families["oversub_target_info"].samples}
    assert kinds["/"] == "node"
    assert sum(kind == "cgroup" for kind in kinds.values()) <= 3
    assert "/" not in {s.labels["target"] for s in families["oversub_verdict"].samples}
    assert by_target(families, "oversub_threads")["/"] > 1


@pytest.mark.integration
def test_serve_says_where_it_listens_with_the_port_the_system_gave(
    spawn: Spawner, tmp_path: Path
) -> None:
    """`--port 0`: the one line on stderr names the port really bound, and it answers."""
    args = ["--pid", str(os.getpid()), "--bind", "127.0.0.1", "--port", "0"]
    serve = start_serve(spawn, [*args, "--textfile", str(tmp_path)])
    assert serve.stderr is not None
    line = serve.stderr.readline().rstrip("\n")
    prefix = "oversub serve: http://127.0.0.1:"
    assert line.startswith(prefix) and line.endswith(
        f"/metrics; writing {tmp_path / 'oversub.prom'} after every sample"
    ), line
    port = int(line[len(prefix) :].split("/", 1)[0])
    assert port > 0
    families = scraped_when(port, lambda f: by_target(f, "oversub_threads"), serve)
    assert max(by_target(families, "oversub_threads").values()) >= 1
    status, err = stop(serve)
    assert status == 130, err


@pytest.mark.integration
def test_port_in_use_is_one_line(spawn: Spawner) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = oversub(["serve", "--all", "--bind", "127.0.0.1", "--port", str(port)])
    assert out.returncode == 3, out.stderr
    assert out.stderr.startswith(f"oversub: error: cannot listen on 127.0.0.1:{port}: ")
    assert len(out.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (["serve"], 2, "serve needs a target: --pid PID, --cgroup PATH or --all"),
        (["serve", "--port", "0"], 2, "serve needs a target: --pid PID, --cgroup PATH or --all"),
        (["serve", "--all", "--pid", "1"], 2, "serve takes one target"),
        (["serve", "--all", "--name", "a/b"], 2, "--name 'a/b'"),
        (["serve", "--all", "--top", "0"], 2, "--top"),
        (["serve", "--all", "--port", "70000"], 2, "--port"),
        (["serve", "--cgroup", "/oversub-no-such-cgroup"], 3, "no cgroup /oversub-no-such"),
        (["serve", "--pid", "2147483647"], 3, "no process with pid 2147483647"),
        (["serve", "--all", "--textfile", "/nonexistent/dir"], 2, "--textfile"),
    ],
)
def test_bad_serve_input(args: list[str], status: int, words: str) -> None:
    out = oversub(args, timeout=60)
    assert out.returncode == status, out.stderr
    assert words in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args", [["--help"], ["cpus", "--format", "json"], ["watch", "--help"]])
def test_only_serve_imports_the_client(args: list[str]) -> None:
    # The program leaves with os._exit once its output is flushed: look at its modules then.
    probe = (
        "import contextlib, io, os, runpy, sys\n"
        f"sys.argv = ['oversub', *{args!r}]\n"
        "leave = os._exit\n"
        "def look(code):\n"
        "    os.write(1, str('prometheus_client' in sys.modules).encode())\n"
        "    leave(code)\n"
        "os._exit = look\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    runpy.run_module('oversub', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
