"""CLI wiring: every command's options, every bad-input path, every exit code (in-process)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oversub import __version__
from oversub.cli.app import main
from oversub.core.errors import ExitStatus
from oversub.run.session import SessionOptions
from tests.support.harness import LAUNCHER_VARS, OVERSUB
from tests.support.harness import run_cli as run

SHELL = ["sh", "-c"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and __version__ in out


@pytest.mark.parametrize("command", ["cpus", "recommend", "watch", "check", "stress", "completion"])
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


COUNTED = re.compile(r"^ *(Two|Three|Four|Five|Six) (ways|modes):\n((?: {4,}\S.*\n)+)", re.M)


@pytest.mark.parametrize(
    "command", ["cpus", "recommend", "watch", "check", "report", "diff", "serve", "tune"]
)
def test_a_help_that_counts_its_ways_lists_that_many(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 39: `check --help` said "Three ways" above four.
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    numbers = {"Two": 2, "Three": 3, "Four": 4, "Five": 5, "Six": 6}
    for word, _, lines in COUNTED.findall(out):
        assert len(lines.splitlines()) == numbers[word], out
    if command == "check":
        assert COUNTED.search(out), out  # the test reads the form check's help has


def test_watch_help_says_what_the_views_words_mean(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 39: "PSI", "Invol/s" and "demand" were explained nowhere on screen.
    code, out, _ = run(["watch", "--help"], capsys)
    assert code == 0
    for term in ("Demand ", "Delay ", "Invol/s ", "PSI some "):
        assert any(line.strip().startswith(term) for line in out.splitlines()), out


def test_serve_without_a_target_says_it_needs_one(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 39: `oversub serve --port 0`, as a user writes it, needs a target; no default,
    # since --all would publish every cgroup of the node on every interface.
    code, out, err = run(["serve", "--port", "0"], capsys)
    assert code == ExitStatus.USAGE and out == ""
    assert err == (
        "oversub: error: serve needs a target: --pid PID, --cgroup PATH or --all (every "
        "cgroup of the node), e.g. oversub serve --all --port 0\n"
    )


def test_cpus_text_names_the_budget(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["cpus"], capsys)
    assert code == 0 and "N =" in out


def test_recommend_env_is_only_exports(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["recommend", "--procs", "3", "--cpus", "12", "--format", "env"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines and all(line.startswith("export ") for line in lines)
    assert "export OMP_NUM_THREADS=4" in lines


@pytest.mark.parametrize("fmt", ["env", "json", "text", "prefix"])
def test_recommend_warnings_go_to_stderr_in_every_format(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 11 item 12: `eval "$(oversub recommend --procs 8 --format env)"` lost the
    # "8 processes on 2 vCPUs" warning; the text format printed it on stdout, last.
    code, out, err = run(["recommend", "--procs", "8", "--cpus", "2", "--format", fmt], capsys)
    assert code == 0
    warnings = err.splitlines()
    assert warnings[0].startswith("oversub: warning: 8 processes on 2 vCPUs: even one thread")
    assert all(line.startswith("oversub: warning: ") for line in warnings)
    if fmt != "json":  # JSON keeps them as data too
        assert "warning" not in out


def test_recommend_prefix_is_one_line_of_assignments(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["recommend", "--procs", "3", "--cpus", "12", "--format", "prefix"], capsys)
    assert code == 0 and out.endswith("\n") and out.count("\n") == 1
    words = out.split()
    assert words[0] == "OMP_NUM_THREADS=4" and words[-1] == "POLARS_MAX_THREADS=4"
    assert all(w.count("=") == 1 and w.endswith("=4") for w in words)


def test_the_prefix_sets_one_command_and_leaves_the_shell_alone() -> None:
    """Issue 39: `env $(oversub recommend ... --format prefix) CMD` runs CMD with the plan's
    variables and leaves the shell as it was; the assignments alone, out of a command
    substitution, are not assignments to a POSIX shell (so the docs say `env`)."""
    prefix = shlex.join(
        [*OVERSUB, "recommend", "--procs", "3", "--cpus", "12", "--format", "prefix"]
    )
    show = shlex.join(
        [
            sys.executable,
            "-c",
            "import os; print(os.environ['OMP_NUM_THREADS'], os.environ['POLARS_MAX_THREADS'])",
        ]
    )
    script = f'env $({prefix}) {show}; echo "after: ${{OMP_NUM_THREADS-unset}}"'
    env = {k: v for k, v in os.environ.items() if not k.endswith("_THREADS")}
    done = subprocess.run([*SHELL, script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["4 4", "after: unset"], done.stdout
    bare = subprocess.run(
        [*SHELL, f"$({prefix}) {show}"], capture_output=True, text=True, env=env, timeout=60
    )
    assert bare.returncode == 127 and "OMP_NUM_THREADS=4" in bare.stderr, bare


def test_text_off_a_terminal_is_not_hard_wrapped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 11 item 16: piped text was wrapped at 80 columns, which breaks grep.
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = run(["recommend", "--procs", "3", "--workers", "2", "--cpus", "2"], capsys)
    assert code == 0
    assert any(
        "M*(T + W) - N: the plan needs 9 threads on 2 vCPUs (4.5x), even at 1 thread per process"
        in line
        for line in out.splitlines()
    ), out
    assert "Binding: none, since --cpus gives a count, not this machine's CPUs; run " in out


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
        # pids beyond pid_t are typos, not a traceback
        (["cpus", "--pid", "99999999999999999999"], "--pid"),
        (["watch", "99999999999999999999"], "PID"),
        (["check", "--pid", "4294967296", "--duration", "1"], "--pid"),
        (["recommend", "--procs", "2", "--pid", "2147483648"], "--pid"),
        # every seconds-valued flag refuses NaN and infinity
        (["watch", "1", "--interval", "nan"], "--interval"),
        (["watch", "1", "--interval", "inf"], "--interval"),
        (["watch", "1", "--duration", "nan"], "--duration"),
        (["watch", "1", "--duration", "inf"], "--duration"),
        (["watch", "1", "--idle-seconds", "nan"], "--idle-seconds"),
        (["watch", "1", "--idle-seconds", "inf"], "--idle-seconds"),
        (["check", "--pid", "1", "--duration", "inf"], "--duration"),
        (["check", "--interval", "nan", "--", "true"], "--interval"),
        (["check", "--warmup", "nan", "--", "true"], "--warmup"),
        (["check", "--warmup", "inf", "--", "true"], "--warmup"),
        (["check", "--timeout", "inf", "--", "true"], "--timeout"),
        (["check", "--timeout", "nan", "--", "true"], "--timeout"),
        (["stress", "-M", "1", "-T", "1", "--seconds", "nan"], "--seconds"),
        (["stress", "-M", "1", "-T", "1", "--seconds", "inf"], "--seconds"),
        # a tiny interval makes oversub itself the CPU hog
        (["watch", "1", "--interval", "0.05"], "--interval"),
        (["check", "--interval", "0.01", "--", "true"], "--interval"),
        (["watch", "1", "--min-wait", "-1"], "--min-wait"),
        # flags of another check mode are refused, not ignored
        (["check", "--duration", "5", "--", "true"], "use --timeout with a command"),
        (["check", "--timeout", "5", "--pid", "1"], "--timeout only applies with a command"),
        (["check", "--warmup", "1", "--pid", "1"], "--warmup only applies with a command"),
        (["check", "-M", "2", "-T", "2", "--interval", "1"], "static preflight"),
        (["check", "-M", "2", "-T", "2", "--duration", "1"], "--duration only applies"),
        (["check", "-M", "2", "-T", "2", "--timeout", "1"], "--timeout only applies"),
        (["check", "-M", "2", "-T", "2", "--warmup", "1"], "--warmup only applies"),
        (["check", "--workers", "1", "--", "true"], "--workers only applies"),
        (["check", "--workers", "0", "--pid", "1"], "--workers only applies"),
        (["check", "--cpus", "2", "--pid", "1"], "--cpus only applies"),
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
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.oversub]\nfail-on = 'at-risk'\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["check", "--procs", "2", "--threads", "1", "--cpus", "4"], capsys)
    assert code == ExitStatus.OK, err
    assert "(--fail-on at-risk)" in err  # the file was read: the default is costly
    # A flag beats the file.
    argv = ["check", "--procs", "2", "--threads", "1", "--cpus", "4", "--fail-on", "starved"]
    code, _, err = run(argv, capsys)
    assert code == ExitStatus.OK, err
    assert "(--fail-on starved)" in err and "at-risk" not in err


def test_default_gate_fails_a_plan_of_teams_sharing_cpus_not_single_threads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Issue 21 item 3: --fail-on costly (the default) fails on what costs multiples.
    monkeypatch.chdir(tmp_path)
    teams = ["check", "--procs", "2", "--threads", "2", "--cpus", "2"]
    code, _, err = run(teams, capsys)
    assert code == ExitStatus.FOUND, err
    assert err.splitlines()[-1] == (
        "oversub check: FAIL: verdict oversubscribed, 1 costly finding: preflight-oversubscribed "
        "(--fail-on costly), exit 1"
    )
    singles = ["check", "--procs", "4", "--threads", "1", "--cpus", "2"]
    code, _, err = run(singles, capsys)
    assert code == ExitStatus.OK, err
    assert err.splitlines()[-1] == (
        "oversub check: pass: verdict oversubscribed, no costly finding (--fail-on costly), exit 0"
    )
    code, _, err = run([*singles, "--fail-on", "oversubscribed"], capsys)
    assert code == ExitStatus.FOUND, err
    assert err.splitlines()[-1] == (
        "oversub check: FAIL: verdict oversubscribed (--fail-on oversubscribed), exit 1"
    )
    (tmp_path / "pyproject.toml").write_text("[tool.oversub]\nfail-on = 'oversubscribed'\n")
    assert run(singles, capsys)[0] == ExitStatus.FOUND
    assert run([*singles, "--fail-on", "costly"], capsys)[0] == ExitStatus.OK


@pytest.mark.parametrize("where", ["flag", "pyproject"])
def test_a_bad_gate_value_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["check", "--procs", "2", "--threads", "2", "--cpus", "2"]
    if where == "flag":
        argv += ["--fail-on", "critical"]
    else:
        (tmp_path / "pyproject.toml").write_text("[tool.oversub]\nfail-on = 'critical'\n")
    code, out, err = run(argv, capsys)
    assert code == ExitStatus.USAGE and out == ""
    assert len(err.strip().splitlines()) == 1 and "critical" in err and "costly" in err, err


def test_watch_reads_pyproject_and_flags_win(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import oversub.run.session

    (tmp_path / "pyproject.toml").write_text(
        "[tool.oversub]\ninterval = 0.25\nmargin = 0.5\nmin-wait = 0.3\n"
    )
    monkeypatch.chdir(tmp_path)
    seen: list[SessionOptions] = []

    def fake_follow(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[1])
        raise KeyboardInterrupt  # enough: the options are what this test is about

    monkeypatch.setattr(oversub.run.session, "follow", fake_follow)
    pid = str(os.getpid())
    code, _, _ = run(["watch", pid, "--format", "json"], capsys)
    assert code == ExitStatus.INTERRUPTED
    assert seen[-1].interval == 0.25
    assert seen[-1].thresholds.margin == 0.5 and seen[-1].thresholds.min_wait == 0.3
    argv = ["watch", pid, "--format", "json", "--interval", "0.5", "--margin", "0.1"]
    run([*argv, "--min-wait", "0"], capsys)
    assert seen[-1].interval == 0.5
    assert seen[-1].thresholds.margin == 0.1 and seen[-1].thresholds.min_wait == 0.0


def test_watch_refuses_a_bad_pyproject(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.oversub]\ninterval = 0.01\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["watch", str(os.getpid()), "--once"], capsys)
    assert code == ExitStatus.USAGE and "interval" in err


def test_internal_error_is_one_line_exit_3(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import oversub.cli.target

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(oversub.cli.target, "budget_of", broken)
    monkeypatch.delenv("OVERSUB_DEBUG", raising=False)
    code, _, err = run(["cpus"], capsys)
    assert code == ExitStatus.UNOBSERVABLE  # never 1, which means "found" for check
    assert err.splitlines() == ["oversub: error: internal error: RuntimeError: boom second line"]
    monkeypatch.setenv("OVERSUB_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["cpus"])


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown"])
def test_report_path_is_checked_before_the_command_starts(
    flag: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    missing = tmp_path / "no-such-dir" / "r.out"
    code, _, err = run(["check", flag, str(missing), *command], capsys)
    assert code == ExitStatus.USAGE, err
    assert flag in err and str(missing) in err and "does not exist" in err
    assert not marker.exists()
    a_file = tmp_path / "file"
    a_file.write_text("")
    code, _, err = run(["check", flag, str(a_file / "r.out"), *command], capsys)
    assert code == ExitStatus.USAGE and flag in err
    code, _, err = run(["check", flag, str(tmp_path), *command], capsys)
    assert code == ExitStatus.USAGE and flag in err
    assert not marker.exists()


def test_static_preflight_report_has_no_run_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["check", "-M", "4", "-T", "4", "--cpus", "8"], capsys)
    assert code == ExitStatus.FOUND
    assert "static preflight" in err.splitlines()[0]
    assert "samples" not in err and "pid 0" not in err
    # Issue 11 item 7: a plan, not a tree that "keeps more threads runnable".
    assert err.startswith("oversub: oversubscribed (the plan needs more threads than there are")
    assert "tree" not in err and "runnable" not in err


def test_closed_stdout_and_stderr_do_not_crash() -> None:
    # Started with fd 1 and 2 closed, Python has sys.stdout = sys.stderr = None.
    # A passing preflight: a crash would exit 1, which is also "found".
    probe = [*OVERSUB, "check", "-M", "1", "-T", "1", "--cpus", "8"]
    done = subprocess.run(
        [*SHELL, '"$@" >&- 2>&-; echo "exit $?"', "sh", *probe], capture_output=True, text=True
    )
    assert done.stdout.strip() == f"exit {int(ExitStatus.OK)}", done


def test_stdout_closed_by_reader_exits_0() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before oversub writes: EPIPE on the first write
    try:
        done = subprocess.run(
            [*OVERSUB, "cpus", "--format", "json"], stdout=write_end, stderr=subprocess.PIPE
        )
    finally:
        os.close(write_end)
    assert done.returncode == ExitStatus.OK, done.stderr
    assert b"Traceback" not in done.stderr and b"Exception ignored" not in done.stderr


@pytest.mark.integration
def test_cpus_detail_adds_model_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["cpus", "--detail", "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["cpu_model"] and isinstance(doc["cpu_flags"], list)


def test_cpuinfo_is_only_imported_with_detail() -> None:
    probe = (
        "import sys\n"
        "from oversub.cli.app import main\n"
        "try:\n"
        "    main(['cpus', '--format', 'json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(str('cpuinfo' in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stderr.strip() == "False"


@pytest.mark.parametrize(("module", "package"), [("rich", "rich"), ("click", "click")])
def test_a_missing_dependency_is_named_in_one_line(module: str, package: str) -> None:
    """`python3 -m oversub` with an interpreter that lacks a dependency (outside the venv):
    which package is missing and what to do, exit 3, never a traceback."""
    import subprocess
    import sys

    probe = (
        "import os, runpy, sys\n"
        f"sys.modules[{module!r}] = None\n"  # `import <module>` now raises ModuleNotFoundError
        # The live view needs rich (cpus and recommend draw their text without it).
        "sys.argv = ['oversub', 'watch', '--once', '--interval', '0.1', '--format', 'live',"
        " str(os.getpid())]\n"
        "runpy.run_module('oversub', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    assert out.stderr.startswith(f"oversub: error: the package {package!r}, which oversub needs"), (
        out.stderr
    )
    assert "source .venv/bin/activate" in out.stderr and "pip install" in out.stderr
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
