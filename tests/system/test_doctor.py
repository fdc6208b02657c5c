"""`oversub doctor` as a process, on runtimes that misbehave: stand-ins for polars, pyarrow,
duckdb and numexpr put first on PYTHONPATH that raise at import, abort, hang, or start a
thread. Each is a row that says what happened, never a failure of doctor; nothing it started
(a child, a cgroup) outlives it, also when it is interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from oversub.run.confine import cpu_hierarchy
from tests.support.harness import OVERSUB

pytestmark = pytest.mark.integration

FAKES = {
    "polars.py": "raise ImportError('no polars here')\n",
    "pyarrow.py": "import os\nos.abort()\n",
    "duckdb.py": "import time\ntime.sleep(3600)\n",
    "numexpr.py": textwrap.dedent(
        """\
        import threading
        __version__ = "9.9"
        nthreads = 3
        started = []
        def evaluate(expr, local_dict=None):
            if not started:
                idle = threading.Thread(target=threading.Event().wait, daemon=True)
                started.append(idle)
                idle.start()
            return sum(range(20000))
        """
    ),
}


@pytest.fixture
def fakes(tmp_path: Path) -> dict[str, str]:
    for name, text in FAKES.items():
        (tmp_path / name).write_text(text)
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(tmp_path), "OVERSUB_TEST_TOKEN": token}


def _survivors(token: str) -> list[int]:
    """Processes whose environment holds the test's token (doctor's children inherit it)."""
    found = []
    needle = f"OVERSUB_TEST_TOKEN={token}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(name))
    return found


def _leftover_cgroups(pid: int) -> list[str]:
    found = cpu_hierarchy()
    if found is None:
        return []
    _, parent, _ = found
    return [n for n in os.listdir(parent) if n.startswith(f"oversub-doctor-{pid}-")]


def _doctor(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*OVERSUB, "doctor", "--python", sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_each_misbehaving_runtime_is_a_row(fakes: dict[str, str]) -> None:
    args = ("-r", "polars", "-r", "pyarrow", "-r", "duckdb", "-r", "numexpr", "--timeout", "3")
    done = _doctor(fakes, *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    rows = {r["runtime"]: r for r in data["runtimes"]}
    assert set(rows) == {"polars", "pyarrow", "duckdb", "numexpr"}
    applied = {r["kind"]: r["applied"] for r in data["runs"]}
    for key, status, error in (
        ("polars", "failed", "import: ImportError: no polars here"),
        ("pyarrow", "crashed", "killed by SIGABRT"),
        ("duckdb", "timed-out", "not done within 3 s"),
    ):
        for m in rows[key]["measurements"]:
            if not applied[m["kind"]]:
                assert m["status"] == "not-run"
                continue
            assert (m["status"], m["error"]) == (status, error), (key, m)
        assert rows[key]["threads"] is None and rows[key]["oversubscribes"] is None
    numexpr = rows["numexpr"]
    assert numexpr["version"] == "9.9"  # no distribution: the module's own __version__
    host = next(m for m in numexpr["measurements"] if m["kind"] == "host")
    assert host["status"] == "measured"
    assert host["started"] == {"python": 1}  # the interpreter's thread: no pool
    assert host["threads"] == 0 and host["at_import"] == 0
    assert host["busy"] is not None and host["busy"] >= 1  # the loop's own thread at least
    assert host["reported"] == {"numexpr.nthreads": "3"}
    assert numexpr["sized_from"] == "no-threads"
    assert _survivors(fakes["OVERSUB_TEST_TOKEN"]) == []
    assert "Traceback" not in done.stderr


def test_text_names_what_failed_and_what_is_missing(fakes: dict[str, str]) -> None:
    done = _doctor(fakes, "-r", "polars", "-r", "torch", "--timeout", "5")
    assert done.returncode == 0, done.stderr
    assert "polars (host): failed: import: ImportError: no polars here" in done.stdout
    assert "not installed: torch" in done.stdout


def test_an_interrupt_ends_doctor_and_everything_it_started(fakes: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [*OVERSUB, "doctor", "--python", sys.executable, "-r", "duckdb", "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=fakes,
    )
    token = fakes["OVERSUB_TEST_TOKEN"]
    deadline = time.monotonic() + 30
    while len(_survivors(token)) < 2 and time.monotonic() < deadline:  # doctor and its child
        time.sleep(0.05)
    assert len(_survivors(token)) >= 2, "the hanging child never started"
    time.sleep(0.3)  # the child is inside its import
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert _survivors(token) == []
    assert _leftover_cgroups(proc.pid) == []


def test_an_interpreter_that_cannot_list_its_packages_is_exit_3(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'not python' >&2\nexit 1\n")
    fake.chmod(0o755)
    done = subprocess.run(
        [*OVERSUB, "doctor", "--python", str(fake)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        f"oversub: error: {fake} could not list its packages: exited with status 1: not python"
    ]


def test_what_a_runtime_says_is_bounded_and_escaped(tmp_path: Path) -> None:
    (tmp_path / "polars.py").write_text("raise ImportError('\\x1b[2J' + 'x' * 10000)\n")
    (tmp_path / "numexpr.py").write_text(
        "__version__ = '\\x1b]0;title\\x07' + '9' * 5000\n"
        "nthreads = 1\n"
        "def evaluate(expr, local_dict=None):\n"
        "    return 0\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = _doctor(env, "-r", "polars", "-r", "numexpr", "--timeout", "30")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    failed = next(ln for ln in done.stdout.splitlines() if ln.startswith("  polars (host)"))
    assert "failed: import: ImportError: \\x1b[2Jxxx" in failed and len(failed) < 400
    numexpr = next(ln for ln in done.stdout.splitlines() if ln.startswith("numexpr"))
    assert "\\x1b]0;title\\x07999" in numexpr and len(numexpr) < 400
