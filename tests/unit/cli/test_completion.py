"""Shell completion: the scripts for bash, zsh and fish, and real shells completing with them.

The answers click gives (`_OVERSUB_COMPLETE=<shell>_complete`) are checked in-process; the
real-shell tests load `oversub completion SHELL` into bash, zsh and fish and let the shell
complete a word through the installed console script (`oversub.launch:main`, which calls
click with standalone_mode=False), as a user's shell would. `make test` installs zsh and
fish where it can; where one is missing, its test skips and says so.
"""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.harness import run_cli as run

SCRIPT = Path(sys.executable).with_name("oversub")
"""The console script pip installed beside this interpreter."""
COMMANDS = sorted(
    [
        "check",
        "completion",
        "cpus",
        "diff",
        "doctor",
        "merge",
        "recommend",
        "report",
        "run",
        "serve",
        "stress",
        "tune",
        "watch",
    ]
)

needs_script = pytest.mark.skipif(
    not SCRIPT.exists(), reason=f"no oversub console script at {SCRIPT} (pip install -e .)"
)


def _shell_env(home: Path) -> dict[str, str]:
    """The console script first on PATH, a scratch HOME, no completion request inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("_OVERSUB_COMPLETE")}
    env.update(PATH=f"{SCRIPT.parent}{os.pathsep}{env.get('PATH', '')}", HOME=str(home))
    return env


def _needs(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed (make test installs it with apt-get as root)")
    return path


# -- the script -----------------------------------------------------------------------------

MARKERS = {
    "bash": "complete -o nosort -F _oversub_completion oversub",
    "zsh": "compdef _oversub_completion oversub",
    "fish": "complete --no-files --command oversub",
}


@pytest.mark.parametrize("shell", sorted(MARKERS))
def test_completion_prints_the_script_for_each_shell(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["completion", shell], capsys)
    assert code == 0
    assert MARKERS[shell] in out
    assert "_OVERSUB_COMPLETE=" in out  # it calls oversub back for the words
    assert out.endswith("\n")


@needs_script
@pytest.mark.parametrize("shell", sorted(MARKERS))
def test_command_and_environment_variable_give_the_same_script(shell: str, tmp_path: Path) -> None:
    env = _shell_env(tmp_path)
    by_command = subprocess.run(
        [str(SCRIPT), "completion", shell], env=env, capture_output=True, text=True
    )
    by_variable = subprocess.run(
        [str(SCRIPT)],
        env={**env, "_OVERSUB_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
    )
    assert by_command.returncode == by_variable.returncode == 0, by_variable.stderr
    assert by_command.stdout == by_variable.stdout


def test_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["completion", "tcsh"], capsys)
    assert code == 2
    assert err.startswith("oversub: error: ") and "'tcsh' is not one of" in err


def test_completion_alone_shows_how_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["completion"], capsys)
    assert code == 2
    assert err.startswith("Usage: oversub completion [OPTIONS] SHELL")
    assert 'eval "$(oversub completion bash)"' in err


# -- click's answers (what every script asks for) -------------------------------------------


def _answers(
    words: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[tuple[str, str]]:
    """(type, value) pairs that `oversub` gives bash for the line `words` (cursor at end)."""
    parts = words.split(" ")
    monkeypatch.setenv("_OVERSUB_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(parts) - 1))
    code, out, err = run([], capsys)
    assert code == 0, err
    return [tuple(line.split(",", 1)) for line in out.splitlines()]  # type: ignore[misc]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("oversub ", COMMANDS),
        ("oversub re", ["recommend", "report"]),
        ("oversub rec", ["recommend"]),
        ("oversub c", ["check", "completion", "cpus"]),
        ("oversub cpus --f", ["--format"]),
        ("oversub recommend --format ", ["text", "json", "env", "prefix"]),
        ("oversub watch 1 --format ", ["live", "ndjson", "json"]),
        ("oversub check --fail-on ", ["costly", "oversubscribed", "starved", "at-risk"]),
        ("oversub completion ", ["bash", "zsh", "fish"]),
        ("oversub completion f", ["fish"]),
    ],
)
def test_words_complete(
    words: str,
    expected: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = _answers(words, monkeypatch, capsys)
    assert [value for kind, value in answers if kind == "plain"] == expected


def test_report_paths_complete_as_files(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ("file", "") in _answers("oversub check --json ", monkeypatch, capsys)


def test_completion_runs_no_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Completing `oversub stress ... ` must not start the workload (nor any probe)."""
    monkeypatch.setattr("oversub.run.stressroot.run_stress", lambda *a: pytest.fail("stress ran"))
    assert _answers("oversub stress --procs 1 --threads 1 --s", monkeypatch, capsys) == [
        ("plain", "--seconds")
    ]


# -- real shells ----------------------------------------------------------------------------


@needs_script
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["oversub", "rec"], ["recommend"]),
        (["oversub", "recommend", "--format", ""], ["text", "json", "env", "prefix"]),
        (["oversub", "completion", "z"], ["zsh"]),
    ],
)
def test_bash_completes_through_the_console_script(
    words: list[str], expected: list[str], tmp_path: Path
) -> None:
    bash = _needs("bash")
    words_array = " ".join(f"'{w}'" for w in words)
    script = (
        'eval "$(oversub completion bash)"\n'
        'complete -p oversub >/dev/null || { echo "not registered" >&2; exit 9; }\n'
        f"COMP_WORDS=({words_array}); COMP_CWORD={len(words) - 1}\n"
        "_oversub_completion oversub\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", script],
        env=_shell_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == expected


@needs_script
def test_fish_completes_through_the_console_script(tmp_path: Path) -> None:
    fish = _needs("fish")
    script = (
        "oversub completion fish | source\n"
        'complete -C "oversub rec"\n'
        "echo ===\n"
        'complete -C "oversub recommend --format "\n'
    )
    done = subprocess.run(
        [fish, "--no-config", "-c", script],
        env=_shell_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("===\n")
    assert [line.split("\t")[0] for line in first.splitlines()] == ["recommend"]
    assert sorted(second.split()) == ["env", "json", "prefix", "text"]


ZSHRC = """\
PS1='READY> '
autoload -U compinit && compinit -u -D
eval "$(oversub completion zsh)"
_dump_buffer() { print -r -- "$BUFFER" > "$DUMP" }
zle -N _dump_buffer
bindkey '^X' _dump_buffer
"""


def _zsh_line_after_tab(zsh: str, typed: str, home: Path) -> str:
    """Type `typed`, press Tab, and return the command line zsh's completion left."""
    (home / ".zshrc").write_text(ZSHRC)
    dump = home / "buffer"
    env = {**_shell_env(home), "ZDOTDIR": str(home), "DUMP": str(dump), "TERM": "xterm"}
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [zsh, "-i"], stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30  # a bound for a stuck shell, not a timing claim
        sent = False
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break  # the shell exited
            if not sent and b"READY> " in seen:
                os.write(master, typed.encode() + b"\t\x18")  # Tab, then Ctrl-X dumps
                sent = True
            if dump.exists() and dump.read_text().endswith("\n"):
                return dump.read_text().rstrip("\n")
        raise AssertionError(f"zsh left no command line; it printed {seen[-2000:]!r}")
    finally:
        proc.kill()
        proc.wait()
        os.close(master)


@needs_script
@pytest.mark.parametrize(
    ("typed", "line"),
    [
        ("oversub rec", "oversub recommend "),
        ("oversub recommend --format e", "oversub recommend --format env "),
        ("oversub completion fi", "oversub completion fish "),
    ],
)
def test_zsh_completes_through_the_console_script(typed: str, line: str, tmp_path: Path) -> None:
    zsh = _needs("zsh")
    assert _zsh_line_after_tab(zsh, typed, tmp_path) == line
