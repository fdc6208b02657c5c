"""`oversub report` and `--record` at the command line: every format, every bad input and
its documented exit code (2: not a recording; 3: unreadable), never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from oversub.errors import ExitStatus
from tests.harness import run_cli
from tests.samples import oversubscribed_run, recording_lines


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "run.ndjson"
    path.write_text("\n".join(recording_lines(oversubscribed_run(6))) + "\n", encoding="utf-8")
    return path


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oversub: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "html"])
def test_every_format_renders_and_o_writes_the_same(
    fmt: str, recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["report", str(recording), "--format", fmt], capsys)
    assert code == ExitStatus.OK, err
    assert "oversubscribed" in out
    target = tmp_path / f"out.{fmt}"
    code, written, err = run_cli(
        ["report", str(recording), "--format", fmt, "-o", str(target)], capsys
    )
    assert code == ExitStatus.OK and written == "", err
    assert target.read_text(encoding="utf-8") == out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".oversub-")] == []


def test_text_has_both_charts_and_the_comparison(
    recording: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["report", str(recording), "--active-cpu", "0.9"], capsys)
    assert code == 0
    assert "demand (runnable threads) against N" in out and "delay ratio (share" in out
    assert "active-cpu 0.9 (recorded 0.2)" in out
    assert "\x1b[" not in out  # no colour codes off a terminal


def test_a_cut_last_line_is_left_out(recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = recording.read_text().splitlines()[:-1]  # no summary: a killed run
    recording.write_text("\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2])
    code, out, err = run_cli(["report", str(recording), "--format", "json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["recording"]["cut"] is True and doc["recording"]["complete"] is False
    assert doc["recording"]["intervals"] == 6 and doc["recorded"] is None


@pytest.mark.parametrize(
    ("content", "status", "says"),
    [
        (b"", ExitStatus.USAGE, "empty file"),
        (b"not json\n", ExitStatus.USAGE, "line 1: not JSON"),
        (
            b'{"type":"header","format":"oversub-recording","version":9}\n',
            ExitStatus.USAGE,
            "format version 9",
        ),
        (b"\xff\xfe\n", ExitStatus.USAGE, "not UTF-8"),
        (b'{"a": 1}\n' * 3, ExitStatus.USAGE, "not an oversub recording"),
    ],
)
def test_what_is_not_a_recording_is_exit_2(
    content: bytes,
    status: ExitStatus,
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "x.ndjson"
    path.write_bytes(content)
    code, out, err = run_cli(["report", str(path)], capsys)
    assert code == status and out == ""
    assert says in one_error_line(err)


def test_unreadable_files_are_exit_3_and_odd_ones_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(["report", str(tmp_path / "missing.ndjson")], capsys)
    assert code == ExitStatus.UNOBSERVABLE and "No such file" in one_error_line(err)
    code, _, err = run_cli(["report", str(tmp_path)], capsys)
    assert code == ExitStatus.USAGE and "not a regular file" in one_error_line(err)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # must not hang
    code, _, err = run_cli(["report", str(fifo)], capsys)
    assert code == ExitStatus.USAGE and "not a regular file" in one_error_line(err)
    locked = tmp_path / "locked.ndjson"
    locked.write_text("{}\n")
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads it anyway
        code, _, err = run_cli(["report", str(locked)], capsys)
        assert code == ExitStatus.UNOBSERVABLE and "Permission denied" in one_error_line(err)


def test_a_bad_output_path_is_refused_before_reading(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        ["report", str(recording), "-o", str(tmp_path / "no" / "r.html")], capsys
    )
    assert code == ExitStatus.USAGE and "does not exist" in one_error_line(err)


def test_a_record_path_that_cannot_work_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = str(tmp_path / "no" / "r.ndjson")
    code, _, err = run_cli(["watch", str(os.getpid()), "--once", "--record", bad], capsys)
    assert code == ExitStatus.USAGE and "--record" in one_error_line(err)
    code, _, err = run_cli(["check", "--procs", "2", "--threads", "1", "--record", "r"], capsys)
    assert code == ExitStatus.USAGE and "static preflight" in one_error_line(err)
    code, _, err = run_cli(["check", "--record", bad, "--", "true"], capsys)
    assert code == ExitStatus.USAGE and "--record" in one_error_line(err)
