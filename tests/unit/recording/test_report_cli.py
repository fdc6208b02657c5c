"""`oversub report` and `--record` at the command line: every format, every bad input and
its documented exit code (2: not a recording; 3: unreadable), never a traceback."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from oversub.core.errors import ExitStatus
from tests.support.builders import oversubscribed_run, recording_lines
from tests.support.harness import run_cli


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


def test_off_a_terminal_the_text_report_is_the_same_whatever_the_environment_says(
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 39: in a terminal of 200 columns the text on stdout was 160 wide and the -o file
    # 80 (plotext capped each chart to the terminal it found: COLUMNS and LINES, else 80 x 24).
    from oversub.cli.report import FILE_WIDTH

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    code, plain, err = run_cli(["report", str(recording)], capsys)
    assert code == ExitStatus.OK, err
    frames = [line for line in plain.splitlines() if "┌" in line or "└" in line]
    assert len(frames) == 4 and {len(line) for line in frames} == {FILE_WIDTH}, frames
    for columns, lines in (("200", "50"), ("60", "10")):
        monkeypatch.setenv("COLUMNS", columns)
        monkeypatch.setenv("LINES", lines)
        code, out, err = run_cli(["report", str(recording)], capsys)
        assert code == ExitStatus.OK and out == plain, (columns, lines)
        target = tmp_path / f"{columns}.txt"
        code, _, err = run_cli(["report", str(recording), "-o", str(target)], capsys)
        assert code == ExitStatus.OK and target.read_text(encoding="utf-8") == plain, err


def test_on_a_terminal_the_charts_take_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl
    import struct
    import termios

    from oversub.cli.report import FILE_WIDTH, text_width

    monkeypatch.delenv("COLUMNS", raising=False)
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 123, 0, 0))
        with open(slave, "w", encoding="utf-8", closefd=False) as tty:
            assert text_width(tty) == 123
            monkeypatch.setenv("COLUMNS", "90")  # the user's say, on a terminal
            assert text_width(tty) == 90
            assert text_width(None) == FILE_WIDTH  # -o: a file, whatever COLUMNS says
    finally:
        os.close(slave)
        os.close(master)
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        assert text_width(devnull) == FILE_WIDTH


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


def _rows_by_label(chart: str) -> dict[str, str]:
    """Each labelled y row of a plotext chart: label -> the row's plot area."""
    rows = {}
    for line in chart.splitlines():
        label, sep, rest = line.partition("┤")
        if sep and label.strip():
            rows[label.strip()] = rest
    return rows


@pytest.mark.parametrize(("vcpus", "demand"), [(1, 3.9), (2, 6.65), (3, 2.5), (4, 17.0), (7, 7.2)])
def test_the_n_line_is_drawn_on_the_row_that_its_label_names(vcpus: int, demand: float) -> None:
    from oversub.recording.charts import line_chart

    x = [0.5 * i for i in range(1, 21)]
    top = max(demand, vcpus) * 1.05
    chart = line_chart(
        "demand",
        x,
        [("demand", [demand] * len(x)), ("N", [float(vcpus)] * len(x))],
        width=80,
        height=16,
        ymax=top,
        exact=[float(vcpus)],
    )
    rows = _rows_by_label(chart)
    assert rows[str(vcpus)].count("─") > 60, chart  # N's dashes fill the row labelled N
    assert all(float(label) >= 0 for label in rows)
    # Round ticks: every label is a multiple of the step between the first two, or N itself.
    values = sorted(float(label) for label in rows)
    step = values[-1] - values[-2]
    for v in values:
        assert v == vcpus or abs(v / step - round(v / step)) < 1e-9, (values, chart)


def test_the_legend_tells_the_series_apart_and_colour_is_only_for_a_terminal(
    recording: Path,
) -> None:
    from oversub.cli.record.reader import read_recording
    from oversub.recording.charts import charts_text
    from oversub.recording.replay import reassess

    rec = read_recording(recording)
    replay = reassess(rec, rec.header.thresholds)
    plain = charts_text(replay, 80)[0]
    legend = [re.split("[│┤]", line, maxsplit=1)[1].strip() for line in plain.splitlines()[2:4]]
    markers = [entry.split()[0] for entry in legend]
    assert [entry.split()[1] for entry in legend] == ["demand", "N"], plain
    assert markers[0] != markers[1], legend
    assert "\x1b[" not in plain
    coloured = charts_text(replay, 80, color=True)[0]
    assert "\x1b[" in coloured
    uncoloured = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    assert [line.rstrip() for line in uncoloured.splitlines()] == plain.splitlines()


def test_colour_follows_the_terminal_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    from oversub.cli.output import colour_for

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert colour_for(Tty())  # type: ignore[arg-type]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_for(Tty())  # type: ignore[arg-type]
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not colour_for(Tty())  # type: ignore[arg-type]
