"""Nothing judged that was not seen (docs/security.md, "What oversub could not see"): a tree
whose processes oversub could not read whole is never `ok`; the gap is `processes` in
`unavailable`, and an oversubscribed verdict on what was seen stands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.analysis.summary import UNSEEN_NOTE, RunSummary
from oversub.core.names import Signal, Verdict
from oversub.core.thresholds import Thresholds
from oversub.probe import hidden
from oversub.probe.sampler import TreeSampler
from tests.support.builders import analyse, budget, busy_workers
from tests.support.fake_proc import FakeProc, FakeThread, deny_open

TH = Thresholds()
REPO = Path(__file__).resolve().parents[2]


def _summary(procs: list, unseen: bool):  # type: ignore[no-untyped-def,type-arg]

    iv = analyse(procs, 2, thresholds=TH)
    if unseen:
        iv = iv._replace(unavailable=(*iv.unavailable, Signal.PROCESSES))
    run = RunSummary()
    run.add(iv)
    return run.result(budget(2), TH, target_exited=False)


def test_an_ok_on_a_tree_not_seen_whole_is_not_judged() -> None:
    light = busy_workers(1, 1, delay=0.0)
    assert _summary(light, unseen=False).verdict is Verdict.OK
    s = _summary(light, unseen=True)
    assert s.verdict is None and s.not_judged == UNSEEN_NOTE
    assert Signal.PROCESSES in s.unavailable


def test_an_oversubscribed_verdict_on_what_was_seen_stands() -> None:
    heavy = busy_workers(4, 2, delay=0.5)
    s = _summary(heavy, unseen=True)
    assert s.verdict is Verdict.OVERSUBSCRIBED and s.not_judged is None
    assert Signal.PROCESSES in s.unavailable


def _fake_tree(tmp_path: Path) -> FakeProc:
    fake = FakeProc(tmp_path)
    fake.add_process(100, ppid=1, comm="sh", threads=[FakeThread(100)])
    fake.add_process(101, ppid=100, comm="spin", threads=[FakeThread(101, cpu_ns=5)])
    return fake


def test_a_member_whose_task_directory_is_refused_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Listed by the scan (stat readable), but its threads refused: it was dropped silently.
    _fake_tree(tmp_path)
    deny_open(monkeypatch, tmp_path / "proc" / "101" / "task")
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert 101 not in sample.processes
    assert Signal.PROCESSES in sample.unavailable


def _mountinfo(fake: FakeProc, options: str) -> None:
    where = os.path.realpath(fake.proc)
    (fake.proc / "self").mkdir(exist_ok=True)
    (fake.proc / "self" / "mountinfo").write_text(
        "22 27 0:21 / /sys rw,relatime - sysfs sysfs rw\n"
        f"23 27 0:22 / {where} rw,nosuid,nodev,noexec,relatime - proc proc {options}\n"
    )


@pytest.mark.parametrize(
    ("options", "hides"),
    [
        ("rw,hidepid=invisible", True),
        ("rw,hidepid=2", True),
        ("rw", False),
        ("rw,hidepid=0", False),
    ],
)
def test_a_hidden_child_of_the_tree_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: str, hides: bool
) -> None:
    # hidepid=2: the setuid child is not listed at all; its parent's children file names it.
    fake = FakeProc(tmp_path)
    fake.add_process(100, ppid=1, comm="sh", threads=[FakeThread(100)])
    (fake.proc / "100" / "task" / "100" / "children").write_text("4242 ")
    _mountinfo(fake, options)
    monkeypatch.setattr(hidden.os, "geteuid", lambda: 65534)
    assert hidden.hides_processes(str(fake.proc)) is hides
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert (Signal.PROCESSES in sample.unavailable) is hides


def test_root_is_never_hidden_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeProc(tmp_path)
    _mountinfo(fake, "rw,hidepid=2")
    monkeypatch.setattr(hidden.os, "geteuid", lambda: 0)
    assert hidden.hides_processes(str(fake.proc)) is False


def test_a_child_that_is_listed_is_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake_tree(tmp_path)
    (fake.proc / "100" / "task" / "100" / "children").write_text("101 ")
    _mountinfo(fake, "rw,hidepid=2")
    monkeypatch.setattr(hidden.os, "geteuid", lambda: 65534)
    sample = TreeSampler(100, root=str(tmp_path)).sample()
    assert 101 in sample.processes and Signal.PROCESSES not in sample.unavailable


# --------------------------------------------------- a real hidepid=2 /proc, as nobody

SPIN_C = r"""
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static double secs;
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
static void *spin(void *arg) {
    double end = now() + secs;
    volatile unsigned long x = 0;
    while (now() < end) x++;
    return arg;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    pthread_t t[64];
    secs = atof(argv[2]);
    for (int i = 0; i < n && i < 64; i++) pthread_create(&t[i], 0, spin, 0);
    for (int i = 0; i < n && i < 64; i++) pthread_join(t[i], 0);
    return 0;
}
"""


@pytest.fixture
def setuid_spinner() -> Iterator[Path]:
    """A setuid-root program running N busy threads for S seconds, in a directory that
    nobody can reach."""
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("needs root and gcc")
    work = Path(tempfile.mkdtemp(prefix="oversub-hidepid-"))
    try:
        work.chmod(0o777)  # nobody writes the report there
        (work / "spin.c").write_text(SPIN_C)
        subprocess.run(
            ["gcc", "-O1", "-pthread", "-o", str(work / "spin"), str(work / "spin.c")],
            check=True,
            timeout=120,
        )
        (work / "spin").chmod(0o4755)
        yield work / "spin"
    finally:
        shutil.rmtree(work)


def _system_python() -> str | None:
    """An interpreter nobody may execute (the venv's lives under /root), of this version."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv(1)")
def test_nobody_on_a_hidepid_proc_does_not_pass_a_tree_it_could_not_see(
    setuid_spinner: Path,
) -> None:
    # oversub as nobody saw only the idle `sh` of `check -- sh -c 'spin 3 2'` and passed:
    # ok, exit 0, nothing in `unavailable`.
    python = _system_python()
    if python is None:
        pytest.skip(f"needs a system python{sys.version_info.major}.{sys.version_info.minor}")
    path = os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])
    report = setuid_spinner.parent / "r.json"
    oversub = (
        f"{python} -m oversub check --interval 0.2 --warmup 0 --json {report} "
        f"-- sh -c '{setuid_spinner} 3 2'"
    )
    script = (
        "set -e; mount -t proc -o hidepid=2 proc /proc; "
        f"cd {setuid_spinner.parent}; "
        "exec setpriv --reuid=65534 --regid=65534 --clear-groups "
        f"env PYTHONPATH={path} {oversub}"
    )
    run = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 3, run.stderr
    doc = json.loads(report.read_text())
    assert doc["verdict"] is None and "processes" in doc["unavailable"], doc
    assert doc["not_judged_reason"] == UNSEEN_NOTE
    last = run.stderr.splitlines()[-1]
    assert last.startswith("oversub check: error: not judged: processes of the tree"), last
    assert last.endswith("exit 3"), last
