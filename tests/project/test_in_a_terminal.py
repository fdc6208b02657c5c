"""The suite's output-width-sensitive tests, run as a person runs `make test`: in a terminal.

Issue 39: `make test` in a terminal of 200 columns failed (`report`'s text charts took the
terminal's width on stdout and not with `-o`), though it passed in CI, detached from any
terminal. A terminal reaches a test in ways a detached run never shows: pytest imports
GNU readline, which on a terminal puts the window's COLUMNS and LINES into the environment
that `-n auto`'s workers and every subprocess inherit, and libraries ask the terminal
themselves (plotext capped its charts to it). So these tests run here, in pytest's
`-n` mode as `make unit` runs them, inside a pseudo-terminal of 80 and of 200 columns.

The selection is the tests whose output has a width: the text report and its charts,
`diff`, the text renderers, the commands' tables, `check`'s progress line and `tune`'s
view; about 10 s each.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.support.harness import ROOT, run_in_terminal

WIDTH_SENSITIVE = [
    "tests/unit/recording/test_report_cli.py",
    "tests/unit/recording/test_diff.py",
    "tests/unit/render/test_render_text.py",
    "tests/unit/render/test_budget_text.py",
    "tests/unit/render/test_live_frame.py",
    "tests/unit/render/test_nodeview.py",
    "tests/unit/render/test_render_formats.py",
    "tests/unit/render/test_sparkline.py",
    "tests/unit/cli/test_cli.py",
    "tests/unit/cli/test_progress.py",
    "tests/unit/tuning/test_tuning.py",
]


def test_the_selection_exists() -> None:
    missing = [path for path in WIDTH_SENSITIVE if not (ROOT / path).is_file()]
    assert not missing, f"moved or renamed: update WIDTH_SENSITIVE: {missing}"


@pytest.mark.parametrize("columns", [80, 200])
def test_the_width_sensitive_tests_pass_in_a_terminal(columns: int) -> None:
    # A clean start: no variable of the pytest run this test is part of.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS", "LINES"))}
    env["TERM"] = "xterm-256color"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "no:cacheprovider"]
    status, out = run_in_terminal(
        [*argv, *WIDTH_SENSITIVE], columns=columns, rows=24, env=env, cwd=ROOT, timeout=240
    )
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    summary = [line for line in plain.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    assert status == 0 and summary and "failed" not in summary[-1], plain[-4000:]
