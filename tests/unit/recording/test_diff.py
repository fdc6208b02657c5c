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


def lines_with(threads: int, delay: float, **metrics: float) -> list[str]:
    """A recording's lines whose summary holds `metrics` (as `check --metric` records)."""
    lines = recording_lines(oversubscribed_run(4, threads=threads, delay=delay))
    if metrics:
        summary = json.loads(lines[-1])
        summary["metrics"] = metrics
        lines[-1] = json.dumps(summary)
    return lines


def replay(threads: int, delay: float, metric: float | None = None, **others: float) -> Replay:
    metrics = others if metric is None else {"steps": metric, **others}
    return reassess(parse(lines_with(threads, delay, **metrics)))


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


def test_without_metric_the_throughputs_both_runs_hold_are_shown_not_gated() -> None:
    """Two `check --metric` recordings compared without `--metric`: the figures both hold are
    shown (a figure only one holds is not: nothing to compare it with), none is judged, and
    a drop beyond the tolerance is said, with the flag that gates on it."""
    c = compare(replay(**OVER, metric=100, loss=2.0), replay(**OVER, metric=50, other=1.0))
    assert c.metric is None and c.metrics == ("steps",)
    assert c.worse == () and c.better == ()
    assert c.noted == ("steps 100 -> 50, 50% lower",)
    c = compare(replay(**OVER, metric=100, loss=2.0), replay(**OVER, metric=96, loss=9.0))
    assert c.metrics == ("steps", "loss") and c.noted == ()
    # Gated: the named one first and judged, the other shown beside it.
    c = compare(replay(**OVER, metric=100, loss=2.0), replay(**OVER, metric=50, loss=1.0), "loss")
    assert c.metrics == ("loss", "steps")
    assert c.worse == ("loss 2 -> 1 (more than 5% lower)",)
    assert c.noted == ("steps 100 -> 50, 50% lower",)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_diff_shows_the_recorded_throughput_without_metric(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = write(tmp_path / "before.ndjson", lines_with(**OVER, steps_per_s=1017.0))
    after = write(tmp_path / "after.ndjson", lines_with(**FIXED, steps_per_s=14530.7))
    code, out, err = run_cli(["diff", before, after, "--format", fmt], capsys)
    assert code == ExitStatus.OK, err
    if fmt == "json":
        doc = json.loads(out)
        assert doc["metric"] is None and doc["metrics"] == ["steps_per_s"]
        assert doc["before"]["metrics"] == {"steps_per_s": 1017.0}
        assert doc["after"]["metrics"] == {"steps_per_s": 14530.7}
    else:
        row = next(line for line in out.splitlines() if "steps_per_s" in line)
        assert "1017" in row and "14530.7" in row and "+1329%" in row, out
    # The other way round: 93 % lower, shown and said, and exit 1 for the verdict only.
    code, out, err = run_cli(["diff", after, before, "--format", fmt], capsys)
    assert code == ExitStatus.FOUND, err
    said = "steps_per_s 14530.7 -> 1017, 93% lower"
    if fmt == "json":
        assert json.loads(out)["noted"] == [said]
    else:
        said = f"(not gated: {said}; --metric NAME gates on a figure)"
        assert (said.replace(">", "&gt;") if fmt == "markdown" else said) in out, out


def test_a_recorded_throughput_name_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name read from the file reaches the terminal escaped (the file is untrusted)."""
    paths = []
    for i, value in enumerate((1.0, 2.0)):
        lines = lines_with(**OVER)
        summary = json.loads(lines[-1])
        summary["metrics"] = {"x\x1b[2Jy": value}
        lines[-1] = json.dumps(summary)
        paths.append(write(tmp_path / f"{i}.ndjson", lines))
    code, out, err = run_cli(["diff", *paths], capsys)
    assert code == ExitStatus.OK, err
    assert "\x1b" not in out and "x\\x1b[2Jy" in out, out


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_huge_finite_throughputs_give_true_lines_never_inf(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A CMD may print any finite figure: the change of 1 -> 1.7e308 was a 309-digit number
    # and "+inf%", that of -1.7e308 -> 1.7e308 "+inf (+inf%)".
    huge = write(tmp_path / "huge.ndjson", lines_with(**OVER, steps=1.7e308))
    one = write(tmp_path / "one.ndjson", lines_with(**OVER, steps=1.0))
    low = write(tmp_path / "low.ndjson", lines_with(**OVER, steps=-1.7e308))
    said = {
        (one, huge): "+1.7e+308 (more than 1000x)",
        (huge, one): "-1.7e+308 (less than 0.001x)",
        (low, huge): "+3.4e+308",
        (huge, low): "-3.4e+308",
    }
    for (before, after), change in said.items():
        code, out, err = run_cli(["diff", before, after, "--format", fmt], capsys)
        assert code == ExitStatus.OK, err
        assert "inf" not in out.lower() and "nan" not in out.lower(), out
        if fmt == "json":
            assert json.loads(out)["noted"] in (
                [],
                ["steps 1.7e+308 -> 1, 100% lower"],
                ["steps 1.7e+308 -> -1.7e+308, below zero, more than 100% lower"],
            )
            continue
        row = next(line for line in out.splitlines() if "steps" in line and "e+308" in line)
        assert row.rstrip(" |").endswith(change), out


def test_the_ratio_limit_is_tunes() -> None:
    from oversub.recording.diffview import RATIO_LIMIT
    from oversub.tuning.trials import RATIO_LIMIT as TUNE

    assert RATIO_LIMIT == TUNE


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
