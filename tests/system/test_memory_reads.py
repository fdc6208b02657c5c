"""A `nobody` process whose memory is hostile to root's oversub (issue 38), with a real FUSE
server that never answers a read.

The server (`tests/support/fuse_stall.py`) runs as `nobody` and mounts through the setuid
`fusermount3` of Debian's fuse3, which opens /dev/fuse with the user's rights: /dev/fuse is
0666 on a Debian system (udev), 0600 on this test machine, so each test gives the server a
private mount namespace in which a 0666 node of the same device is bound over /dev/fuse
(nothing changes on the machine; the mount ends with the namespace). The hostile program
(`tests/support/hostile_memory.py`, built with the C compiler) runs as `nobody` in that
namespace and does, per test:

- row 1: maps the FUSE file executable and keeps addresses inside it on its threads' stacks;
- row 2: maps a valid libopenblas followed by a FUSE page where `base + blas_cpu_number` lies;
- rows 1-4 at once (the issue's "Done when"), plus 80 threads a second each holding 3,000
  fresh addresses into a 16 MiB executable file (row 3) and two spinning threads named
  `polars-0`, `polars-1` (row 4), while `oversub serve --all` answers every scrape for a
  minute within a CPU and memory bound;
- the remap race: a thread swaps two pages between a regular file and the FUSE file in a
  loop (mmap MAP_FIXED), with new threads holding addresses into them on their stacks (and,
  with row 2, the live size in them): the check of `probe.backing` is made against maps
  read a moment before the read, so a read in a few faults the FUSE page in (measured on
  the code before: the first to the 67th read into those pages, in the first 2-6 samples);
- a process that holds its own mmap lock (a thread reads its FUSE page through
  /proc/self/mem, another waits to map): every reader of its cmdline, environ or memory
  waits, killably only (before: `watch` in D in `__access_remote_vm` at its first sample,
  ^C ignored).

Before issue 38 root's oversub blocked in a read of /proc/PID/mem in state D, which SIGKILL
does not end. Now those reads are made by a reader process that oversub abandons past a
deadline (`probe.memreader`); the tests check that oversub went on and that the process was
quarantined (`live_pools` in `unavailable`: nothing of its memory read since). A test must
never leave oversub or pytest stuck: oversub runs in a child process with a deadline, and
at the end of every test (or past that deadline) the FUSE servers are killed first (a
/dev/fuse closed aborts the connection: every waiting read fails at once, and an abandoned
reader ends), then everything else (`spawn`, whose sweep reads every process's environ).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import fuse_stall
from tests.support.elf_craft import CraftedElf
from tests.support.harness import OVERSUB, Spawner, descendants, wait_until
from tests.support.hostile_memory import build

pytestmark = pytest.mark.integration

PYTHON = "/usr/bin/python3"
"""An interpreter `nobody` may run (the venv's lives under /root, mode 700)."""
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
DEADLINE_S = 30.0
"""How long a short oversub run may take before the test says it hung."""


def _refusal() -> str | None:
    """Why these tests cannot run here; None when they can."""
    if os.geteuid() != 0:
        return "needs root (root's oversub reading another user's process)"
    if fuse_stall.fusermount() is None:
        return "no fusermount3 (Debian package fuse3; make test installs it)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (FUSE not in this kernel)"
    for tool in ("setpriv", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"no {tool}"
    if not os.access(PYTHON, os.X_OK):
        return f"no {PYTHON} for the unprivileged server"
    return None


@dataclass
class Hostile:
    server: subprocess.Popen[str]
    """The FUSE server (its child is the hostile program)."""
    pid: int
    """The hostile program."""

    def release(self) -> None:
        """Kill the FUSE server: every read waiting for it fails at once."""
        for pid in (self.server.pid, *descendants(self.server.pid)):
            try:
                if os.readlink(f"/proc/{pid}/exe").startswith("/usr/bin/python3"):
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                continue


class Lab:
    """A directory `nobody` can use: the built program, the FUSE mount point, files."""

    def __init__(self, spawn: Spawner) -> None:
        why = _refusal()
        if why is not None:
            pytest.skip(why)
        self.spawn = spawn
        self.started: list[Hostile] = []
        self.dir = Path(tempfile.mkdtemp(prefix="oversub-memory-", dir="/tmp"))
        self.dir.chmod(0o755)
        binary = build(self.dir)
        if binary is None:
            pytest.skip("no C compiler for the hostile program")
        self.binary = binary
        self.server_py = self.dir / "fuse_stall.py"
        shutil.copy(fuse_stall.__file__, self.server_py)
        self.server_py.chmod(0o644)
        self.node = self.dir / "fuse"
        os.mknod(self.node, stat.S_IFCHR | 0o666, os.stat("/dev/fuse").st_rdev)
        self.node.chmod(0o666)  # the umask
        self.mnt = self.dir / "mnt"
        self.mnt.mkdir()
        shutil.chown(self.mnt, "nobody", "nogroup")
        self.stall = self.mnt / fuse_stall.FILE
        self.openblas = self.dir / "libopenblas.so.0"
        self.openblas.write_bytes(bytes(CraftedElf().data).ljust(4096, b"\0"))
        self.openblas.chmod(0o644)
        self.churn = self.dir / "churn.bin"
        with open(self.churn, "wb") as f:
            f.truncate(16 << 20)  # 16 MiB of zeros: no call instruction anywhere
        self.churn.chmod(0o644)
        self.page = self.dir / "page.bin"
        self.page.write_bytes(b"\0" * 8192)  # the readable pages of the remap race
        self.page.chmod(0o644)

    def start(self, *args: str) -> Hostile:
        """The FUSE server and, once it is mounted, the hostile program with `args`."""
        script = 'mount --bind "$1" /dev/fuse && shift && exec "$@"'
        server_argv = [PYTHON, str(self.server_py), str(self.mnt), str(64 << 10)]
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]
        argv += [str(self.node), *AS_NOBODY, *server_argv, "--", str(self.binary), *args]
        server = self.spawn(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert server.stdout is not None
        for expected in ("mounted", "ready"):
            line = server.stdout.readline().strip()
            if line != expected:
                server.kill()
                pytest.fail(f"the hostile process did not start: {line!r} {server.communicate()}")
        program = wait_until(
            lambda: [p for p in descendants(server.pid) if _exe(p) == str(self.binary)],
            timeout=30,
            what="the hostile program",
        )
        hostile = Hostile(server, program[0])
        self.started.append(hostile)
        return hostile

    def release(self) -> None:
        """Kill every FUSE server started here: no read waits for one any more."""
        for hostile in self.started:
            hostile.release()

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


@pytest.fixture
def lab(spawn: Spawner) -> Iterator[Lab]:
    made = Lab(spawn)
    try:
        yield made
    finally:
        made.release()  # the servers first: nothing waits for one afterwards
        spawn.reap()
        made.close()


def run_oversub(
    hostile: Hostile, args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`oversub ARGS` as root, no terminal; past `DEADLINE_S` the FUSE server is killed
    (so that a read waiting for it ends) and the test fails: oversub hung. `env`: the test's
    (`Spawner.env`), so that what oversub starts is ended with the test."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [*OVERSUB, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        state = _state(proc.pid)
        hostile.release()
        proc.kill()
        # A command of `check` keeps its output pipe open after oversub dies (it runs as
        # another user: no parent-death signal): the fixture ends it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)
        pytest.fail(f"oversub {' '.join(args)} hung ({state}) for {DEADLINE_S:.0f} s")
    assert time.monotonic() - started < DEADLINE_S
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return "gone"
    states = [line for line in status.splitlines() if line.startswith("State:")]
    return f"{states[0] if states else '?'}, waiting in {wchan or '?'}"


def test_row1_addresses_into_a_fuse_file_on_the_stacks_do_not_hang_watch(lab: Lab) -> None:
    hostile = lab.start("--fuse", str(lab.stall))
    done = run_oversub(
        hostile,
        ["watch", str(hostile.pid), "--duration", "3", "--interval", "0.5", "--format", "json"],
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    owners = {o["owner"]: o["threads"] for p in doc["processes"] for o in p["owners"] or []}
    assert owners == {"unattributed": 5}, owners  # its code may not be read: no evidence


def test_row2_a_live_size_in_a_fuse_page_does_not_hang_the_first_sample(lab: Lab) -> None:
    hostile = lab.start("--fuse", str(lab.stall), "--threads", "0", "--openblas", str(lab.openblas))
    done = run_oversub(hostile, ["watch", str(hostile.pid), "--once", "--format", "json"])
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert "live_pools" in doc["unavailable"]
    assert doc["processes"][0]["live_pools"] == {}


RACE_S = 8.0
"""How long `watch` runs beside the remap race, at 0.2 s: before the fix the race was won in
the first 2-6 samples."""


def _stuck_readers(since: float) -> list[int]:
    """oversub's reader processes started after `since` (seconds since boot, as the clock
    of /proc/PID/stat) that wait for the FUSE server: abandoned by an oversub that went on."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat_line = Path(f"/proc/{name}/stat").read_text()
            wchan = Path(f"/proc/{name}/wchan").read_text()
        except OSError:
            continue
        comm = stat_line[stat_line.find("(") + 1 : stat_line.rfind(")")]
        fields = stat_line.rsplit(")", 1)[1].split()
        fresh = int(fields[19]) / ticks >= since
        if comm == "oversub-reader" and fresh and ("fuse" in wchan or "request_wait" in wchan):
            found.append(int(name))
    return found


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


@pytest.mark.parametrize("live", [False, True], ids=["stacks", "live-size"])
def test_the_remap_race_does_not_hang_watch(lab: Lab, live: bool) -> None:
    # Before: watch hung in request_wait_answer within seconds (S; D once interrupted),
    # "oversub watch ... hung (State: S, waiting in request_wait_answer) for 30 s".
    args = ["--fuse", str(lab.stall), "--threads", "0", "--remap", str(lab.page), "--life", "1"]
    if live:
        args += ["--openblas", str(lab.openblas)]
    hostile = lab.start(*args)
    since, started = _uptime() - 1, time.monotonic()
    argv = ["watch", str(hostile.pid), "--duration", f"{RACE_S:g}", "--interval", "0.2"]
    done = run_oversub(hostile, [*argv, "--format", "json"])
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < RACE_S + 10, f"watch took {took:.1f} s for a {RACE_S:g} s run"
    doc = json.loads(done.stdout)
    # The race was won: a read waited, its reader was abandoned and still waits, and the
    # process's memory was not read again (its live sizes unknown).
    assert _stuck_readers(since), "no abandoned reader: the race was not reached"
    assert "live_pools" in doc["unavailable"]


def _waiting_thread(pid: int) -> bool:
    """A thread of `pid` waits uninterruptibly (its memory lock's writer)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "D":
            return True
    return False


def test_a_process_holding_its_own_memory_lock_does_not_hang_watch(lab: Lab) -> None:
    # Before: watch blocked at its first sample reading the process's cmdline, in D in
    # __access_remote_vm, where ^C does nothing (no FUSE page of it is ever read by oversub).
    hostile = lab.start("--fuse", str(lab.stall), "--threads", "0", "--hold-lock")
    wait_until(lambda: _waiting_thread(hostile.pid), what="the lock held and a writer waiting")
    started = time.monotonic()
    argv = ["watch", str(hostile.pid), "--duration", "3", "--interval", "0.5"]
    done = run_oversub(hostile, [*argv, "--format", "json"])
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < 3 + 10, f"watch took {took:.1f} s for a 3 s run"
    doc = json.loads(done.stdout)
    # Nothing read of its memory: live sizes, and the variables and pools it never got to.
    assert {"live_pools", "pools", "thread_env"} <= set(doc["unavailable"])
    assert doc["processes"][0]["cmdline"] == ""


def test_check_of_a_command_ends_on_time_while_a_reader_waits(lab: Lab) -> None:
    # `check -- CMD` where CMD (run as nobody in the FUSE server's mount namespace) is the
    # remap race: check ends it at --timeout and exits while its abandoned reader still
    # waits for the server (which check does not know of and does not end).
    if shutil.which("nsenter") is None:
        pytest.skip("no nsenter")
    hostile = lab.start("--fuse", str(lab.stall), "--threads", "0")
    command = ["nsenter", "-t", str(hostile.server.pid), "-m", *AS_NOBODY, str(lab.binary)]
    command += ["--fuse", str(lab.stall), "--threads", "0", "--remap", str(lab.page)]
    report = lab.dir / "check.json"
    since, started = _uptime() - 1, time.monotonic()
    argv = ["check", "--timeout", "8", "--interval", "0.2", "--warmup", "0"]
    done = run_oversub(hostile, [*argv, "--json", str(report), "--", *command], lab.spawn.env)
    took = time.monotonic() - started
    assert done.returncode in (0, 1), done.stderr  # a verdict, not an error
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert took < 8 + 10, f"check took {took:.1f} s with a timeout of 8 s"
    assert _stuck_readers(since), "no abandoned reader: the race was not reached"
    assert "live_pools" in json.loads(report.read_text())["unavailable"]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text: str = response.read().decode("utf-8")
        return text


def _cpu_s(pid: int) -> float:
    """CPU of `pid`, of its children it reaped, and of its live children (its readers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            mine = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(mine[11]) + int(mine[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


SERVE_S = 60.0
"""How long serve must keep answering (the issue's minute)."""
SCRAPE_EVERY_S = 2.0
CPU_BOUND = 0.15
"""Of one CPU, for `serve --all --interval 1` over the minute, its readers included:
measured 0.019 and 0.027 before the remap race was added, 0.013 and 0.020 with it and the
process holding its memory lock (a 2-vCPU machine shared with other work; 4 December)."""
RSS_BOUND_MIB = 120.0
"""serve's peak RSS: measured 32.7 and 50.1 MiB, then 33.7 and 37.9 MiB (it depends on what
else runs on the node; a reader holds 9.7 MiB of its own, 4.2 MiB proportional).
Before issue 38 `watch PID` of the row 3 process alone peaked at 102 MiB and 2.2 s of CPU
in 20 s (0.11 of a CPU)."""


def test_serve_all_answers_every_scrape_beside_rows_1_to_4_at_once(lab: Lab) -> None:
    # Before issue 38 serve blocked in its first sample of this process (state D): no
    # scrape had data again ("not reached within 60 s: serve's first data"). Here with the
    # remap race besides, and a second process that holds its own memory lock.
    lab.start(
        "--fuse",
        str(lab.stall),
        "--openblas",
        str(lab.openblas),
        "--churn",
        str(lab.churn),
        "--polars",
        "--remap",
        str(lab.page),
    )
    lab.start("--fuse", str(lab.stall), "--threads", "0", "--hold-lock")
    since = _uptime() - 1
    port = _free_port()
    serve = lab.spawn(
        [*OVERSUB, "serve", "--all", "--interval", "1", "--bind", "127.0.0.1", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _scraped(port), timeout=60, interval=0.5, what="serve's first data")
        cpu_before, started = _cpu_s(serve.pid), time.monotonic()
        scrapes = 0
        while time.monotonic() - started < SERVE_S:
            assert serve.poll() is None, serve.communicate()
            text = _scrape(port)
            assert _has_data(text), text[-2000:]
            scrapes += 1
            time.sleep(SCRAPE_EVERY_S)
        cpu = (_cpu_s(serve.pid) - cpu_before) / (time.monotonic() - started)
        rss = _peak_rss_mib(serve.pid)
    except BaseException:
        lab.release()  # whatever happened, nothing may wait for a server
        raise
    readers = [p for p in descendants(serve.pid) if _comm(p) == "oversub-reader"]
    print(
        f"serve --all beside rows 1-4: {scrapes} scrapes, {cpu:.3f} CPU (readers included), "
        f"peak {rss:.1f} MiB, readers now {len(readers)}, stuck {len(_stuck_readers(since))}"
    )
    assert _stuck_readers(since), "no abandoned reader: the remap race was not reached"
    assert scrapes >= SERVE_S / SCRAPE_EVERY_S / 2
    assert cpu < CPU_BOUND, f"serve used {cpu:.3f} of a CPU"
    assert rss < RSS_BOUND_MIB, f"serve peaked at {rss:.1f} MiB"
    serve.send_signal(signal.SIGTERM)
    _, err = serve.communicate(timeout=30)
    assert serve.returncode == 130, err
    assert "Traceback" not in err and "internal error" not in err


def _has_data(text: str) -> bool:
    """A scrape of a sample that read the node: up, and threads counted."""
    return "oversub_up 1.0" in text and "oversub_threads{" in text


def _scraped(port: int) -> bool:
    try:
        return _has_data(_scrape(port))
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


WRAPPER = """
import os, select, sys
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0.05)[0]:
    pass  # wakes 20 times a second: it runs, so every sample reads it again
sys.stdin.readline()
os.execv("/bin/sleep", ["sleep", "600"])
"""


def test_row5_a_python_wrapper_that_execs_a_native_program_is_that_program(
    spawn: Spawner,
) -> None:
    # Row 5 with real processes: its main thread is the interpreter's while the wrapper
    # runs, and no longer once it exec'd `sleep` (same pid, same start time).
    from oversub.probe.sampler import TreeSampler

    wrapper = spawn(
        [PYTHON, "-c", WRAPPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert wrapper.stdin is not None and wrapper.stdout is not None
    assert wrapper.stdout.readline().strip() == "ready"

    def owner(sampler: TreeSampler) -> str | None:
        found = sampler.sample().processes[wrapper.pid].owners
        return None if found is None else found[wrapper.pid]

    with TreeSampler(wrapper.pid) as sampler:
        wait_until(lambda: owner(sampler) == "python", timeout=30, interval=0.2, what="python")
        wrapper.stdin.write("exec\n")
        wrapper.stdin.flush()
        wait_until(
            lambda: _exe(wrapper.pid) == "/usr/bin/sleep", timeout=30, what="the exec of sleep"
        )
        wait_until(
            lambda: owner(sampler) == "unattributed", timeout=30, interval=0.2, what="the reset"
        )
