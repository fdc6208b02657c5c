"""Fixtures shared by every test module (the helpers themselves are in `tests.support.harness`).

One global per-test timeout comes from pytest-timeout (`timeout` in pyproject.toml), with
the signal method: a test that hangs fails with its traceback, and its fixtures' teardown
still runs, so `spawn` reaps what the test started.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.harness import Spawner

TERMINAL_VARS = ("COLUMNS", "LINES")
"""The terminal's size as the environment may carry it. No shell exports them, but GNU
readline does when it starts on a terminal (pytest imports it), into the C environment that
`-n auto`'s workers and every subprocess inherit: a test's output width would follow the
window `make test` runs in. A test that is about width sets them itself (monkeypatch)."""

TEST_LOCALE = "C.UTF-8"
"""The locale every test runs in, whatever the shell's: in a Latin-1 locale a child's
stdout cannot carry "٣" or "😀" and the tests read its output wrongly. A test of another
encoding sets PYTHONIOENCODING itself (tests/system/test_output_hardening.py)."""


def pytest_configure(config: pytest.Config) -> None:
    """The same environment in every terminal and locale (issue 39), in the controller and
    in each worker, and so in every process a test starts:

    - no terminal size: removed from os.environ and from the C environment, which readline
      may have set behind os.environ's back;
    - the locale TEST_LOCALE (LC_ALL for children; LC_CTYPE here, which decides how
      `subprocess.run(text=True)` decodes a child's output). Where the system lacks it, the
      shell's locale stays."""
    import locale
    import os

    for var in TERMINAL_VARS:
        os.environ.pop(var, None)
        os.unsetenv(var)
    try:
        locale.setlocale(locale.LC_CTYPE, TEST_LOCALE)
    except locale.Error:
        return
    os.environ["LC_ALL"] = TEST_LOCALE
    os.environ.pop("LANGUAGE", None)


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    """Start processes that are killed and reaped at teardown, whatever happened."""
    spawner = Spawner()
    try:
        yield spawner
    finally:
        spawner.reap()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (`make unit`): one worker per vCPU this run may really use (affinity,
    cgroup quota, cpuset), as oversub counts them. pytest-xdist's own default counts the
    host's cores: in a container limited to 2 CPUs of 64 it would start 64 workers.
    Imported here, where only `-n auto` pays for it."""
    from oversub.probe.budget import read_budget

    return read_budget().vcpus
