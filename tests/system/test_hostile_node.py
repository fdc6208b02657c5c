"""A hostile unprivileged process on the node (issue 19, part A, system test).

A real `nobody` process in its own user and mount namespaces (`unshare -Urm`) maps five
files named like OpenBLAS, then bind-mounts a FIFO over the first and the slave of a pty it
owns over the second; the third is a crafted ELF with `e_phentsize = 0` and a symbol at
2^64 - 8, the fourth a 4 KiB file with holes up to 130 MiB whose sections claim 64 MiB tables,
the fifth it deletes. oversub runs as root, as a session leader without a terminal (as
systemd starts it): `watch --all --duration 2` must end on time with exit 0 and still show
the node, `serve --all` must keep answering /metrics across scrapes and survive the pty
master being closed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.elf_craft import CraftedElf
from tests.support.harness import OVERSUB, Spawner, wait_until

pytestmark = pytest.mark.integration

PYTHON = "/usr/bin/python3"
"""An interpreter `nobody` may run (the venv's lives under /root, mode 700)."""
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
NAMES = ("fifo", "pty", "bad", "sparse", "deleted")

HOSTILE = r"""
import mmap, os, subprocess, sys, time
d = sys.argv[1]
held = []
for name in sys.argv[2:]:
    fd = os.open(f"{d}/libopenblas_{name}.so", os.O_RDONLY)
    held.append(mmap.mmap(fd, 4096, prot=mmap.PROT_READ))
    os.close(fd)
os.mkfifo(f"{d}/fifo")
master, slave = os.openpty()
subprocess.run(["mount", "--bind", f"{d}/fifo", f"{d}/libopenblas_fifo.so"], check=True)
subprocess.run(["mount", "--bind", os.ttyname(slave), f"{d}/libopenblas_pty.so"], check=True)
os.unlink(f"{d}/libopenblas_deleted.so")
print("ready", flush=True)
sys.stdin.readline()
os.close(master)
print("closed", flush=True)
time.sleep(600)
"""


def _userns_refusal() -> str | None:
    """Why the test cannot run here; None when it can."""
    if os.geteuid() != 0:
        return "needs root (oversub as root reads another user's process)"
    for tool in ("setpriv", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    if not os.access(PYTHON, os.X_OK):
        return f"no {PYTHON} for the unprivileged process"
    probe = subprocess.run(
        [*AS_NOBODY, "unshare", "-Urm", "true"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        return f"an unprivileged user namespace is not allowed here: {probe.stderr.strip()}"
    return None


@pytest.fixture
def hostile(spawn: Spawner) -> Iterator[subprocess.Popen[str]]:
    why = _userns_refusal()
    if why is not None:
        pytest.skip(why)
    d = Path(tempfile.mkdtemp(prefix="oversub-hostile-", dir="/tmp"))
    try:
        d.chmod(0o777)
        crafted = CraftedElf()
        crafted.put("e_phentsize", 0)
        crafted.put_symbol_value(0, 2**64 - 8)
        sparse = CraftedElf()
        sparse.put_section(1, "sh_size", 64 << 20)
        sparse.put_section(2, "sh_size", 64 << 20)
        contents = {"bad": crafted.data, "sparse": sparse.data}
        for name in NAMES:
            path = d / f"libopenblas_{name}.so"
            path.write_bytes(bytes(contents.get(name, CraftedElf().data)).ljust(4096, b"\0"))
            path.chmod(0o644)
        os.truncate(d / "libopenblas_sparse.so", 130 << 20)
        proc = spawn(
            [*AS_NOBODY, "unshare", "-Urm", PYTHON, "-c", HOSTILE, str(d), *NAMES],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            pytest.fail(f"the hostile process did not start: {line!r} {proc.communicate()}")
        yield proc
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text: str = response.read().decode("utf-8")
        return text


def test_watch_all_ends_on_time_and_shows_the_node(hostile: subprocess.Popen[str]) -> None:
    started = time.monotonic()
    out = subprocess.run(
        [*OVERSUB, "watch", "--all", "--duration", "2", "--interval", "0.5", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    doc = json.loads(out.stdout)
    assert doc["type"] == "node-summary"
    assert doc["node"]["totals"]["processes"] > 3  # every other process is still sampled
    assert elapsed < 60, f"watch --duration 2 took {elapsed:.1f} s"


def test_serve_all_keeps_serving_and_survives_the_pty_hangup(
    hostile: subprocess.Popen[str], spawn: Spawner
) -> None:
    port = _free_port()
    serve = spawn(
        [
            *OVERSUB,
            "serve",
            "--all",
            "--interval",
            "0.5",
            "--bind",
            "127.0.0.1",
            "--port",
            f"{port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    scrapes: list[str] = []

    def scraped(after: int) -> bool:
        assert serve.poll() is None, serve.communicate()
        try:
            text = _scrape(port)
        except OSError:
            return False
        if "oversub_threads{" in text:
            scrapes.append(text)
        return len(scrapes) >= after

    wait_until(lambda: scraped(3), timeout=90, interval=0.5, what="three scrapes")
    assert hostile.stdin is not None and hostile.stdout is not None
    hostile.stdin.write("close\n")
    hostile.stdin.flush()
    assert hostile.stdout.readline().strip() == "closed"
    wait_until(lambda: scraped(6), timeout=90, interval=0.5, what="three scrapes after")
    assert serve.poll() is None, serve.communicate()
    serve.terminate()
    _, err = serve.communicate(timeout=30)
    assert serve.returncode == 130, err
    assert "Traceback" not in err and "internal error" not in err
