"""`check` reporting without running anything: order, wording, file errors, odd commands."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
from pathlib import Path

import pytest

from oversub.analysis.plans import synthetic_budget
from oversub.analysis.summary import unmeasured_summary
from oversub.cli.check.runners import CheckOptions, prepare_reports, report
from oversub.cli.writtenfiles import STEP_SUMMARY_MAX
from oversub.core.errors import ExitStatus
from oversub.core.names import Verdict
from oversub.core.results import Assessment, CheckOutcome
from oversub.core.rules import RUNTIME_RULES as RULES
from oversub.run import stopsignals
from oversub.run.checking import report_command

NOTHING = Assessment(Verdict.OK, ())


def outcome(**kwargs: object) -> CheckOutcome:
    summary = unmeasured_summary(synthetic_budget(4), 42, note="test", assessment=NOTHING)
    return CheckOutcome(summary=summary, **kwargs)  # type: ignore[arg-type]


def test_unwritable_report_is_exit_3_and_the_closing_line_says_so(tmp_path: Path) -> None:
    # The closing line said "pass: ..., exit 0", then an error line, and the exit was 3:
    # it now comes after every file was written and states the status returned.
    err = io.StringIO()
    opts = CheckOptions(json_path=tmp_path / "gone" / "r.json")
    status = report(outcome(static=True), opts, err=err, environ={})
    assert status is ExitStatus.UNOBSERVABLE
    *_, error, last = err.getvalue().splitlines()
    assert error.startswith("oversub check: error: cannot write the --json report"), error
    assert "r.json" in error
    assert last == (
        "oversub check: error: verdict ok (--fail-on costly), "
        "but a file could not be written (above), exit 3"
    )
    assert "oversub check: pass" not in err.getvalue()


def test_a_failed_report_file_rewrites_the_others_with_exit_3(tmp_path: Path) -> None:
    # --json written with "exit_status": 0, then --markdown failed and the process exited 3:
    # every file is staged first, and the others are written again with the status returned.
    err = io.StringIO()
    opts = CheckOptions(json_path=tmp_path / "r.json", markdown_path=tmp_path / "gone" / "r.md")
    status = report(outcome(static=True), opts, err=err, environ={})
    assert status is ExitStatus.UNOBSERVABLE
    assert json.loads((tmp_path / "r.json").read_text())["exit_status"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left
    assert err.getvalue().splitlines()[-1].endswith("exit 3")


def test_recording_failure_decides_exit_3_in_the_closing_line(tmp_path: Path) -> None:
    err = io.StringIO()
    failure = "cannot write --record run.ndjson: No space left on device"
    status = report(
        outcome(static=True), CheckOptions(), err=err, environ={}, finish=lambda _: failure
    )
    assert status is ExitStatus.UNOBSERVABLE
    *_, error, last = err.getvalue().splitlines()
    assert error == f"oversub check: error: {failure}"
    assert last.startswith("oversub check: error: verdict ok") and last.endswith("exit 3")


def test_failing_step_summary_is_a_warning(tmp_path: Path) -> None:
    err = io.StringIO()
    environ = {"GITHUB_STEP_SUMMARY": str(tmp_path / "gone" / "step.md")}
    status = report(outcome(static=True), CheckOptions(), err=err, environ=environ)
    assert status is ExitStatus.OK
    warnings = [x for x in err.getvalue().splitlines() if "warning" in x]
    assert len(warnings) == 1 and "GITHUB_STEP_SUMMARY" in warnings[0]


def test_command_that_is_not_utf8_still_gets_reports(tmp_path: Path) -> None:
    argv = ["prog", "caf\udce9"]  # b"caf\xe9" (Latin-1) as os.fsdecode gives it
    opts = CheckOptions(json_path=tmp_path / "r.json", markdown_path=tmp_path / "r.md")
    command = report_command(argv)
    assert command == ("prog", "caf\ufffd")
    report(outcome(command=command, command_status=0), opts, err=io.StringIO(), environ={})
    assert json.loads((tmp_path / "r.json").read_text("utf-8"))["command"] == list(command)
    assert "caf\ufffd" in (tmp_path / "r.md").read_text("utf-8")


@pytest.mark.parametrize(
    ("kwargs", "last_line"),
    [
        (
            {"command": ["x"], "command_status": 7},
            "oversub check: error: not judged: the command failed with exit status 7, exit 3",
        ),
        (
            {"command": ["x"], "command_status": -9},
            "oversub check: error: not judged: the command was killed by signal 9, exit 3",
        ),
        (
            {"command": ["x"], "command_status": 0},
            "oversub check: error: not judged: nothing was measured: the command exited",
        ),
        ({}, "oversub check: error: not judged: nothing was measured: the target exited"),
        (
            {"interrupted": True},
            "oversub check: interrupted, not judged: interrupted before anything was measured",
        ),
    ],
)
def test_last_line_says_why_there_is_no_verdict(kwargs: dict[str, object], last_line: str) -> None:
    err = io.StringIO()
    report(outcome(**kwargs), CheckOptions(), err=err, environ={})
    assert err.getvalue().splitlines()[-1].startswith(last_line), err.getvalue()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"command": ["x"], "command_status": 7},
        {"command": ["x"], "command_status": 0},
        {},
        {"interrupted": True},
    ],
)
def test_a_run_not_judged_has_no_verdict_in_any_report(
    kwargs: dict[str, object], tmp_path: Path
) -> None:
    """Issue 11 item 2: no "ok" anywhere for a run that was not judged."""
    err = io.StringIO()
    opts = CheckOptions(
        json_path=tmp_path / "r.json",
        junit_path=tmp_path / "r.xml",
        markdown_path=tmp_path / "r.md",
    )
    environ = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "step.md")}
    report(outcome(**kwargs), opts, err=err, environ=environ)
    text = err.getvalue()
    assert text.startswith("oversub: not judged ("), text
    assert " ok " not in text and "(the tree's runnable threads fit" not in text
    assert "::error title=oversub::not judged: " in text
    doc = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert doc["verdict"] is None and doc["judged"] is False
    assert doc["not_judged_reason"] and doc["not_judged_reason"] in text
    markdown = (tmp_path / "r.md").read_text("utf-8")
    assert markdown.startswith("## oversub: NOT JUDGED"), markdown
    assert "passed" not in markdown and "**Verdict" not in markdown
    junit = (tmp_path / "r.xml").read_text("utf-8")
    assert 'name="verdict" value="not judged"' in junit
    assert f'skipped="{len(RULES)}"' in junit and "<failure" not in junit


def test_a_failed_command_keeps_what_was_measured_but_fails_nothing(tmp_path: Path) -> None:

    from tests.support.builders import make_finding, make_summary

    err = io.StringIO()
    opts = CheckOptions(junit_path=tmp_path / "r.xml")
    summary = make_summary()._replace(findings=(make_finding(),))
    status = report(
        CheckOutcome(summary=summary, command=("x",), command_status=4),
        opts,
        err=err,
        environ={"GITHUB_ACTIONS": "true"},
    )
    assert status is ExitStatus.UNOBSERVABLE
    text = err.getvalue()
    assert text.startswith("oversub: not judged (the command failed with exit status 4)")
    assert "[critical] oversubscribed-pools" in text  # measured before it failed
    assert "::error title=oversub oversubscribed-pools" not in text
    assert "::warning title=oversub oversubscribed-pools" in text
    junit = (tmp_path / "r.xml").read_text("utf-8")
    assert "<failure" not in junit and "measured, but the run is not judged" in junit


# ------------------------------------------------------- signals, atomic files, job summary


def test_stop_signal_while_reports_are_written_finishes_them_then_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGTERM (a CI timeout) between two report files killed oversub by the signal (143),
    # leaving the second report unwritten.
    from oversub.cli import writtenfiles

    written: list[str] = []
    real = writtenfiles.commit

    def write_then_signal(flag: str, staged: writtenfiles.Replacement) -> None:
        real(flag, staged)
        written.append(flag)
        if flag == "--json":
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(writtenfiles, "commit", write_then_signal)
    opts = CheckOptions(
        json_path=tmp_path / "r.json",
        junit_path=tmp_path / "r.xml",
        markdown_path=tmp_path / "r.md",
    )
    err = io.StringIO()
    with stopsignals.interrupt():  # as in the CLI: a handler that would interrupt
        status = report(outcome(static=True), opts, err=err, environ={})
    assert status is ExitStatus.INTERRUPTED
    assert written == ["--json", "--junit", "--markdown"]
    assert json.loads((tmp_path / "r.json").read_text())["exit_status"] == 0
    assert err.getvalue().splitlines()[-1] == "oversub check: interrupted, exit 130"


def test_a_stop_signal_while_the_recording_is_finished_is_one_interrupted_line() -> None:
    def finish_then_signal(_decision: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    err = io.StringIO()
    with stopsignals.interrupt():
        status = report(outcome(static=True), CheckOptions(), err=err, finish=finish_then_signal)
    assert status is ExitStatus.INTERRUPTED
    lines = err.getvalue().splitlines()
    assert lines[-2].startswith("oversub check: pass: verdict ok")
    assert lines[-1] == "oversub check: interrupted, exit 130"
    assert err.getvalue().count("interrupted") == 1


def test_a_failed_write_keeps_the_previous_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk used to leave an empty file where the last good report was.
    report_path = tmp_path / "r.json"
    report_path.write_text("previous report\n")
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        if fd > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    err = io.StringIO()
    status = report(outcome(static=True), CheckOptions(json_path=report_path), err=err)
    monkeypatch.undo()
    assert status is ExitStatus.UNOBSERVABLE
    assert "No space left on device" in err.getvalue()
    assert report_path.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary file left


def test_report_through_a_symlink_replaces_the_file_it_names(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    opts, _ = prepare_reports(CheckOptions(json_path=link), io.StringIO())
    report(outcome(static=True), opts, err=io.StringIO(), environ={})
    assert link.is_symlink()
    assert json.loads(target.read_text())["exit_status"] == 0
    assert target.stat().st_mode & 0o777 == 0o640


def test_step_summary_that_is_a_fifo_is_skipped_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # even with a reader, never written
    try:
        err = io.StringIO()
        environ = {"GITHUB_STEP_SUMMARY": str(fifo)}
        assert report(outcome(static=True), CheckOptions(), err=err, environ=environ) == 0
        try:
            data = os.read(reader, 1)
        except BlockingIOError:
            data = b""
        assert data == b""  # nothing was written to it
    finally:
        os.close(reader)
    (warning,) = [x for x in err.getvalue().splitlines() if "warning" in x]
    assert "not a regular file" in warning


def test_step_summary_stays_under_githubs_limit(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_bytes(b"x" * (STEP_SUMMARY_MAX - 100))  # earlier steps filled it
    err = io.StringIO()
    environ = {"GITHUB_STEP_SUMMARY": str(summary)}
    assert report(outcome(static=True), CheckOptions(), err=err, environ=environ) == 0
    assert summary.stat().st_size == STEP_SUMMARY_MAX - 100  # not appended: it would not fit
    (warning,) = [x for x in err.getvalue().splitlines() if "warning" in x]
    assert "1 MiB" in warning
