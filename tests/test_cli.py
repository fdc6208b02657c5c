"""CLI wiring: every command's options, every bad-input path, every exit code (in-process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from oversub import __version__
from oversub.cli import main
from oversub.errors import ExitStatus


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process the way the console script does; return (code, out, err)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and __version__ in out


@pytest.mark.parametrize("command", ["cpus", "recommend", "watch", "check", "stress"])
def test_every_command_has_help_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    assert "Examples:" in out or "Three ways:" in out
    assert f"oversub {command}" in out


def test_cpus_json_matches_affinity(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["cpus", "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["affinity"] == sorted(os.sched_getaffinity(0))
    assert 1 <= doc["vcpus"] <= len(doc["affinity"])
    assert doc["limited_by"] in {"affinity", "quota", "cpuset", "none"}
    for key in ("logical", "physical", "quota", "cpuset", "numa"):
        assert key in doc


def test_cpus_text_names_the_budget(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["cpus"], capsys)
    assert code == 0 and "N =" in out


def test_recommend_env_is_only_exports(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["recommend", "--procs", "3", "--cpus", "12", "--format", "env"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines and all(line.startswith("export ") for line in lines)
    assert "export OMP_NUM_THREADS=4" in lines


def test_recommend_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["recommend", "--procs", "5", "--cpus", "4", "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["threads_per_process"] == 1
    assert doc["oversubscribed"] is True
    assert doc["warnings"]
    for key in ("vcpus", "procs", "workers", "leftover", "env", "binding", "budget"):
        assert key in doc


def test_recommend_text_with_workers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["recommend", "--procs", "2", "--workers", "1", "--cpus", "8"], capsys)
    assert code == 0
    assert "torch.set_num_threads(3)" in out
    assert "worker" in out.lower()


def test_recommend_auto_uses_launcher(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    code, out, _ = run(["recommend", "--procs", "auto", "--cpus", "8", "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["procs"] == 2 and doc["procs_source"] == "LOCAL_WORLD_SIZE"


LAUNCHER_VARS = (
    "LOCAL_WORLD_SIZE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["recommend", "--procs", "0"], "at least 1"),
        (["recommend", "--procs", "-2"], "at least 1"),
        (["recommend", "--procs", "two"], "not a whole number"),
        (["recommend", "--procs", "1.5"], "not a whole number"),
        (["recommend", "--procs", "2", "--cpus", "0"], "--cpus"),
        (["recommend", "--procs", "2", "--workers", "-1"], "--workers"),
        (["recommend", "--procs", "2", "--format", "yaml"], "--format"),
        (["recommend", "--procs", "2", "--cpus", "4", "--pid", "1"], "exclude"),
        (["recommend"], "--procs"),
        (["recommend", "--procs", "auto"], "no launcher variable"),
        (["cpus", "--pid", "0"], "--pid"),
        (["cpus", "--pid", "abc"], "--pid"),
        (["watch", "0"], "PID"),
        (["watch", "1", "--interval", "0"], "--interval"),
        (["watch", "1", "--delay-ratio", "2"], "--delay-ratio"),
        (["check"], "exactly one"),
        (["check", "--procs", "2"], "both --procs and --threads"),
        (["check", "--procs", "2", "--threads", "2", "--", "true"], "exactly one"),
        (["check", "--cpus", "2", "--", "true"], "--cpus only applies"),
        (["check", "--fail-on", "ok", "--", "true"], "--fail-on"),
        (["stress", "--procs", "0", "--threads", "1"], "--procs"),
        (["nosuchcommand"], "No such command"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    argv: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    code, _, err = run(argv, capsys)
    assert code == ExitStatus.USAGE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oversub: error:"), err
    assert needle in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["cpus", "--pid", "{dead}"],
        ["recommend", "--procs", "2", "--pid", "{dead}"],
        ["watch", "{dead}", "--once"],
        ["check", "--pid", "{dead}", "--duration", "1"],
    ],
)
def test_missing_pid_exits_3(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    dead = str(_dead_pid())
    code, _, err = run([a.replace("{dead}", dead) for a in argv], capsys)
    assert code == ExitStatus.UNOBSERVABLE
    assert err.strip().splitlines() == [f"oversub: error: no process with pid {dead}"]


def test_bad_launcher_value_is_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "many")
    code, _, err = run(["recommend", "--procs", "auto"], capsys)
    assert code == ExitStatus.USAGE and "LOCAL_WORLD_SIZE" in err


def test_static_preflight_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    code, _, err = run(["check", "--procs", "4", "--threads", "4", "--cpus", "8"], capsys)
    assert code == ExitStatus.FOUND, err
    code, _, err = run(["check", "--procs", "4", "--threads", "2", "--cpus", "8"], capsys)
    assert code == ExitStatus.OK, err
    # Workers count: 2 x (3 threads + 1 worker) = 8 fits, 2 x (3 + 2) = 10 does not.
    code, _, _ = run(["check", "-M", "2", "-T", "3", "-W", "1", "--cpus", "8"], capsys)
    assert code == ExitStatus.OK
    code, _, _ = run(["check", "-M", "2", "-T", "3", "-W", "2", "--cpus", "8"], capsys)
    assert code == ExitStatus.FOUND


def test_pyproject_unknown_key_is_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    (tmp_path / "pyproject.toml").write_text("[tool.oversub]\nfail_on = 'at-risk'\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["check", "--procs", "1", "--threads", "1", "--cpus", "2"], capsys)
    assert code == ExitStatus.USAGE
    assert "fail_on" in err and len(err.strip().splitlines()) == 1


def test_pyproject_fail_on_applies(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    # 2 x 1 thread on 4 CPUs leaves CPUs idle: ok, so even at-risk passes...
    (tmp_path / "pyproject.toml").write_text("[tool.oversub]\nfail-on = 'at-risk'\n")
    monkeypatch.chdir(tmp_path)
    code, _, _ = run(["check", "--procs", "2", "--threads", "1", "--cpus", "4"], capsys)
    assert code == ExitStatus.OK
    # ...while 3 x 2 threads on 4 CPUs fails under the pyproject setting and the default alike.
    code, _, _ = run(["check", "--procs", "3", "--threads", "2", "--cpus", "4"], capsys)
    assert code == ExitStatus.FOUND


@pytest.mark.integration
def test_cpus_detail_adds_model_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["cpus", "--detail", "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["cpu_model"] and isinstance(doc["cpu_flags"], list)


def test_cpuinfo_is_only_imported_with_detail() -> None:
    probe = (
        "import sys\n"
        "from oversub.cli import main\n"
        "try:\n"
        "    main(['cpus', '--format', 'json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(str('cpuinfo' in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stderr.strip() == "False"
