"""Hostile command lines for every command and option, generated from the real click group.

Property: whatever argv a user types, `oversub` exits with a documented status (the exit
codes of docs/guarantees.md), never prints a traceback or an internal error, and a usage
error is one line starting `oversub: error:`. The options come from introspecting every command of
`oversub.cli.app`, so a new option is fuzzed without editing this file (and a new option
*type* fails `test_every_option_has_a_value_strategy` until it gets one).

Bounds, so that no example runs long or observes a real process:
- every pid that converts is above the kernel's PID_MAX_LIMIT, so no such process exists;
- `stress` gets at most 1 process x 1 thread for at most 0.05 s;
- `check -- CMD` runs only `true`, `python -c pass`, or words that are no executable;
- `--cpus` stays small or above the accepted maximum (a plan for 65,536 CPUs takes a while);
- values never contain "/" except in a fixed list, and each example runs in an empty
  temporary directory, so report files land there;
- an alarm turns a hang into a test failure that names the argv.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click
import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from oversub.analysis.plans import binding_plan, synthetic_budget
from oversub.cli.app import COMMANDS as COMMAND_MODULES
from oversub.cli.app import command
from oversub.cli.options import PID, Seconds, parse_procs
from oversub.cli.tune.command import parse_duration
from oversub.core.errors import ExitStatus
from oversub.core.model import MAX_VCPUS
from tests.support.harness import LAUNCHER_VARS, OVERSUB, can_be_an_argument
from tests.support.harness import run_cli as run

DOCUMENTED = {int(s) for s in ExitStatus}
PID_MAX_LIMIT = 4 * 1024 * 1024
"""The kernel's ceiling for pid_max on 64-bit: no process can have a larger pid."""
ALARM_S = 20.0
"""Hang guard per example (a normal one takes milliseconds); a bound, not a measured time."""
PYTHON_PASS = [sys.executable, "-c", "pass"]

COMMANDS: dict[str, click.Command] = {name: command(name) for name in COMMAND_MODULES}

# Values that break parsers: empty, blank, signs, NaN/infinity, overflow, other digits,
# long strings, control characters, shell and format syntax. Each option also gets values
# valid for its type and free text; every value passes `_bounded` first.
HOSTILE = (
    "",
    " ",
    "\t",
    "\n",
    "-",
    "--",
    "-0",
    "-1",
    "0",
    "1.5",
    "1e3",
    "0x10",
    "1_000",
    " 2",
    "nan",
    "-nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e309",
    "-1e309",
    "1e-320",
    "5e-324",
    "1e300",
    "abc",
    "auto",
    "\u0661",  # ARABIC-INDIC DIGIT ONE: int() and float() accept it
    "\u0664\u0661\u0669\u0664\u0663\u0660\u0665",  # 4194305 in the same digits
    "9223372036854775807",
    "99999999999999999999",
    "9" * 5000,  # beyond int()'s default digit limit
    "é🙂",
    "\udce9",  # a Latin-1 byte of a real argv, as Python decodes it
    "x" * 300,  # longer than NAME_MAX
    "a b",
    "'\"",
    "$HOME",
    "%s{}",
    "\x1b[31m",
)
PATHS = ("r.json", "report.xml", "out.md", "-", "é🙂.md", "\udce9.json")
BAD_PATHS = (
    ".",
    "..",
    "/",
    "missing-dir/r.json",
    "/nonexistent/oversub/r.json",
    "/dev/null",
    "/dev/full",
    "no\nsuch/r.json",
)
COMMANDS_TO_RUN = (
    ["true"],
    PYTHON_PASS,
    ["/nonexistent/oversub-no-such-command"],
    [""],
    ["/"],
)
SKELETONS = {
    "recommend": (["--procs", "2"], ["--procs", "3", "--cpus", "8"]),
    "watch": (["--duration", "0.2", "--interval", "0.1"],),
    "check": (
        ["--procs", "2", "--threads", "2"],
        ["--procs", "4", "--threads", "1", "--workers", "1", "--cpus", "4"],
        ["--pid", "4194305", "--duration", "0.2"],
    ),
    "stress": (["--procs", "1", "--threads", "1", "--seconds", "0.01"],),
}
"""Valid enough to get past parsing: the options drawn after them vary the run."""


def _recording() -> str:
    """A valid recording (`report`'s FILE), written once for the session."""
    from tests.support.builders import oversubscribed_run, recording_lines

    path = os.path.join(tempfile.mkdtemp(prefix="oversub-bad-input-"), "run.ndjson")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(recording_lines(oversubscribed_run(3))) + "\n")
    return path


RECORDING_ARGS = (_recording(), __file__, "missing.ndjson", "é🙂.ndjson", *BAD_PATHS)
"""A recording, a file that is not one (exit 2), a missing one (exit 3), odd paths."""
UNKNOWN_OPTIONS = ("--bogus", "-Z", "--pid2", "--format-json", "---", "-")

FREE_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), max_size=12
)
"""No NUL (an argv cannot hold one), no "/" (report files stay in the example's directory),
no surrogates other than the listed one."""


def _context(command: click.Command, name: str) -> click.Context:
    return click.Context(command, info_name=name, **command.context_settings)


def _params(name: str) -> list[click.Parameter]:
    command = COMMANDS[name]
    return command.get_params(_context(command, name))


def _convert(name: str, param: click.Parameter, value: str) -> Any:
    """The value as the command would see it, or None when click refuses it."""
    given: Any = (value,) if getattr(param, "multiple", False) else value
    try:
        got = param.process_value(_context(COMMANDS[name], name), given)
        return got[0] if getattr(param, "multiple", False) and got else got
    except (click.ClickException, ValueError):
        return None


def _bounded(name: str, param: click.Parameter, value: str) -> bool:
    """False for values that would make an example observe a live process or run long."""
    got = _convert(name, param, value)
    if got is None or isinstance(got, str):
        return True
    if param.type is PID:
        return bool(got > PID_MAX_LIMIT)
    if param.name == "cgroup":
        return not _names_a_cgroup(got)
    if name == "stress":
        return bool(got <= (0.05 if param.name == "seconds" else 1))
    if name == "tune" and param.name in ("budget_s", "trial_seconds"):
        return bool(got <= 0.05)  # the first trial runs whatever the budget: keep it short
    if name == "tune" and param.name in ("runs", "warmup", "max_trials"):
        return bool(got <= 2)
    if name == "doctor" and param.name == "timeout":
        return bool(got <= 0.05)  # a child per runtime and budget: each cut short
    if param.name == "ncpus":
        # A budget of N CPUs lists them: small, or refused as more than any kernel runs.
        return bool(got <= 64 or got > MAX_VCPUS)
    return True


def _valid(name: str, param: click.Parameter) -> tuple[str, ...]:
    """A few values the option accepts (and `_bounded` allows)."""
    valid = tuple(
        v
        for v in _typical(param)
        if _convert(name, param, v) is not None and _bounded(name, param, v)
    )
    assert valid, (name, param.name)
    return valid


def _names_a_cgroup(value: str) -> bool:
    """An existing cgroup: watching it would run until stopped."""
    from oversub.core.errors import OversubError
    from oversub.probe.cgroup_target import resolve_cgroup

    try:
        resolve_cgroup(value)
    except OversubError:
        return False
    return True


CGROUP_PATHS = ("/oversub-no-such-cgroup", "relative/cgroup", "/a/../b", "/sys/fs/cgroup/nope")
"""--cgroup values that name no cgroup (bad input of every kind the option refuses)."""


def _typical(param: click.Parameter) -> tuple[str, ...]:
    """Values of the option's type, some of them out of its range."""
    kind = param.type
    if isinstance(kind, click.Choice):
        return tuple(str(c) for c in kind.choices)
    if param.callback is parse_procs:
        return ("1", "2", "4", "auto")
    if param.name == "textfile":  # a directory (serve writes only once it samples a target)
        return (".", "/nonexistent/oversub", "r.json", "/dev/null")
    if isinstance(kind, click.Path):
        return PATHS
    if param.name == "cgroup":
        return CGROUP_PATHS
    if param.name == "bind":
        return ("127.0.0.1", "::1", "0.0.0.0", "no-such-host.invalid")
    if param.name == "name":
        return ("tree", "job-1.a_b", "a/b", "")
    if param.callback is parse_duration:  # tune --budget
        return ("0.01", "0.05", "0.05s", "1s", "10m", "1h")
    if param.name == "env_dims":  # tune --env
        return ("OMP_NUM_THREADS=1,2", "X=a", "X")
    if param.name == "procs_values":  # tune --procs-values
        return ("1", "1,2", "0")
    if kind is click.STRING:  # a metric's name (check --metric, diff --metric)
        return ("steps", "steps_per_s", "a.b")
    if isinstance(kind, click.IntRange):
        return ("0", "1", "2", "3", "4194305", "2147483647", "9223372036854775807")
    if isinstance(kind, (Seconds, click.FloatRange)):
        return ("0", "0.01", "0.05", "0.1", "0.25", "0.5", "1")
    raise AssertionError(f"no value strategy for {param.name} ({kind!r}): add one")


def _hostile(param: click.Parameter) -> tuple[str, ...]:
    return (*HOSTILE, *BAD_PATHS) if isinstance(param.type, click.Path) else HOSTILE


def values(name: str, param: click.Parameter, *, hostile: bool) -> st.SearchStrategy[str]:
    """Values valid for the option's type, or hostile ones and free text."""
    if hostile:
        pool = st.one_of(st.sampled_from(_hostile(param)), FREE_TEXT)
    else:
        pool = st.sampled_from(_valid(name, param))
    return pool.filter(lambda v: _bounded(name, param, v))


def _not_runnable(word: str) -> bool:
    return shutil.which(word) is None


@st.composite
def option_tokens(draw: st.DrawFn, name: str, *, hostile: bool) -> list[str]:
    """One option as argv tokens: `--opt V`, `--opt=V`, `-oV` or a flag; when hostile, also
    an unknown option or a flag given a value."""
    options = [p for p in _params(name) if isinstance(p, click.Option)]
    param = draw(st.sampled_from(options))
    if hostile and draw(st.integers(0, 7)) == 0:
        return [draw(st.sampled_from(UNKNOWN_OPTIONS))]
    long = [o for o in param.opts if o.startswith("--")]
    short = [o for o in param.opts if not o.startswith("--")]
    if param.is_flag:
        if name == "cpus" and param.name == "detail":
            return ["--detail=1"]  # plain --detail runs py-cpuinfo (~1 s, spawns processes)
        if name in ("watch", "serve") and param.name == "all_cgroups":
            return ["--all=1"]  # plain --all watches the node until it is stopped
        flag = draw(st.sampled_from(param.opts))
        return [f"{flag}=1"] if hostile and long and draw(st.booleans()) else [flag]
    value = draw(values(name, param, hostile=hostile))
    form = draw(st.sampled_from(["separate", "equals", "attached"]))
    if form == "equals" and long:
        return [f"{draw(st.sampled_from(long))}={value}"]
    if form == "attached" and short and value:
        return [f"{draw(st.sampled_from(short))}{value}"]
    return [draw(st.sampled_from(param.opts)), value]


@st.composite
def command_argv(draw: st.DrawFn, name: str) -> list[str]:
    """`oversub NAME [PID] OPTIONS... [-- CMD...] [--opt-without-value]`: mostly valid (a
    skeleton that parses, valid options) with up to three hostile options mixed in.

    Values always follow their option, so no value can become watch's PID or check's CMD.
    """
    # stress runs 60 s without --seconds: a short one comes first (a drawn one wins);
    # tune: a first trial of at most 0.05 s (a drawn --budget is bounded alike); doctor:
    # each child at most 0.05 s (where the interpreter has runtimes to start).
    first = {
        "stress": ["--seconds", "0.01"],
        "tune": ["--budget", "0.05"],
        "doctor": ["--timeout", "0.05"],
    }
    argv = [name, *first.get(name, [])]
    params = _params(name)
    arguments = [p for p in params if isinstance(p, click.Argument)]
    takes_command = any(p.nargs == -1 for p in arguments)
    takes_value = [p for p in params if isinstance(p, click.Option) and not p.is_flag]
    pid_argument = [p for p in arguments if p.type is PID]
    if pid_argument and draw(st.integers(0, 7)):
        argv.append(draw(values(name, pid_argument[0], hostile=draw(st.booleans()))))
    for _ in (p for p in arguments if isinstance(p.type, click.Path)):  # report/diff FILE
        argv.append(draw(st.sampled_from(RECORDING_ARGS)))
    choice_argument = [p for p in arguments if isinstance(p.type, click.Choice)]
    if choice_argument and draw(st.integers(0, 7)):  # `completion SHELL`
        argv.append(draw(values(name, choice_argument[0], hostile=draw(st.booleans()))))
    command_mode = takes_command and draw(st.booleans())
    if name in SKELETONS and not command_mode and draw(st.integers(0, 3)):
        argv += draw(st.sampled_from(SKELETONS[name]))
    items = draw(st.lists(option_tokens(name, hostile=False), max_size=3))
    items += draw(st.lists(option_tokens(name, hostile=True), max_size=3))
    for tokens in draw(st.permutations(items)):
        argv += tokens
    if command_mode:
        argv.append("--")
        argv += draw(
            st.one_of(
                st.sampled_from(COMMANDS_TO_RUN),
                st.lists(FREE_TEXT.filter(_not_runnable), min_size=1, max_size=2),
            )
        )
    elif takes_value and draw(st.integers(0, 7)) == 0:
        argv.append(draw(st.sampled_from(takes_value)).opts[0])  # at the end: no value
    return argv


TOP_LEVEL = st.lists(
    st.sampled_from(
        ["--version", "-V", "--help", "-h", "--version=1", *UNKNOWN_OPTIONS, "", "bogus", "CPUS"]
    ),
    max_size=3,
)


class Hung(BaseException):
    """Not an Exception: `main` must not turn it into an exit status."""


@contextmanager
def _alarm(argv: list[str]) -> Iterator[None]:
    def ring(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"{argv!r} still running after {ALARM_S} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, ALARM_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _in_empty_dir() -> Iterator[None]:
    """Report files an example writes land in a fresh directory (no pyproject.toml there)."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="oversub-bad-input-") as tmp:
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(before)


@pytest.fixture
def quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CI job summary to append to, no launcher variables, no traceback mode."""
    for var in (*LAUNCHER_VARS, "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS", "OVERSUB_DEBUG"):
        monkeypatch.delenv(var, raising=False)


def check_outcome(argv: list[str], code: int, out: str, err: str) -> None:
    """The documented promises (docs/guarantees.md) for any command line."""
    if "run" in argv and code in (126, 127):
        # `run` passes CMD's status on: a command that cannot start is 127 or 126, as in a shell.
        assert err.splitlines()[-1].startswith("oversub run: error: cannot start "), (argv, err)
        return
    assert code in DOCUMENTED, (argv, code, err)
    assert "Traceback" not in out + err, (argv, err)
    assert "internal error" not in err, (argv, err)
    lines = err.splitlines()
    if code == ExitStatus.FOUND:
        # only `check` turns verdicts into exit 1, `tune --fail-if-slower` its figures and
        # `doctor --fail` its measurements
        assert "check" in argv or "tune" in argv or "doctor" in argv, (argv, err)
    if not argv:
        # `oversub` alone: the help, on stdout, exit 0 (issue 39; click >= 8.2 made it 2)
        assert code == ExitStatus.OK and out.startswith("Usage: oversub") and err == "", err
    if code == ExitStatus.USAGE:
        alone = argv[:1] if len(argv) == 1 else None  # `oversub completion` alone
        if alone and getattr(COMMANDS.get(alone[0]), "no_args_is_help", False):
            # a command without its argument: its help text (click's NoArgsIsHelp)
            assert err.startswith("Usage: oversub"), err
        else:
            assert len(lines) == 1 and lines[0].startswith("oversub: error: "), (argv, err)
    elif code == ExitStatus.UNOBSERVABLE:
        assert lines and re.match(r"oversub( check)?: error: ", lines[-1]), (argv, err)
    else:
        assert not any(line.startswith("oversub: error:") for line in lines), (argv, err)


def run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with _in_empty_dir(), _alarm(argv):
        return run(argv, capsys)


SETTINGS = settings(
    max_examples=400,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # capsys is read and reset by every example
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)


def test_every_option_has_a_value_strategy() -> None:
    names = set(COMMANDS)
    assert names >= {"cpus", "recommend", "watch", "check", "stress"}, names
    for name in names:
        for param in _params(name):
            if isinstance(param, click.Option) and not param.is_flag:
                assert _valid(name, param), param.name
            if isinstance(param, click.Argument):
                known = param.type is PID or isinstance(param.type, (click.Choice, click.Path))
                assert known or param.nargs == -1, (name, param.name)


@pytest.mark.parametrize("name", sorted(COMMANDS))
@SETTINGS
@given(data=st.data())
def test_any_command_line_exits_documented(
    name: str, data: st.DataObject, capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    argv = data.draw(command_argv(name), label="argv")
    assume(all(map(can_be_an_argument, argv)))  # what this locale's command lines can hold
    code, out, err = run_in_process(argv, capsys)
    event(f"exit {code}")
    check_outcome(argv, code, out, err)


@SETTINGS
@given(prefix=TOP_LEVEL, rest=st.one_of(st.just([]), *map(command_argv, sorted(COMMANDS))))
@example(prefix=[], rest=[])
@example(prefix=["--version", "--bogus"], rest=[])
@example(prefix=["--bogus", "--version"], rest=[])
@example(prefix=["-h"], rest=["watch"])
def test_top_level_flags_exit_documented(
    prefix: list[str], rest: list[str], capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    argv = [*prefix, *rest]
    assume(all(map(can_be_an_argument, argv)))  # what this locale's command lines can hold
    check_outcome(argv, *run_in_process(argv, capsys))


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "4194305", "--interval"],  # option without a value
        ["watch", "4194305", "--once=1"],  # flag with a value
        ["watch", "4194305", "--duration", "-0"],
        ["watch", "0"],
        ["watch", "2147483648"],
        ["cpus", "--pid", "--format", "json"],  # the next option swallowed as the value
        ["recommend", "--procs", "9" * 5000],
        ["recommend", "-M2", "-M", "0"],  # repeated: the last one counts
        ["check", "--pid", "4194305", "--interval", "1e309"],
        ["check", "--procs", "1", "--threads", "1", "--json", ""],
        ["check", "--procs", "1", "--threads", "1", "--junit", "/dev/full"],
        ["check", "--margin", "nan", "--", "true"],
        ["check", "--timeout", "1e-320", "--", "true"],
        ["check", "--", "/nonexistent/oversub-no-such-command"],
        ["check", "--", "\udce9"],
        ["stress", "-M", "1", "-T", "0", "-S", "inf"],
        ["stress", "-M", "0", "-T", "1", "-S", "0.01"],
    ],
)
def test_explicit_hostile_examples(
    argv: list[str], capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    code, out, err = run_in_process(argv, capsys)
    check_outcome(argv, code, out, err)
    assert code in (ExitStatus.USAGE, ExitStatus.UNOBSERVABLE), (code, err)


@pytest.mark.integration
@pytest.mark.parametrize(
    "argv",
    [
        ["cpus", "--pid", "0"],
        ["watch"],
        ["watch", "4194305", "--interval", "nan"],
        ["recommend", "--procs", ""],
        ["bogus"],
        ["check", "--interval", "0.01", "--", "true"],
        ["check", "--procs", "1", "--threads", "1", "--json", "/nonexistent/oversub/r.json"],
        ["check", "--pid", "4194305", "--duration", "1"],
        ["stress", "--procs", "1", "--threads", "1", "--seconds", "-1"],
    ],
)
def test_in_process_harness_matches_the_real_process(
    argv: list[str], capsys: pytest.CaptureFixture[str], quiet_env: None, tmp_path: Any
) -> None:
    code, _, err = run_in_process(argv, capsys)
    real = subprocess.run(
        [*OVERSUB, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("OVERSUB_DEBUG", "COLUMNS")},
    )
    assert (real.returncode, real.stderr) == (code, err)
    check_outcome(argv, real.returncode, real.stdout, real.stderr)


def test_no_arguments_prints_help_like_the_real_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 39: `oversub` alone exited 2 with the help on stderr, as click >= 8.2 does; a
    # person asking what it does gets the help on stdout and exit 0 (pip, docker, gh).
    code, out, err = run_in_process([], capsys)
    real = subprocess.run(OVERSUB, capture_output=True, text=True, timeout=60)
    assert real.returncode == code == ExitStatus.OK
    assert (real.stderr, err) == ("", "")
    assert real.stdout == out and out.startswith("Usage: oversub [OPTIONS] COMMAND")
    assert "oversub check -- python train.py" in out


# ------------------------------------------------------- regressions found by this file


@pytest.mark.parametrize(
    "argv",
    [
        ["recommend", "--procs", "2", "--cpus", "9223372036854775807"],
        ["recommend", "--procs", "2", "--cpus", str(MAX_VCPUS + 1)],
        ["check", "--procs", "2", "--threads", "2", "--cpus", "99999999999999999999"],
    ],
)
def test_huge_cpus_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    code, _, err = run_in_process(argv, capsys)
    assert "internal error" not in err
    assert code == ExitStatus.USAGE, err


def test_largest_cpus_plans_every_process() -> None:
    # Was quadratic (minutes): now a plan for the largest N is one pass over its CPUs.
    budget = synthetic_budget(MAX_VCPUS)
    bindings = binding_plan(budget, MAX_VCPUS // 2, 2)
    assert len(bindings) == MAX_VCPUS // 2
    assert len({cpu for cpus in bindings for cpu in cpus}) == MAX_VCPUS


def test_too_long_report_name_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    argv = ["check", "--procs", "1", "--threads", "1", "--json", "x" * 300]
    code, _, err = run_in_process(argv, capsys)
    assert "internal error" not in err
    assert code == ExitStatus.USAGE, err
    assert "File name too long" in err


@pytest.mark.parametrize("path", [r"no\nsuch/r.json", r"\x1b[2J/x"])
def test_report_path_with_control_characters_is_one_escaped_error_line(
    path: str, capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    raw = path.encode().decode("unicode_escape")
    argv = ["check", "--procs", "1", "--threads", "1", "--json", raw]
    code, _, err = run_in_process(argv, capsys)
    assert code == ExitStatus.USAGE
    assert len(err.splitlines()) == 1, err
    assert path in err  # shown escaped...
    assert "\x1b" not in err  # ...never as a raw escape sequence


# ------------------------------------------------------- issue 10: numbers, paths, files


def _numeric_options() -> list[tuple[str, str]]:
    found = []
    for name in sorted(COMMANDS):
        for param in _params(name):
            numeric = isinstance(param.type, (click.IntRange, click.FloatRange))
            if isinstance(param, click.Option) and (numeric or param.callback is parse_procs):
                found.append((name, param.opts[0]))
    return found


NUMERIC_OPTIONS = _numeric_options()


@pytest.mark.parametrize("value", ["\u0661", "\u0664", "\u0661\u0660", "1_0", " 1", "\uff11"])
@pytest.mark.parametrize(("name", "option"), NUMERIC_OPTIONS, ids=lambda x: str(x))
def test_numbers_are_ascii_digits_only(
    name: str, option: str, value: str, capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    # int() and float() take "٤" (ARABIC-INDIC DIGIT FOUR) for 4, "1_0" for 10, " 2" for 2:
    # `--procs ٤` was accepted as 4.
    argv = [name, *(["4194305"] if name == "watch" else []), option, value]
    code, _, err = run_in_process(argv, capsys)
    assert code == ExitStatus.USAGE, (argv, err)
    assert option in err and len(err.splitlines()) == 1, err
    assert "not a whole number" in err or "not a decimal number" in err, err  # refused as such


def test_every_numeric_option_is_covered() -> None:
    names = {option for _, option in NUMERIC_OPTIONS}
    assert {"--procs", "--threads", "--interval", "--duration", "--margin", "--cpus"} <= names
    assert len(NUMERIC_OPTIONS) >= 25, NUMERIC_OPTIONS


@pytest.mark.parametrize("argv", [["watch", "\u0664\u0662"], ["watch", "\u0664"]])
def test_pid_argument_is_ascii_digits_only(
    argv: list[str], capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    code, _, err = run_in_process(argv, capsys)
    assert code == ExitStatus.USAGE, err


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown"])
def test_empty_report_path_is_named_as_such(
    flag: str, capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    # `--json ''` said ".: is a directory".
    code, _, err = run_in_process(["check", "-M", "1", "-T", "1", flag, ""], capsys)
    assert code == ExitStatus.USAGE
    assert "empty path" in err and "directory" not in err, err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["watch", "4194305", "--interval", "1e308", "--duration", "0.5"], "--interval"),
        (["watch", "4194305", "--interval", "3601"], "--interval"),
        (["check", "--interval", "1e6", "--", "true"], "--interval"),
        (["stress", "--procs", "100000", "--threads", "1"], "--procs"),
        (["stress", "--procs", "1", "--threads", "100000"], "--threads"),
        (["stress", "--procs", "1", "--threads", "1", "--idle", "5000"], "--idle"),
        (["stress", "--procs", "200", "--threads", "1000"], "16,384 threads"),
    ],
)
def test_intervals_and_stress_sizes_have_upper_bounds(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str], quiet_env: None
) -> None:
    code, _, err = run_in_process(argv, capsys)
    assert code == ExitStatus.USAGE, err
    assert needle in err


def _pyproject(kind: str, where: Any) -> None:
    path = where / "pyproject.toml"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        path.write_text("# padding\n" * 120_000 + "[tool.oversub]\nmargin = 0.2\n")
    elif kind == "nested":
        path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    elif kind == "directory":
        path.mkdir()
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("dev-zero", "not a regular file"),  # grew memory without bound
        ("fifo", "not a regular file"),  # hung forever
        ("huge", "larger than"),
        ("nested", "nested too deeply"),  # internal error: RecursionError
        ("directory", "not a regular file"),
    ],
)
@pytest.mark.parametrize("command", ["watch", "check"])
def test_unreadable_pyproject_is_a_usage_error_with_its_reason(
    kind: str,
    reason: str,
    command: str,
    capsys: pytest.CaptureFixture[str],
    quiet_env: None,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _pyproject(kind, tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["watch", "4194305"] if command == "watch" else ["check", "--pid", "4194305"]
    with _alarm(argv):
        code, _, err = run(argv, capsys)
    assert code == ExitStatus.USAGE, err
    assert "pyproject.toml" in err and reason in err, err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("special", ["fifo", "/dev/null", "socket"])
def test_report_path_that_is_not_a_regular_file_is_refused_up_front(
    special: str, capsys: pytest.CaptureFixture[str], quiet_env: None, tmp_path: Any
) -> None:
    # A FIFO passed the pre-check and then hung forever when the report was written.
    path = str(tmp_path / "r.json")
    if special == "fifo":
        os.mkfifo(path)
    elif special == "socket":
        import socket

        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.close()  # the socket file stays
    else:
        path = special
    argv = ["check", "-M", "1", "-T", "1", "--json", path]
    code, _, err = run_in_process(argv, capsys)
    assert code == ExitStatus.USAGE, err
    assert "not a regular file" in err
