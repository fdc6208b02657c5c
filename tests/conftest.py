"""Fixtures shared by every test module (the helpers themselves are in `tests.support.harness`).

One global per-test timeout comes from pytest-timeout (`timeout` in pyproject.toml), with
the signal method: a test that hangs fails with its traceback, and its fixtures' teardown
still runs, so `spawn` reaps what the test started.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.harness import Spawner


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
