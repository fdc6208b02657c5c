"""A secret in a watched tree's environment appears in no output of oversub, in no format.

A real tree (a root with busy threads and a child, pinned to one CPU so that it has findings
and fixes to print) holds a random secret in variables that are not thread-related, some
of them close to the thread prefixes of `oversub.core.pools`, in the child's environment only,
and in a variable name. Every output is searched: `watch` as ndjson, json and the live view
on a pseudo-terminal; `check --pid` with its stderr report, `--json`, `--junit`,
`--markdown`, the GitHub job summary and annotations; `check -- CMD` with the secret in
CMD's environment (and oversub's own). Every file under the test's directory (oversub's
cwd and TMPDIR) is searched too. Control: the thread variables set beside the secret do
appear, so the environments were read.

Variables like MKL_LICENSE_KEY are *not* used: a name with a thread prefix is read and shown
by design (docs/rules.md: only names starting with OMP_ MKL_ ... are read).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.core.pools import is_thread_var
from tests.support.harness import OVERSUB
from tests.support.harness import descendants as _descendants
from tests.support.harness import pin_to_one_cpu as _pin

pytestmark = pytest.mark.integration

WAIT_S = 90.0
"""Bound on every wait of this test (a run takes a few seconds); never asserted as a time."""

CHILD = """
import hashlib, os, sys, time
parent, deadline = os.getppid(), time.monotonic() + float(sys.argv[1])
buffer, digest = bytes(1 << 20), hashlib.sha256()
while time.monotonic() < deadline and os.getppid() == parent:
    digest.update(buffer)
"""

# Root: two busy threads (hashlib releases the GIL) and a busy child whose environment adds
# one more secret; prints the child's pid; lives until the deadline in argv[1].
TARGET = f"CHILD = {CHILD!r}\n" + (
    """
import hashlib, os, subprocess, sys, threading, time
deadline = time.monotonic() + float(sys.argv[1])

def busy():
    buffer, digest = bytes(1 << 20), hashlib.sha256()
    while time.monotonic() < deadline:
        digest.update(buffer)

for _ in range(2):
    threading.Thread(target=busy, daemon=True).start()
env = dict(os.environ, CHILD_ONLY_TOKEN=os.environ["SECRET_TOKEN"])
child = subprocess.Popen([sys.executable, "-c", CHILD, sys.argv[1]], env=env)
print(child.pid, flush=True)
while time.monotonic() < deadline and child.poll() is None:
    time.sleep(0.1)
"""
)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


def secret_env(secret: str) -> dict[str, str]:
    """Variables holding the secret, none thread-related, plus two thread variables."""
    return {
        "SECRET_TOKEN": secret,
        "OMPI_SECRET_PASSWORD": secret,  # Open MPI's OMPI_, not OMP_
        "MKLROOT_LICENSE": secret,  # MKLROOT, not MKL_
        "X_OMP_NUM_THREADS": secret,  # a thread name inside, not at the start
        "omp_num_threads": secret,  # lower case: libgomp reads OMP_NUM_THREADS only
        "NUMBA": secret,  # a prefix without its underscore
        "SECRET_EQUALS": f"OMP_NUM_THREADS={secret}",  # an entry inside a value
        "SECRET_LINES": f"x\nOMP_NUM_THREADS={secret}\n",  # a line that looks like one
        f"LEAK_{secret}": "1",  # the secret as a name
        "SLURM_JOB_NAME": secret,  # a launcher variable outside the report's allow-list
        "SLURM_JOB_ID": f"4242;{secret}",  # an allow-listed one whose value is not an id
        "RANK": f"1\n{secret}",
        "OMP_NUM_THREADS": "3",  # control: thread variables are read and shown
        "KMP_BLOCKTIME": "0",
    }


@pytest.fixture
def secret() -> str:
    return f"oversub-secret-{uuid.uuid4().hex}"


@pytest.fixture
def env(secret: str, tmp_path: Path) -> dict[str, str]:
    """The test's environment with the secrets; no CI variables, no traceback mode."""
    (tmp_path / "tmp").mkdir()
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GITHUB_") and k not in ("OVERSUB_DEBUG", "NO_COLOR")
    }
    # Control: allow-listed launcher ids of oversub's own environment go into the reports.
    launcher = {"SLURM_PROCID": "3", "LOCAL_RANK": "1"}
    return {**base, **launcher, **secret_env(secret), "TMPDIR": str(tmp_path / "tmp")}


class Group:
    """Processes started in sessions of their own; each group and every tree member seen is
    killed at the end, even when the test fails."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = subprocess.Popen(argv, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for proc in procs:
            tree = _descendants(proc.pid)  # check -- CMD runs CMD in yet another session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for pid in tree:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=WAIT_S)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def group() -> Iterator[Group]:
    started = Group()
    try:
        yield started
    finally:
        started.stop()


def _read_line(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
    assert ready, "the target did not start"
    return proc.stdout.readline().decode()


def _oversub(
    group: Group, name: str, argv: list[str], env: dict[str, str], cwd: Path, *, pin: bool = False
) -> subprocess.Popen[bytes]:
    """Start `oversub ARGV` with stdout and stderr in files `NAME.out` and `NAME.err`."""
    with open(cwd / f"{name}.out", "wb") as out, open(cwd / f"{name}.err", "wb") as err:
        return group.start(
            [*OVERSUB, *argv],
            stdout=out,
            stderr=err,
            env=env,
            cwd=cwd,
            preexec_fn=_pin if pin else None,
        )


def _live_on_pty(group: Group, argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run `oversub ARGV` on a 220-column pseudo-terminal; everything it drew, as text."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 220, 0, 0))
    try:
        proc = group.start(
            [*OVERSUB, *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color"},
            cwd=cwd,
        )
        os.close(slave)
        slave = -1
        chunks: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every slave end is closed, the run is over
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    raw = b"".join(chunks)
    (cwd / "live.pty").write_bytes(raw)  # searched with every other file at the end
    return raw.decode("utf-8", "replace")


def _thread_envs(processes: list[dict[str, Any]]) -> dict[int, Any]:
    return {p["pid"]: p["thread_env"] for p in processes}


def test_secret_appears_in_no_output_and_no_file(
    secret: str, env: dict[str, str], tmp_path: Path, group: Group
) -> None:
    for name, value in secret_env(secret).items():
        assert is_thread_var(name) == (secret not in name + value), name  # the premise
    thread_env = {k: v for k, v in env.items() if is_thread_var(k)}
    assert thread_env["OMP_NUM_THREADS"] == "3"

    target = group.start(
        [sys.executable, "-c", TARGET, "30"], stdout=subprocess.PIPE, env=env, preexec_fn=_pin
    )
    child = int(_read_line(target))
    root = str(target.pid)
    sampled = ["--duration", "2", "--interval", "0.5"]
    reports = ["--json", "pid.json", "--junit", "pid.xml", "--markdown", "pid.md"]
    reports += ["--record", "pid.ndjson"]  # issue 14: the recording and what `report` makes
    command_reports = ["--json", "cmd.json", "--junit", "cmd.xml", "--markdown", "cmd.md"]
    ci = {"GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"), "GITHUB_ACTIONS": "true"}
    command = ["--", sys.executable, "-c", TARGET, "30"]
    runs = {
        "ndjson": _oversub(
            group, "ndjson", ["watch", root, *sampled, "--format", "ndjson"], env, tmp_path
        ),
        "json": _oversub(
            group, "json", ["watch", root, *sampled, "--format", "json"], env, tmp_path
        ),
        "pid": _oversub(
            group, "pid", ["check", "--pid", root, *sampled, *reports], {**env, **ci}, tmp_path
        ),
        "cmd": _oversub(
            group,
            "cmd",
            [
                "check",
                "--interval",
                "0.5",
                "--warmup",
                "0.5",
                "--timeout",
                "3",
                *command_reports,
                *command,
            ],
            {**env, **ci},
            tmp_path,
            pin=True,
        ),
    }
    live = _live_on_pty(group, ["watch", root, *sampled, "--format", "live"], env, tmp_path)
    codes = {name: proc.wait(timeout=WAIT_S) for name, proc in runs.items()}
    errors = {name: (tmp_path / f"{name}.err").read_text() for name in runs}
    assert codes["ndjson"] == codes["json"] == 0, errors
    assert codes["pid"] in (0, 1) and codes["cmd"] in (0, 1), errors  # the verdict may vary

    # Control: the thread variables were read from the root and the child, and shown.
    summary = json.loads((tmp_path / "json.out").read_text())
    ids = summary["launcher_env"]
    assert {"SLURM_PROCID": "3", "LOCAL_RANK": "1"}.items() <= ids.items(), ids
    assert "SLURM_JOB_ID" not in ids and "RANK" not in ids, ids
    envs = _thread_envs(summary["processes"])
    assert envs[target.pid] == thread_env and envs[child] == thread_env, envs
    lines = [json.loads(x) for x in (tmp_path / "ndjson.out").read_text().splitlines()]
    assert lines[-1]["type"] == "summary" and len(lines) >= 2
    assert _thread_envs(lines[0]["processes"])[target.pid] == thread_env
    assert "OMP_NUM_THREADS=3" in ANSI.sub("", live), live[-2000:]
    assert (
        _thread_envs(json.loads((tmp_path / "pid.json").read_text())["processes"])[target.pid]
        == thread_env
    )
    command_envs = _thread_envs(json.loads((tmp_path / "cmd.json").read_text())["processes"])
    assert thread_env in command_envs.values(), command_envs
    for name in ("pid.md", "cmd.md", "step-summary.md"):
        assert "OMP_NUM_THREADS=3" in (tmp_path / name).read_text(), name
    assert (tmp_path / "pid.xml").stat().st_size and (tmp_path / "cmd.xml").stat().st_size
    assert '"OMP_NUM_THREADS":"3"' in (tmp_path / "pid.ndjson").read_text()
    for fmt in ("text", "json", "markdown", "html"):
        shown = subprocess.run(
            [*OVERSUB, "report", "pid.ndjson", "--format", fmt, "-o", f"report.{fmt}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert shown.returncode == 0, shown.stderr
        shows = {"json": '"OMP_NUM_THREADS": "3"', "text": ""}.get(fmt, "OMP_NUM_THREADS=3")
        assert shows in (tmp_path / f"report.{fmt}").read_text(), fmt  # text: no process table

    # The secret: in no output, no report, no file anywhere under the test's directory.
    group.stop()
    searched = []
    for path in sorted(tmp_path.rglob("*")):
        assert secret not in str(path)
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
            searched.append(path.name)
    assert {"ndjson.out", "json.out", "live.pty", "pid.err", "cmd.err"} <= set(searched)
    assert {"pid.json", "pid.xml", "pid.md", "cmd.json", "cmd.xml", "step-summary.md"} <= set(
        searched
    )
    assert {"pid.ndjson", "report.text", "report.json", "report.markdown", "report.html"} <= set(
        searched
    )
    for name in ("pid", "cmd"):  # a failing verdict's findings became annotations
        assert codes[name] == 0 or "::error" in errors[name], errors[name]


# Rewrites its argv area in place, NULs included (what setproctitle implementations do): the
# kernel then returns /proc/PID/cmdline up to the next NUL, which lies in the environment,
# whose first string is the secret. Prints "ready" once /proc shows the leak.
TITLE_REWRITER = """
import os, sys, time
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
start, end = int(fields[48 - 3]), int(fields[49 - 3])
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    area = mem.read(end - start)
    mem.seek(start)
    mem.write(area.replace(b"\\0", b" "))
leaked = os.environ["SECRET_TOKEN"].encode()  # not in this script's text, which is argv
assert leaked in open("/proc/self/cmdline", "rb").read()  # the kernel shows the environment
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
"""


CHECK_CMD = ["check", "--interval", "0.5", "--warmup", "0", "--timeout", "2", "--json", "r.json"]


def test_environment_never_leaks_through_a_rewritten_command_line(
    secret: str, tmp_path: Path, group: Group
) -> None:
    # SECRET_TOKEN=… appeared in `watch --format json` and `check --json` as part of cmdline.
    env = {"SECRET_TOKEN": secret, **{k: v for k, v in os.environ.items() if k != "SECRET_TOKEN"}}
    # A short argv (a script file), so that what follows it is within the 200 characters kept.
    script = tmp_path / "t.py"
    script.write_text(TITLE_REWRITER)
    rewriter = [sys.executable, str(script), "30"]
    target = group.start(rewriter, stdout=subprocess.PIPE, env=env)
    assert _read_line(target) == "ready\n"
    sampled = ["--duration", "1", "--interval", "0.5"]
    runs = {
        "watch": _oversub(
            group, "watch", ["watch", str(target.pid), *sampled, "--format", "json"], env, tmp_path
        ),
        "cmd": _oversub(
            group,
            "cmd",
            [*CHECK_CMD, "--", *rewriter],
            env,
            tmp_path,
        ),
    }
    codes = {name: proc.wait(timeout=WAIT_S) for name, proc in runs.items()}
    assert codes["watch"] == 0 and codes["cmd"] in (0, 1), codes
    watched = json.loads((tmp_path / "watch.out").read_text())["processes"]
    checked = json.loads((tmp_path / "r.json").read_text())["processes"]
    for processes in (watched, checked):
        lines = [p["cmdline"] for p in processes]
        assert any(line.startswith(sys.executable) for line in lines), lines  # still shown
    group.stop()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
