"""`oversub run` and `check --apply` in-process: the exit status passed through, --dry-run,
usage errors (the real trees are in tests/system/test_run.py and tests/system/real/)."""

from __future__ import annotations

import sys

import pytest

from tests.support.harness import run_cli


def test_the_commands_exit_status_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run", "--", "sh", "-c", "echo hi; exit 7"], capsys)
    assert code == 7
    assert err.splitlines()[0].startswith("oversub run: N = ")
    assert err.splitlines()[-1].endswith("exit 7 (the command's)"), err
    code, _, _ = run_cli(["run", "-q", "--", "sh", "-c", "kill -TERM $$"], capsys)
    assert code == 128 + 15


def test_quiet_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run", "--quiet", "--", "true"], capsys)
    assert (code, err) == (0, "")


def test_a_command_that_cannot_start_is_127_or_126(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    code, _, err = run_cli(["run", "--", "/nonexistent/oversub-no-such"], capsys)
    assert code == 127 and "oversub run: error: cannot start" in err
    code, _, err = run_cli(["run", "--", "/"], capsys)
    assert code == 126, err


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["run"], capsys)
    assert code == 2 and err.startswith("oversub: error: no command given after --")


def test_dry_run_names_the_plan_variables_and_hooks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    code, out, _ = run_cli(["run", "--procs", "2", "--cpus", "4", "--dry-run", "--", "x"], capsys)
    assert code == 0
    assert out.startswith("N = 4 usable vCPUs; 2 processes x 2 threads"), out
    assert "  OPENBLAS_NUM_THREADS=2\n" in out and "  OMP_NUM_THREADS=3  (yours: kept)" in out
    assert "NUMBA_NUM_THREADS not set: a maximum" in out
    assert f"for what {sys.executable} has installed:" in out  # x is no Python: ours
    assert "BLAS and OpenMP pools already loaded (threadpoolctl" in out  # a dependency


def test_check_apply_runs_the_gate_with_the_cure(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["check", "--apply", "--warmup", "0", "--", "true"], capsys)
    assert code in (0, 3), err  # `true` may end before a full interval: not judged
    assert err.startswith("oversub check --apply: N = "), err
    code, _, err = run_cli(["check", "--apply"], capsys)
    assert code == 2 and "--apply needs a command" in err
    code, _, err = run_cli(["check", "--procs", "auto", "--threads", "1"], capsys)
    assert code == 2 and "--procs auto only applies with --apply" in err
