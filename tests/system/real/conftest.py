"""Fixtures of the real-workload tests (their helpers are in `tests.system.real.workloads`)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.system.real.workloads import FIGURES, PROCS, VCPUS


@pytest.fixture
def figure(request: pytest.FixtureRequest, record_property: Any) -> Any:
    """figure(label, value): print a measured figure in the summary and the JUnit properties."""

    def record(label: str, value: float | str) -> None:
        record_property(label, value)
        FIGURES.append(f"{request.node.name}: {label} = {value}")

    return record


@pytest.fixture(scope="session", autouse=True)
def real_stack() -> None:
    """Fail fast and clearly when a library of the suite is missing (use `make test-real`)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, numpy, threadpoolctl, sklearn, distributed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        pytest.fail(
            "torch/numpy/threadpoolctl/scikit-learn/dask not importable; run `make test-real`:"
            f"\n{probe.stderr}"
        )
    if VCPUS < 2:
        pytest.skip("needs >= 2 vCPUs: on one, default pools are single-thread already")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show the measured throughput of every run, pass or fail."""
    if FIGURES:
        terminalreporter.section(f"measured figures (N = {VCPUS} vCPUs, M = {PROCS})")
        for line in FIGURES:
            terminalreporter.write_line(line)


REAL_TIMEOUT_S = 900
"""A real-workload test runs its job two or three times (default, recommended), each bounded
by RUN_GRACE_S: more than the suite's global timeout."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/system/real/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.timeout(REAL_TIMEOUT_S))
