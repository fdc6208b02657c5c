"""`oversub tune -- CMD` on real, short commands: ranking, ties, interleaving, the budget,
Ctrl-C, failures.

Every run is pinned to one CPU (N = 1: the candidates are the default and T=1), so what is
tested does not depend on the machine's size. The commands' speeds are set by design from
the variables tune sets, with gaps far wider than a loaded machine's noise.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus
from tests.support.harness import OVERSUB, Spawner, alive, descendants, pin_to_one_cpu, wait_until
from tests.support.harness import oversub as run_oversub

pytestmark = pytest.mark.integration

PY = [sys.executable, "-S", "-c"]

# Sleeps 0.05 s with one thread, 0.8 s with the inherited default: a truly faster candidate.
BY_THREADS = (
    "import os, time\n"
    "t = os.environ.get('OMP_NUM_THREADS')\n"
    "time.sleep(0.05 if t == '1' else 0.8)\n"
)


def tune(args: list[str], command: list[str]) -> subprocess.CompletedProcess[str]:
    return run_oversub(["tune", "--interval", "0.2", *args, "--", *command], pin=True)


def test_a_truly_faster_candidate_is_ranked_first_and_fails_the_gate(tmp_path: Path) -> None:
    report = tmp_path / "tune.json"
    flags = ["--runs", "3", "--warmup", "0", "--json", str(report), "--fail-if-slower", "20"]
    result = tune([*flags, "--record", str(tmp_path / "rec")], [*PY, BY_THREADS])
    assert result.returncode == ExitStatus.FOUND, result.stderr
    doc = json.loads(report.read_text())
    assert doc["ranking"]["best"] == "T=1" and doc["ranking"]["pick"] == "T=1"
    assert doc["ranking"]["default_distinguishable"] is True
    assert doc["ranking"]["default_slower"] > 2
    # Interleaved: default, T=1, default, T=1, ... recorded in the order they ran.
    order = [t["candidate"] for t in doc["trials"]]
    assert order == ["default", "T=1"] * 3
    assert [t["index"] for t in doc["trials"]] == [1, 2, 3, 4, 5, 6]
    assert "T=1" in result.stdout and "export OMP_NUM_THREADS=1" in result.stdout
    assert "trial 6 of 6" in result.stderr
    # Each trial's recording, which `report` reads back.
    records = sorted((tmp_path / "rec").iterdir())
    assert [t["record"] for t in doc["trials"]] == [str(p) for p in records]
    replayed = run_oversub(["report", str(records[1]), "--format", "json"])
    assert replayed.returncode == ExitStatus.OK, replayed.stderr


def test_equal_candidates_are_indistinguishable(tmp_path: Path) -> None:
    # A speed that does not depend on the variables: the trials print 99, 100, 100, 101, 101,
    # 99 in the order they run (a counter file), so each candidate's three figures have the
    # same mean whatever the machine does.
    counter = tmp_path / "count"
    counter.write_text("0")
    script = (
        "import pathlib\n"
        f"p = pathlib.Path({str(counter)!r}); n = int(p.read_text()); p.write_text(str(n + 1))\n"
        "print('rate=%d' % (99, 100, 100, 101, 101, 99)[n % 6], flush=True)\n"
    )
    result = tune(
        ["--metric", "rate", "--trial-seconds", "20", "--runs", "3", "--format", "json"],
        [*PY, script],
    )
    assert result.returncode == ExitStatus.OK, result.stderr
    doc = json.loads(result.stdout)
    assert doc["mode"] == "fixed-time"
    means = [c["stats"]["mean"] for c in doc["candidates"]]
    assert means == [100.0, 100.0]
    assert set(doc["ranking"]["tied_with_best"]) == {"default", "T=1"}
    assert doc["ranking"]["pick"] == "T=1"  # the cheaper of the two (1 CPU claimed, not N)
    assert doc["ranking"]["runs_to_separate"] is None
    md = tune(["--metric", "rate", "--runs", "1", "--format", "markdown"], [*PY, script])
    assert md.returncode == ExitStatus.OK, md.stderr
    assert md.stdout.startswith("## oversub tune\n") and "| candidate |" in md.stdout


def test_the_budget_ends_the_run_within_one_trial(tmp_path: Path) -> None:
    result = tune(
        ["--budget", "3s", "--runs", "10", "--warmup", "0", "--format", "json"],
        [*PY, "import time; time.sleep(0.6)"],
    )
    assert result.returncode == ExitStatus.OK, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ended"] == "budget"
    longest = max(t["seconds"] for t in doc["trials"])
    assert doc["elapsed_s"] <= 3.0 + longest + 0.5
    assert 2 <= len(doc["trials"]) < 20


def test_a_failing_default_exits_3_and_a_failing_candidate_is_shown_failed() -> None:
    fails_by_default = "import os, sys; sys.exit(0 if os.environ.get('OMP_NUM_THREADS') else 4)"
    result = tune(["--runs", "2", "--warmup", "0"], [*PY, fails_by_default])
    assert result.returncode == ExitStatus.UNOBSERVABLE
    assert "the default run failed (exit status 4)" in result.stderr
    fails_tuned = "import os, sys; sys.exit(5 if os.environ.get('OMP_NUM_THREADS') else 0)"
    shown = tune(["--runs", "2", "--warmup", "0", "--format", "json"], [*PY, fails_tuned])
    assert shown.returncode == ExitStatus.OK, shown.stderr
    doc = json.loads(shown.stdout)
    failed = [t for t in doc["trials"] if t["candidate"] == "T=1"]
    assert failed and all(t["failure"] == "exit status 5" and t["status"] == 5 for t in failed)


def test_no_metric_line_is_an_error_naming_the_metric() -> None:
    result = tune(["--metric", "steps_per_s", "--trial-seconds", "5"], [*PY, "print('hello')"])
    assert result.returncode == ExitStatus.UNOBSERVABLE
    assert "steps_per_s=<number>" in result.stderr


def test_any_finite_figure_gives_the_table_and_the_json(tmp_path: Path) -> None:
    # A CMD printing figures near the largest double, or 1e-300 by default and 1e300 tuned:
    # an internal error (exit 3, no table, no --json) or "runs infx as fast" before.
    for default, tuned, says in [
        ("1.7e308", "1e308", "1.7e+308"),
        ("1e-300", "1e300", "T=1 runs more than 1000x as fast as the default"),
    ]:
        script = (
            "import os\n"
            f"print('m=' + ({tuned!r} if os.environ.get('OMP_NUM_THREADS') else {default!r}))\n"
        )
        report = tmp_path / f"{default}.json"
        flags = ["--metric", "m", "--trial-seconds", "5", "--runs", "2", "--json", str(report)]
        result = tune(flags, [*PY, script])
        assert result.returncode == ExitStatus.OK, result.stderr
        assert says in result.stdout and "inf" not in result.stdout
        doc = json.loads(report.read_text())
        assert [c["stats"]["n"] for c in doc["candidates"]] == [2, 2]


# Two processes busy for a fixed 0.6 s whatever the setting (a time-bound command), each trial
# logging the thread variables it was given, then a throughput line.
TIME_BOUND = (
    "import json, os, subprocess, sys\n"
    "with open(sys.argv[1], 'a') as log:\n"
    "    log.write(json.dumps({k: v for k, v in os.environ.items() if 'THREAD' in k}) + '\\n')\n"
    "spin = 'import time\\nend = time.monotonic() + 0.6\\nwhile time.monotonic() < end: pass'\n"
    "workers = [subprocess.Popen([sys.executable, '-S', '-c', spin]) for _ in range(2)]\n"
    "for w in workers: w.wait()\n"
    "print('proc=0 steps=42 steps_per_s=70.0', flush=True)\n"
)


def test_a_time_bound_command_and_inherited_variables_are_said(tmp_path: Path) -> None:
    # No --procs: M is what the first trial ran busy at once (2), not an assumed 1. Every trial
    # takes 0.6 s: tune says wall time cannot rank them, and names the figure to use. Its own
    # environment's thread variables: the default runs with them, T=1 really runs with 1.
    log = tmp_path / "env.ndjson"
    inherited = {
        "OMP_NUM_THREADS": "7",
        "RAYON_NUM_THREADS": "7",
        "MKL_DOMAIN_NUM_THREADS": "MKL_BLAS=7",
        "OMP_PROC_BIND": "close",
    }
    result = run_oversub(
        ["tune", "--interval", "0.1", "--runs", "3", "--format", "json", "--",
         *PY, TIME_BOUND, str(log)],
        env=inherited,
        pin=True,
    )  # fmt: skip
    assert result.returncode == ExitStatus.OK, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["procs"], doc["procs_source"], doc["procs_seen"]) == (2, "trials", 2)
    assert "planning for M = 2" in result.stderr
    notes = "\n".join(doc["notes"])
    assert "every candidate took about the same wall time" in notes
    assert "(CMD prints steps_per_s=<number>: --metric steps_per_s)" in notes
    assert "the default candidate runs with them, so it is not the libraries' default" in notes
    assert "every trial inherits OMP_PROC_BIND=close" in notes
    assert "tune's environment sets" in result.stderr  # said before the first trial too
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    order = [t["candidate"] for t in doc["trials"]]
    assert len(seen) == len(order) and set(order) == {"default", "T=1"}
    for label, env in zip(order, seen, strict=True):
        if label == "default":
            assert env["OMP_NUM_THREADS"] == "7" and env["MKL_DOMAIN_NUM_THREADS"] == "MKL_BLAS=7"
        else:
            assert env["OMP_NUM_THREADS"] == env["RAYON_NUM_THREADS"] == "1"
            assert "MKL_DOMAIN_NUM_THREADS" not in env
    assert doc["setting"]["unset"] == ["MKL_DOMAIN_NUM_THREADS"]


def test_ctrl_c_stops_the_tree_and_prints_the_partial_table(spawn: Spawner) -> None:
    # The default runs quickly; every tuned trial starts a child and sleeps, so the signal
    # lands in the middle of a trial with a tree of two processes.
    script = (
        "import os, subprocess, sys, time\n"
        "if os.environ.get('OVERSUB_TUNE_THREADS'):\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "    time.sleep(600)\n"
        "time.sleep(0.05)\n"
    )
    tuning = spawn(
        [*OVERSUB, "tune", "--runs", "3", "--warmup", "0", "--", *PY, script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=pin_to_one_cpu,
    )

    def whole_tree() -> set[int] | None:
        tree = descendants(tuning.pid)
        return tree if len(tree) >= 2 else None

    tree = wait_until(whole_tree, what="the tuned trial and its child")
    tuning.send_signal(signal.SIGINT)
    out, err = tuning.communicate(timeout=30)
    assert tuning.returncode == ExitStatus.INTERRUPTED, err
    assert [pid for pid in tree if alive(pid)] == []
    assert "interrupted: the table has what was measured until then" in out
    assert "default" in out and "T=1" in out
