"""Inputs oversub reads (docs/security.md, "Inputs oversub reads"): a recording or report is
read line by line and refused at its first bad line, never loaded whole; a lone surrogate
escape is bad input in every reader; every field within the documented bounds replays and
renders in every format, and the reader's fuzzing finds no other exception than its own."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oversub.core.errors import NotARecording
from oversub.recording import ReportFormat, render_report
from oversub.recording.replay import parse, reassess
from tests.support.builders import oversubscribed_run, recording_lines
from tests.support.harness import OVERSUB

MEASURED = """
import sys
from oversub.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = int(exc.code or 0)  # an IntEnum: str() of it is its name on Python 3.10
with open("/proc/self/io") as f:
    io = dict(line.split(": ") for line in f.read().splitlines())
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child that subprocess
# started with vfork from a big pytest worker would report the worker's peak.
with open("/proc/self/status") as f:
    peak_kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
print(code, int(io["rchar"]), peak_kb, file=sys.stderr)
"""
"""`oversub ARGV` in-process, then its exit code, the bytes it read and its peak RSS."""


def _measured(argv: list[str], tmp_path: Path) -> tuple[int, int, int, str]:
    script = tmp_path / "measured.py"
    script.write_text(MEASURED)
    run = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=120
    )
    *lines, figures = run.stderr.splitlines()
    code, read, peak_kb = map(int, figures.split())
    return code, read, peak_kb, "\n".join(lines)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "run.ndjson"
    path.write_text("\n".join(recording_lines(oversubscribed_run(3))) + "\n")
    return path


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ------------------------------------------------------------------- 11: streamed, bounded

JUNK = 20_000_000


@pytest.mark.parametrize("shape", ["short lines", "one long line"])
@pytest.mark.parametrize("command", ["report", "diff"])
def test_a_file_of_junk_is_refused_at_line_1_without_reading_it_all(
    tmp_path: Path, shape: str, command: str
) -> None:
    # `report` read the whole file into a list of lines before parsing line 1: 20 MB of
    # junk cost ~1.3 GB RSS (a few hundred MB was an OOM kill), and one 20 MB line with no
    # newline was taken for a cut last line: "empty file".
    junk = tmp_path / "junk"
    junk.write_bytes(b"junk\n" * (JUNK // 5) if shape == "short lines" else b"x" * JUNK)
    argv = ["report", str(junk)] if command == "report" else ["diff", str(junk), str(junk)]
    code, read, peak_kb, err = _measured(argv, tmp_path)
    assert code == 2, err
    assert err == f"oversub: error: {junk}: line 1: not JSON" + err.split("line 1: not JSON")[1]
    assert read < JUNK // 2, read  # imports read ~2.5 MB; the old reader read all 20 MB
    assert peak_kb < 200_000, peak_kb  # ~18 MB measured; the old reader ~520 MB


def test_a_report_for_merge_that_is_not_an_object_is_refused_at_once(tmp_path: Path) -> None:
    junk = tmp_path / "node.json"
    junk.write_bytes(b"x" * JUNK)
    code, read, _peak, err = _measured(["merge", str(junk)], tmp_path)
    assert code == 2, err
    assert err == f"oversub: error: {junk}: not JSON (a report is an object, {{...}})"
    assert read < JUNK // 2, read


def test_a_bad_line_far_in_is_named_and_the_good_ones_before_it_are_not_kept(
    tmp_path: Path, recording: Path
) -> None:
    lines = recording.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b"".join(lines[:2]) + b"\xff\xfe\n" + b"".join(lines[2:]))
    run = subprocess.run([*OVERSUB, "report", str(bad)], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr == f"oversub: error: {bad}: line 3: not UTF-8 text (invalid start byte)\n"


def test_a_cut_last_line_is_still_left_out(tmp_path: Path, recording: Path) -> None:
    data = recording.read_bytes()
    cut = tmp_path / "cut.ndjson"
    cut.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 40])  # the summary, cut
    run = subprocess.run(
        [*OVERSUB, "report", str(cut), "--format", "json"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["recording"]["cut"] is True and doc["recording"]["complete"] is False


# --------------------------------------------------------------- 12: lone surrogate escapes

FORMATS = [f.value for f in ReportFormat]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_lone_surrogate_in_a_recording_is_bad_input_in_every_format(
    tmp_path: Path, recording: Path, fmt: str
) -> None:
    # "\ud800" is valid JSON; `report --format json` died with "internal error:
    # UnicodeEncodeError". A non-scalar code point is refused as bad input, naming the line.
    records = _lines(recording)
    records[1]["p"][0]["d"]["name"] = "\ud800worker"
    bad = _write(tmp_path / "bad.ndjson", records)
    assert "\\ud800" in bad.read_text()  # escaped by json.dumps: the file is valid JSON
    run = subprocess.run(
        [*OVERSUB, "report", str(bad), "--format", fmt], capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr == (
        f"oversub: error: {bad}: line 2: a string holds a lone surrogate escape "
        "(\\ud800-\\udfff): not Unicode text\n"
    )


def test_a_surrogate_pair_is_one_character_and_is_kept(tmp_path: Path, recording: Path) -> None:
    records = _lines(recording)
    records[1]["p"][0]["d"]["name"] = "\U0001f600worker"  # written as \ud83d\ude00
    good = _write(tmp_path / "good.ndjson", records)
    assert "\\ud83d\\ude00" in good.read_text()
    run = subprocess.run(
        [*OVERSUB, "report", str(good), "--format", "json"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "\U0001f600worker" in json.dumps(json.loads(run.stdout), ensure_ascii=False)


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "junit"])
def test_a_lone_surrogate_in_a_node_report_is_bad_input_for_merge(tmp_path: Path, fmt: str) -> None:
    report = tmp_path / "node.json"
    run = subprocess.run(
        [*OVERSUB, "check", "-M", "1", "-T", "1", "--cpus", "2", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(report.read_text())
    doc["node"] = "node\udfff"
    report.write_text(json.dumps(doc))
    run = subprocess.run(
        [*OVERSUB, "merge", str(report), "--format", fmt], capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr == (
        f"oversub: error: {report}: not a report: a string holds a lone surrogate escape "
        "(\\ud800-\\udfff): not Unicode text\n"
    )


# -------------------------------------------------- 13: fields within bounds, and the fuzzing


def _numa(records: list[dict[str, Any]], key: str) -> None:
    records[0]["budget"]["numa"] = {key: [0, 1]}


def _huge(records: list[dict[str, Any]], _key: str) -> None:
    for r in records[1:-1]:
        r["totals"]["cpu_s"] = r["totals"]["delay_s"] = 1e308
        for p in r["p"]:
            p["cpu_s"] = p["delay_s"] = 1e308


@pytest.mark.parametrize(
    ("change", "key", "line", "problem"),
    [
        (_numa, "\u00b2", 1, "numa node '\u00b2' is not a number of at most 6 digits"),
        (_numa, "\u0663", 1, "numa node '\u0663' is not a number of at most 6 digits"),
        (_numa, "7" * 5000, 1, f"numa node '{'7' * 20}' is not a number of at most 6 digits"),
        (_huge, "", 2, "cpu_s is not a number in [0, "),
    ],
    ids=["superscript-two", "arabic-three", "5000-digits", "1e308"],
)
@pytest.mark.parametrize("command", ["report", "diff"])
def test_out_of_bound_fields_are_bad_input_naming_the_line(
    tmp_path: Path,
    recording: Path,
    change: Any,
    key: str,
    line: int,
    problem: str,
    command: str,
) -> None:
    # A numa key "²" (isdigit() true, int() refuses) or of 5,000 digits, and cpu_s = delay_s
    # = 1e308 (NaN in the text charts), were "internal error", exit 3.
    records = _lines(recording)
    change(records, key)
    bad = _write(tmp_path / "bad.ndjson", records)
    argv = ["report", str(bad)] if command == "report" else ["diff", str(recording), str(bad)]
    run = subprocess.run([*OVERSUB, *argv], capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"oversub: error: {bad}: line {line}: {problem}"), run.stderr


def test_a_numa_key_of_ascii_digits_is_read(tmp_path: Path, recording: Path) -> None:
    records = _lines(recording)
    _numa(records, "0")
    good = _write(tmp_path / "good.ndjson", records)
    run = subprocess.run([*OVERSUB, "report", str(good)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.sampled_from([0, 1, -1, 2**63, 2**64, 10**400, 5e-324, 1e15, 1e16, 1e308, -1e308])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=8)
    | st.sampled_from(["\ud800", "²", "7" * 5000, "interval", "header", "summary", "0"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a decoded record (keys of objects, indexes of lists)."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


def _base() -> list[dict[str, Any]]:
    records = [json.loads(x) for x in recording_lines(oversubscribed_run(3))]
    records[0]["budget"]["numa"] = {"0": [0, 1]}  # a key to fuzz
    return records


BASE = _base()
KEYS = ["\u00b2", "\ud800", "7" * 5000, "0", "type", "cpu_s", "x"]


NUMBERS = st.sampled_from([-1, 2**63, 2**64, 10**400, 5e-324, 1e15, 1e16, 1e300, 1e308])
EXTREMES: dict[type, st.SearchStrategy[Any]] = {
    int: NUMBERS,
    float: NUMBERS,
    str: st.sampled_from(KEYS) | st.text(st.characters(codec=None), max_size=4),
}


def _at(record: Any, where: tuple[Any, ...]) -> Any:
    for step in where:
        record = record[step]
    return record


@settings(
    max_examples=1000,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_fuzzed_record_fields_raise_only_the_readers_error(data: st.DataObject) -> None:
    # Each example changes 1-3 places of a valid recording: a value replaced, a key added or
    # renamed, or one value set in the same place of every interval (1e308 in all of them).
    records = json.loads(json.dumps(BASE))
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(records) - 1))
        where = data.draw(st.sampled_from(_paths(records[index])))
        target = _at(records[index], where)
        # Mostly a value of the same kind, at its extremes; sometimes any JSON value.
        alike = EXTREMES.get(type(target), JSON_VALUES)
        value = data.draw(st.one_of(alike, alike, JSON_VALUES))
        how = data.draw(st.sampled_from(["replace", "key", "everywhere"]))
        if how == "key" and isinstance(target, dict) and target:
            old = data.draw(st.sampled_from(sorted(target)))
            target[data.draw(st.sampled_from(KEYS))] = target.pop(old)
        elif not where:
            records[index] = value
        elif how == "everywhere":
            for record in records:
                with contextlib.suppress(LookupError, TypeError):
                    _at(record, where[:-1])[where[-1]] = value
        else:
            _at(records[index], where[:-1])[where[-1]] = value
    lines = [json.dumps(r) for r in records]
    try:
        replay = reassess(parse(lines))
    except NotARecording:
        return
    for fmt in ReportFormat:
        text = render_report(replay, fmt, width=100)
        text.encode("utf-8")  # what the output streams will do
        if fmt is ReportFormat.JSON:
            json.loads(text, parse_constant=_no_constant)  # no NaN or Infinity: finite sums


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} in the JSON report")
