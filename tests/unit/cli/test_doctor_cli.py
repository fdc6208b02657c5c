"""`oversub doctor`'s flags in-process: each bad value is one error line and exit 2 before
any child starts; `--fail` turns an oversubscribing row into exit 1; the interpreter it
checks by default."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from oversub.analysis.selfsizing import row
from oversub.cli import doctor as doctor_cli
from oversub.core.checkups import (
    CHECKUPS_BY_KEY,
    Confined,
    DoctorReport,
    Measurement,
    RunKind,
    RunSpec,
    SeenBudget,
    Status,
)
from oversub.run import doctoring
from tests.support.harness import run_cli as run


def _never(*args: Any, **kwargs: Any) -> DoctorReport:
    raise AssertionError("doctor ran despite a bad flag")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--python", ""], "--python: an empty path names no interpreter"),
        (["--python", "oversub-no-such-python"], "not found on PATH"),
        (["--python", "/nonexistent/python3"], "no such file"),
        (["--cpus", "0"], "--cpus"),
        (["--cpus", "nan"], "--cpus"),
        (["--cpus", str((os.cpu_count() or 1) + 1)], "CPUs online"),
        (["--cpuset", "abc"], "--cpuset 'abc'"),
        (["--cpuset", ""], "an empty list leaves no CPU"),
        (["--cpuset", "65535"], "not in the CPUs oversub may use"),
        (["--procs", "0"], "--procs"),
        (["--runtime", "tensorflow"], "--runtime"),
        (["--timeout", "-1"], "--timeout"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(doctoring, "run_doctor", _never)
    code, out, err = run(["doctor", *argv], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("oversub: error: ") and message in lines[0]


def test_a_file_that_is_not_executable_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctoring, "run_doctor", _never)
    plain = tmp_path / "python"
    plain.write_text("")
    plain.chmod(0o644)
    code, _, err = run(["doctor", "--python", str(plain)], capsys)
    assert code == 2 and "not executable" in err


def _report(oversubscribes: bool) -> DoctorReport:
    budget = SeenBudget(2, 2, None, 2)
    width_busy = 2 if oversubscribes else 1
    measured = Measurement(RunKind.HOST, Status.MEASURED, budget, {"openblas": 1}, 1, width_busy)
    r = row(CHECKUPS_BY_KEY["numpy"], "2.4", [measured], RunKind.HOST, vcpus=2, procs=2, env={})
    host = Confined(RunSpec(RunKind.HOST, None, None), True, None, None, None)
    return DoctorReport(sys.executable, "3.11", sys.prefix, (host,), 2, 2, 1, (r,), {}, ())


@pytest.mark.parametrize(
    ("oversubscribes", "fail", "code"),
    [(True, True, 1), (True, False, 0), (False, True, 0)],
)
def test_fail_exits_1_only_when_a_runtime_oversubscribes(
    oversubscribes: bool,
    fail: bool,
    code: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got: dict[str, Any] = {}

    def fake(python: str, checkups: Any, specs: Any, **kwargs: Any) -> DoctorReport:
        got.update(python=python, specs=specs, **kwargs)
        return _report(oversubscribes)

    monkeypatch.setattr(doctoring, "run_doctor", fake)
    argv = ["doctor", "--python", sys.executable, *(["--fail"] if fail else [])]
    status, out, _ = run(argv, capsys)
    assert status == code
    assert out.startswith("oversub doctor: Python 3.11")
    assert got["python"] == os.path.abspath(sys.executable)
    assert got["procs"] is None and got["clean_env"] is False


def test_the_active_venv_is_checked_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path))
    assert doctor_cli.default_python() == str(python)
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)  # oversub's own venv: itself
    assert doctor_cli.default_python() == sys.executable
    monkeypatch.delenv("VIRTUAL_ENV")
    assert doctor_cli.default_python() == sys.executable
