"""fork-after-threads and fork-hang judge the parent by the threads it ran when it forked
the child (thread start times against the child's), not by the threads it runs when
sampled: a parent that forked while single-threaded and started threads afterwards is
not accused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from oversub.analysis.verdict import assess
from oversub.core.rules import Rule
from oversub.core.thresholds import Thresholds
from oversub.recording.replay import parse, reassess
from tests.support.builders import IDLE, ROOT, Load, Proc, analyse, recording_lines
from tests.support.harness import OVERSUB, Spawner, wait_until

TH = Thresholds()
CHILD_START = 5000


def _tree(parent_thread_starts: tuple[int, ...] | None, *, hung: bool) -> list[Proc]:
    parent = Proc(
        ROOT,
        (Load(cpu=0.5), IDLE, IDLE, IDLE),
        ppid=1,
        cmdline="python train.py",
        start_ticks=1000,
        thread_starts=parent_thread_starts,
    )
    child = Proc(
        301,
        (IDLE,) if hung else (Load(cpu=0.3),),
        cmdline="python train.py",
        pools=("libgomp",),
        wait="futex-private" if hung else None,
        start_ticks=CHILD_START,
        thread_starts=(CHILD_START,),
    )
    return [parent, child]


def _rules(procs: list[Proc], dt: float = 1.0) -> set[str]:
    iv = analyse(procs, 2, dt=dt, thresholds=TH)
    return {f.rule.value for f in assess(iv, TH).findings}


@pytest.mark.parametrize(
    ("rule", "hung", "dt"),
    [(Rule.FORK_AFTER_THREADS, False, 1.0), (Rule.FORK_HANG, True, TH.idle_seconds)],
)
def test_threads_started_after_the_fork_do_not_accuse_the_parent(
    rule: Rule, hung: bool, dt: float
) -> None:
    # The parent forked while it ran one thread (its main one, started at 1000) and started
    # three more afterwards (at 6000): it was accused from its thread count when sampled.
    after = (1000, CHILD_START + 1000, CHILD_START + 1000, CHILD_START + 1000)
    assert rule.value not in _rules(_tree(after, hung=hung), dt)
    # Started before the fork: the child was forked from a parent running 4 threads.
    before = (1000, 2000, 2000, 3000)
    assert rule.value in _rules(_tree(before, hung=hung), dt)
    # Thread start times unknown (the psutil fallback): the threads seen now, as before.
    assert rule.value in _rules(_tree(None, hung=hung), dt)


def test_a_thread_started_in_the_childs_own_tick_is_not_counted() -> None:
    same_tick = (1000, CHILD_START, CHILD_START, CHILD_START)
    assert Rule.FORK_AFTER_THREADS.value not in _rules(_tree(same_tick, hung=False))


def test_the_count_at_fork_is_recorded_and_replayed() -> None:
    after = (1000, CHILD_START + 1000, CHILD_START + 1000, CHILD_START + 1000)
    iv = analyse(_tree(after, hung=False), 2, thresholds=TH)
    child = next(p for p in iv.processes if p.pid == 301)
    assert child.parent_threads_at_start == 1
    lines = recording_lines([iv])
    (recorded,) = [p for p in json.loads(lines[1])["p"] if p["pid"] == 301]
    assert recorded["pf"] == 1
    replay = reassess(parse(lines))
    assert Rule.FORK_AFTER_THREADS.value not in {f.rule.value for f in replay.summary.findings}
    replayed = next(p for p in parse(lines).intervals[0].processes if p.pid == 301)
    assert replayed.parent_threads_at_start == 1


JSON = ("--format", "json")
FORK_THEN_THREADS = """
import os, sys, threading, time
first = sys.argv[1] == "threads-first"
def idle():
    time.sleep(120)
if first:
    for _ in range(3):
        threading.Thread(target=idle, daemon=True).start()
    time.sleep(0.05)
pid = os.fork()
if pid == 0:
    time.sleep(120)
    os._exit(0)
if not first:
    time.sleep(0.05)  # a clock tick or more after the fork
    for _ in range(3):
        threading.Thread(target=idle, daemon=True).start()
print(pid, flush=True)
time.sleep(120)
"""


@pytest.mark.integration
@pytest.mark.parametrize(("order", "accused"), [("fork-first", False), ("threads-first", True)])
def test_a_real_parent_is_judged_by_its_threads_at_fork_time(
    spawn: Spawner, tmp_path: Path, order: str, accused: bool
) -> None:
    script = tmp_path / "forker.py"
    script.write_text(FORK_THEN_THREADS)
    parent = spawn([sys.executable, str(script), order], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    wait_until(
        lambda: len(list(Path(f"/proc/{parent.pid}/task").iterdir())) == 4,
        timeout=30,
        what="the parent's threads",
    )
    run = subprocess.run(
        [*OVERSUB, "watch", str(parent.pid), "--duration", "0.5", "--interval", "0.25", *JSON],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    found = {f["rule"]: f for f in json.loads(run.stdout)["findings"]}
    assert (Rule.FORK_AFTER_THREADS.value in found) is accused, found
    if accused:
        assert found[Rule.FORK_AFTER_THREADS.value]["pids"] == [child]
