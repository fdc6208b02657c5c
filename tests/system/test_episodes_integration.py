"""A bursty worker pool judged by its episodes (issue 43), on real processes.

`tests/support/bursty.py`: 2 spawned workers, each one busy thread, of which one now and
then forks 3 inner processes of its own (nested parallelism, as a test suite under `pytest
-n 2` whose tests use `n_jobs=3`). The tree is pinned to two CPUs of this process's
affinity, so the verdicts hold on any machine with two or more: 2 busy on 2 CPUs fits, 1 + 3
during a burst does not. Windows are seconds wide; a spike is one second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oversub.core.errors import ExitStatus
from tests.support.harness import OVERSUB

pytestmark = pytest.mark.integration

BURSTY = Path(__file__).parents[1] / "support" / "bursty.py"
CPUS = sorted(os.sched_getaffinity(0))[:2]

needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="the pool needs two CPUs to share")


def _pin() -> None:
    os.sched_setaffinity(0, set(CPUS))


def check(tmp_path: Path, seconds: float, *bursts: str) -> tuple[int, str, dict[str, Any]]:
    """`oversub check --fail-on oversubscribed` of the bursty pool: exit status, stderr, JSON."""
    doc, rec = tmp_path / "r.json", tmp_path / "run.ndjson"
    argv = [*OVERSUB, "check", "--fail-on", "oversubscribed", "--json", str(doc)]
    argv += ["--record", str(rec), "--", sys.executable, str(BURSTY)]
    argv += ["--workers", "2", "--inner", "3", "--seconds", str(seconds)]
    argv += [f"--burst={b}" for b in bursts]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + 60, preexec_fn=_pin
    )
    return done.returncode, done.stderr, json.loads(doc.read_text())


def overlap(e: dict[str, Any], start: float, end: float) -> float:
    return min(e["end_s"], end) - max(e["start_s"], start)


@needs_two
def test_a_pool_that_now_and_then_starts_inner_processes_fails_by_its_episodes(
    tmp_path: Path,
) -> None:
    status, err, doc = check(tmp_path, 16, "4:4", "10:4")
    assert status == ExitStatus.FOUND, err
    assert doc["verdict"] == "oversubscribed"
    over = [e for e in doc["episodes"] if e["verdict"] == "oversubscribed"]
    total = next(t for t in doc["episode_totals"] if t["verdict"] == "oversubscribed")
    assert total["counts"] and total["seconds"] >= 4.0
    # The bursts start 4 and 10 s after the pool, about 3 and 9 s after the first sample
    # (a 1-s warm-up): each is an episode of at least 2 s there.
    for window in ((2.0, 8.0), (8.0, 14.0)):
        assert any(overlap(e, *window) >= 2.0 for e in over), (window, over)
    nested = [e for e in over if e["nesting"] is not None]
    assert nested, over
    n = nested[0]["nesting"]
    assert (n["role"], n["inner_role"], n["workers"]) == ("spawn worker", "forked worker", 2)
    assert n["inner"] >= 2 and n["message"].startswith("Nested parallelism: ")
    assert nested[0]["demand_peak"] > 2 * 1.15
    busy = {p["role"] for p in nested[0]["processes"]}
    assert busy == {"spawn worker", "forked worker"}
    assert any(p["parents"][0]["role"] == "spawn worker" for p in nested[0]["processes"])
    # The text report lists them, with their times, peak demand and cause.
    assert "\nepisodes: " in err and "Nested parallelism: pid " in err
    assert "- oversubscribed at " in err and "peak demand " in err
    # The recording replays to the same episodes, and its HTML links the strip to them.
    rec = tmp_path / "run.ndjson"
    replay = subprocess.run(
        [*OVERSUB, "report", str(rec), "--format", "json"], capture_output=True, text=True
    )
    again = json.loads(replay.stdout)["summary"]["episodes"]
    assert [(e["verdict"], e["start_s"], e["end_s"]) for e in again] == [
        (e["verdict"], e["start_s"], e["end_s"]) for e in doc["episodes"]
    ]
    page = subprocess.run(
        [*OVERSUB, "report", str(rec), "--format", "html"], capture_output=True, text=True
    ).stdout
    for i, e in enumerate(doc["episodes"], start=1):
        assert f'id="episode-{i}"' in page
        assert f'<a href="#episode-{i}"><title>{e["verdict"]} at ' in page


@needs_two
def test_a_steady_pool_with_one_short_spike_is_not_failed_by_it(tmp_path: Path) -> None:
    status, err, doc = check(tmp_path, 14, "7:1")
    assert status == ExitStatus.OK, err
    assert doc["verdict"] != "oversubscribed"
    spikes = [e for e in doc["episodes"] if e["verdict"] == "oversubscribed"]
    assert spikes and not any(e["counts"] for e in spikes), doc["episodes"]
    assert sum(e["seconds"] for e in spikes) < 3.0
    assert "below the rule" in err
