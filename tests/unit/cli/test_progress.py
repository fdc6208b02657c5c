"""`check` says what it started and how it goes while it runs (issue 11 item 15)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from oversub.cli.check.progress import CheckProgress, shown_command
from oversub.cli.check.runners import CheckOptions, check_command
from oversub.run.session import SessionOptions
from tests.support.builders import make_assessment, make_budget, make_interval, make_totals


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def feed(progress: CheckProgress, seconds: int, demand: float = 4.0) -> None:
    iv = make_interval(totals=make_totals(demand=demand))
    for second in range(1, seconds + 1):
        progress.interval(iv, make_assessment(), second, float(second))


def test_start_line_names_the_command_budget_warmup_and_interval() -> None:
    err = io.StringIO()
    progress = CheckProgress(err, make_budget(vcpus=2, limited_by="affinity", affinity=(0, 1)))
    progress.start(
        "started pid 42 (python train.py)", interval=1.0, warmup=1.0, until="until it exits"
    )
    assert err.getvalue() == (
        "oversub check: started pid 42 (python train.py); N = 2 usable vCPUs (limited by "
        "affinity: 2 CPUs); warm-up 1 s, then a sample every 1 s until it exits\n"
    )


def test_off_a_terminal_a_line_every_period() -> None:
    err = io.StringIO()
    progress = CheckProgress(err, make_budget(vcpus=2), every=10.0)
    feed(progress, 25)
    lines = err.getvalue().splitlines()
    assert lines == [
        "oversub check: 10 s measured, 10 samples: demand 4.00 runnable threads on N = 2 "
        "over the last 10 s; last interval oversubscribed",
        "oversub check: 20 s measured, 20 samples: demand 4.00 runnable threads on N = 2 "
        "over the last 10 s; last interval oversubscribed",
    ]
    progress.close()
    assert "\r" not in err.getvalue() and "\x1b" not in err.getvalue()


def test_on_a_terminal_one_status_line_on_the_bottom_row_then_erased(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bottom row (24 of a 24-row terminal) leaves the scrolling region once; each
    redraw saves the cursor, draws there and restores it, so CMD's output never meets it."""
    monkeypatch.setenv("TERM", "xterm")
    err = Terminal()
    progress = CheckProgress(err, make_budget(vcpus=2))
    feed(progress, 3)
    text = err.getvalue()
    assert "\n" not in text and "\r" not in text  # CMD's line is never broken nor erased
    reserve = "\x1bD\x1b7\x1b[1;23r\x1b8\x1b[1A"
    assert text.startswith(reserve) and text.count(reserve) == 1
    status = "oversub check: 3 s · 3 samples · demand 4.00 on N = 2 · now oversubscribed"
    assert text.count("\x1b7\x1b[24;1H\x1b[2K") == 3
    assert text.endswith(f"\x1b7\x1b[24;1H\x1b[2K{status}\x1b8")
    progress.close()
    assert err.getvalue().endswith("\x1b7\x1b[r\x1b8\x1b7\x1b[24;1H\x1b[2K\x1b8")
    progress.close()  # nothing more to give back
    assert err.getvalue().count("\x1b[r") == 1


def test_a_terminal_that_changed_size_gets_its_new_bottom_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    import oversub.cli.check.progress as progress_module

    monkeypatch.setenv("TERM", "xterm")
    sizes = iter(
        [os.terminal_size((80, 24)), os.terminal_size((80, 40)), os.terminal_size((80, 2))]
    )
    monkeypatch.setattr(progress_module, "_size", lambda _stream: next(sizes))
    err = Terminal()
    progress = CheckProgress(err, make_budget(vcpus=2))
    feed(progress, 2)
    text = err.getvalue()
    # The old row 24 is cleared and given back, then row 40 reserved.
    assert "\x1b7\x1b[r\x1b8\x1b7\x1b[24;1H\x1b[2K\x1b8\x1bD\x1b7\x1b[1;39r\x1b8" in text
    assert text.endswith("\x1b8") and "\x1b[40;1H" in text
    feed(progress, 1)  # 2 rows: too small, the row is given back and nothing drawn
    assert err.getvalue().endswith("\x1b7\x1b[r\x1b8\x1b7\x1b[40;1H\x1b[2K\x1b8")


def test_a_dumb_terminal_gets_lines_not_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    err = Terminal()
    feed(CheckProgress(err, make_budget(vcpus=2), every=2.0), 3)
    assert "\x1b" not in err.getvalue() and err.getvalue().count("\n") == 1


def test_shown_command_is_one_bounded_line() -> None:
    assert shown_command(["python", "train.py", "--lr", "0.1"]) == "python train.py --lr 0.1"
    assert shown_command(["echo", "a\nb\x1b[31m"]) == "echo 'a\\nb\\x1b[31m'"
    assert len(shown_command(["x" * 500])) == 60


@pytest.mark.integration
def test_check_prints_a_start_line_and_progress_while_it_runs(tmp_path: Path) -> None:
    err = io.StringIO()
    opts = CheckOptions(
        session=SessionOptions(interval=0.2, warmup=0.0),
        progress_every=0.5,
    )
    budget = make_budget(vcpus=1, affinity=(0,))._replace(pid=1)
    status = check_command(
        [sys.executable, "-c", "import time; time.sleep(2.5)"], budget, opts, err=err
    )
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("oversub check: started pid ")
    assert "a sample every 0.2 s until it exits" in lines[0]
    progress = [line for line in lines if " s measured, " in line]
    assert len(progress) >= 2, lines
    report = lines.index(next(line for line in lines if line.startswith("oversub: ")))
    assert all(lines.index(line) < report for line in progress)
    assert int(status) in (0, 1)  # an idle sleeper: judged, whatever its verdict


@pytest.mark.integration
def test_check_pid_without_duration_says_it_runs_until_the_target_exits() -> None:
    import subprocess

    from oversub.cli.check.runners import check_pid
    from oversub.probe.budget import read_budget

    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    try:
        err = io.StringIO()
        opts = CheckOptions(session=SessionOptions(interval=0.2))
        check_pid(target.pid, read_budget(target.pid), opts, err=err)
    finally:
        target.kill()
        target.wait()
    first = err.getvalue().splitlines()[0]
    assert first.startswith(f"oversub check: attached to pid {target.pid}; N = ")
    assert first.endswith("a sample every 0.2 s until the target exits (no --duration given)")
