"""`oversub diff` and `check --metric`: the rule "AFTER is not worse" and its exit codes, on
synthetic recordings; the metric captured from a real command's stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus
from oversub.recording.compare import compare
from oversub.recording.replay import parse, reassess
from oversub.recording.types import Replay
from tests.support.builders import oversubscribed_run, recording_lines
from tests.support.harness import oversub, run_cli


def replay(threads: int, delay: float, metric: float | None = None) -> Replay:
    lines = recording_lines(oversubscribed_run(4, threads=threads, delay=delay))
    if metric is not None:
        summary = json.loads(lines[-1])
        summary["metrics"] = {"steps": metric}
        lines[-1] = json.dumps(summary)
    return reassess(parse(lines))


OVER = dict(threads=2, delay=0.5)  # 3 workers x 2 threads waiting half the time on N = 2
FIXED = dict(threads=1, delay=0.0)  # one thread each, no waiting: demand 3.45 still > N


def test_the_fix_is_better_and_not_worse() -> None:
    c = compare(replay(**OVER, metric=100), replay(**FIXED, metric=180), "steps")
    assert c.worse == () and c.unjudged == ()
    assert any(r.startswith("delay ratio") for r in c.better)
    assert "steps 100 -> 180" in c.better


def test_undoing_the_fix_is_worse_for_every_reason() -> None:
    c = compare(replay(**FIXED, metric=180), replay(**OVER, metric=100), "steps")
    reasons = " ".join(c.worse)
    assert "delay ratio" in reasons and "steps 180 -> 100 (more than 5% lower)" in reasons


def test_noise_within_the_tolerances_is_not_worse() -> None:
    c = compare(replay(**OVER, metric=100), replay(**OVER, metric=96), "steps")
    assert c.worse == ()
    c = compare(replay(**OVER, metric=100), replay(**OVER, metric=94), "steps")
    assert c.worse == ("steps 100 -> 94 (more than 5% lower)",)
    c = compare(replay(**OVER, metric=100), replay(**OVER, metric=94), "steps", tolerance=0.1)
    assert c.worse == ()


def test_a_metric_missing_after_is_worse_and_one_missing_before_is_not() -> None:
    assert compare(replay(**OVER, metric=1), replay(**OVER), "steps").worse == (
        "steps was not recorded in AFTER",
    )
    assert compare(replay(**OVER), replay(**OVER, metric=1), "steps").worse == ()


def write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_diff_exit_codes_in_every_format(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over = write(tmp_path / "over.ndjson", recording_lines(oversubscribed_run(4, **OVER)))
    fixed = write(tmp_path / "fixed.ndjson", recording_lines(oversubscribed_run(4, **FIXED)))
    code, out, err = run_cli(["diff", over, fixed, "--format", fmt], capsys)
    assert code == ExitStatus.OK, err
    assert "delay ratio" in out
    code, out, err = run_cli(["diff", fixed, over, "--format", fmt], capsys)
    assert code == ExitStatus.FOUND, err
    assert "worse" in out


def test_diff_of_files_that_are_not_recordings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "good.ndjson", recording_lines(oversubscribed_run(2)))
    bad = write(tmp_path / "bad.ndjson", ["{}"])
    code, out, err = run_cli(["diff", good, bad], capsys)
    assert code == ExitStatus.USAGE and out == "" and err.startswith("oversub: error: ")
    code, _, err = run_cli(["diff", good, str(tmp_path / "missing")], capsys)
    assert code == ExitStatus.UNOBSERVABLE, err
    code, _, err = run_cli(["diff", good, good, "--metric", "no spaces"], capsys)
    assert code == ExitStatus.USAGE, err
    nothing = write(tmp_path / "empty-run.ndjson", recording_lines([]))
    code, out, _ = run_cli(["diff", good, nothing], capsys)
    assert code == ExitStatus.UNOBSERVABLE and "cannot compare: AFTER has no verdict" in out


@pytest.mark.integration
def test_check_metric_keeps_the_last_value_and_passes_stdout_through(tmp_path: Path) -> None:
    rec = tmp_path / "run.ndjson"
    script = (
        "import sys, time\n"
        "print('steps=1.5 loss=3', flush=True)\n"
        "time.sleep(1.5)\n"
        "print('epoch 2 steps=2.25 other=9', flush=True)\n"
        "print('nosteps=100 steps=oops', flush=True)\n"
    )
    flags = ["--interval", "0.5", "--warmup", "0.2", "--record", str(rec), "--metric", "steps"]
    result = oversub(["check", *flags, "--", sys.executable, "-c", script])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "steps=1.5 loss=3",
        "epoch 2 steps=2.25 other=9",
        "nosteps=100 steps=oops",
    ]
    summary = json.loads(rec.read_text().splitlines()[-1])
    assert summary["metrics"] == {"steps": 2.25}


def test_metric_needs_record_and_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["check", "--metric", "x", "--", "true"], capsys)
    assert code == ExitStatus.USAGE and "--metric needs --record" in err
    code, _, err = run_cli(
        ["check", "--pid", "4194305", "--duration", "1", "--record", "r", "--metric", "x"], capsys
    )
    assert code == ExitStatus.USAGE and "--metric only applies with a command" in err
