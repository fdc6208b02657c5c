"""Output hardening against the real CLI: a shell pipeline whose reader leaves early,
`NO_COLOR` and `TERM=dumb` on a real pseudo-terminal, and a 40-column terminal.

What oversub promises (docs/guarantees.md, "Exit codes"; docs/cli.md, "Output"): no
traceback when the reader of stdout leaves, exit 0 then (`check` keeps its verdict code,
since its report is on stderr); colour and live redraw only on a terminal; `NO_COLOR`
honoured. rich decides colour and redraw from the Console that `oversub.cli.output.make_console`
builds per invocation: `NO_COLOR` drops colours but keeps bold/dim, and `TERM=dumb` drops
every style and turns `Live` non-interactive (no cursor movement: only the last frame is
printed).

Every child runs in a session of its own and its whole group is killed when the test ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.cells import cell_len

from oversub.analysis.plans import threads_for
from oversub.core.errors import ExitStatus
from oversub.probe.budget import read_budget
from tests.support.harness import OVERSUB

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
"""Upper bound for any one command: generous, since two vCPUs are shared with other jobs."""

# A quiet target with a known thread count: the main thread and two idle ones.
TARGET_THREADS = 3
TARGET = (
    "import threading, time\n"
    "stop = threading.Event()\n"
    "for _ in range(2):\n"
    "    threading.Thread(target=stop.wait, daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)

# Variables through which rich (or a terminal) could change colour and width decisions.
_TERMINAL_VARS = (
    "NO_COLOR",
    "FORCE_COLOR",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "COLUMNS",
    "LINES",
    "TERM",
    "COLORTERM",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
    "OVERSUB_DEBUG",
)

_CSI = re.compile(r"\x1b\[([0-9;?]*)([@-~])")
_SGR_COLOUR = {*range(30, 50), *range(90, 98), *range(100, 108)}
"""SGR parameters that set a colour: 30-39 / 40-49 (incl. 38/48 extended), 90-97, 100-107."""
_CURSOR_FINALS = set("ABCDEFGHJKSTfsu")
"""CSI finals that move the cursor or erase: what a live redraw is made of."""
_VERDICT = re.compile(r"\b(OK|AT-RISK|STARVED|OVERSUBSCRIBED)\b")


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _TERMINAL_VARS}
    env.update(overrides)
    return env


@pytest.fixture(scope="module")
def target() -> Iterator[int]:
    """A quiet three-thread process for `watch` and `check --pid`; its group dies at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TARGET], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT_S)
        assert ready and proc.stdout.readline() == b"ready\n"
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(scope="module")
def vcpus(target: int) -> int:
    return read_budget(target).vcpus


# --------------------------------------------------------------------- A. closed pipe


@dataclass(frozen=True)
class Piped:
    status: int
    """oversub's own exit status (`${PIPESTATUS[0]}`), not the reader's."""
    read: list[str]
    """What the reader printed (`head -n 1`: the first line, maybe blank)."""
    stderr: str


def _pipeline(args: list[str], reader: str = "head -n 1") -> Piped:
    """`oversub ARGS | READER` in bash; bash, oversub and the reader share a new session."""
    script = f'"$@" | {reader}; echo "oversub-status=${{PIPESTATUS[0]}}"'
    shell = subprocess.Popen(
        ["bash", "-c", script, "bash", *OVERSUB, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = shell.communicate(timeout=TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(timeout=30)
    lines = out.splitlines()
    assert lines and lines[-1].startswith("oversub-status="), (out, err)
    return Piped(int(lines[-1].split("=", 1)[1]), lines[:-1], err)


def _no_crash(err: str) -> None:
    for word in ("Traceback", "BrokenPipe", "Exception ignored", "internal error"):
        assert word not in err, err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # Not a terminal: one JSON line per interval; the second write meets a closed pipe.
        (["watch", "{pid}", "--interval", "0.2"], ExitStatus.OK),
        (
            ["watch", "{pid}", "--format", "json", "--duration", "1", "--interval", "0.5"],
            ExitStatus.OK,
        ),
        # check reports on stderr; an idle target is below --fail-on, so 0.
        (["check", "--pid", "{pid}", "--duration", "3", "--interval", "0.5"], ExitStatus.OK),
        (["cpus"], ExitStatus.OK),
        (["recommend", "--procs", "4"], ExitStatus.OK),
    ],
    ids=["watch", "watch-json", "check-pid", "cpus", "recommend"],
)
def test_pipeline_reader_leaves_after_one_line(target: int, args: list[str], expected: int) -> None:
    piped = _pipeline([a.replace("{pid}", str(target)) for a in args])
    assert piped.status == expected, piped.stderr
    _no_crash(piped.stderr)
    if args[0] != "check":  # check writes its report to stderr: the reader sees nothing
        assert len(piped.read) == 1, piped


def _to_closed_pipe(args: list[str]) -> tuple[int, str]:
    """Run oversub with stdout on a pipe whose reader is gone before oversub starts, so the
    first write meets EPIPE whatever the timing; return (exit status, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.Popen(
            [*OVERSUB, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    return proc.returncode, err


@pytest.mark.parametrize(
    "args",
    [
        # ndjson (the default on a pipe) and cpus --format json are written by oversub itself
        # (the JSON case is test_cli.py::test_stdout_closed_by_reader_exits_0).
        pytest.param(["watch", "{pid}", "--interval", "0.2"], id="watch-ndjson"),
        # Text formats are written by a rich Console.
        pytest.param(["cpus"], id="cpus-text"),
        pytest.param(["recommend", "--procs", "4"], id="recommend-text"),
        pytest.param(
            ["watch", "{pid}", "--format", "live", "--duration", "1", "--interval", "0.5"],
            id="watch-live",
        ),
    ],
)
def test_reader_gone_before_the_first_byte_exits_0(target: int, args: list[str]) -> None:
    code, err = _to_closed_pipe([a.replace("{pid}", str(target)) for a in args])
    assert code == ExitStatus.OK, err
    _no_crash(err)


# --------------------------------------------------------------------- pseudo-terminal


@dataclass(frozen=True)
class OnTerminal:
    code: int
    raw: str
    """Everything written to the terminal (stdout and stderr), escape sequences included."""

    def colour_sgr(self) -> list[str]:
        found = []
        for params, final in _CSI.findall(self.raw):
            if final == "m" and any(
                p.isdigit() and int(p) in _SGR_COLOUR for p in params.split(";")
            ):
                found.append(params)
        return found

    def cursor_moves(self) -> list[str]:
        moves = [p + f for p, f in _CSI.findall(self.raw) if f in _CURSOR_FINALS]
        moves += [p + f for p, f in _CSI.findall(self.raw) if p.startswith("?")]  # ?25l, ?1049h
        return moves

    def lines(self) -> list[str]:
        """Rows as the terminal shows them: escapes stripped; \\r starts a row again."""
        plain = _CSI.sub("", self.raw).replace("\x1b", "")
        return re.split(r"[\r\n]+", plain)

    def text(self) -> str:
        """All words, whitespace (and line wrapping) collapsed to single spaces."""
        return " ".join(" ".join(self.lines()).split())


def _on_terminal(args: list[str], env: dict[str, str], *, columns: int = 100) -> OnTerminal:
    """Run oversub with stdin, stdout and stderr on a new pty of `columns` x 60."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    try:
        proc = subprocess.Popen(
            [*OVERSUB, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
    finally:
        os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the slave side
                break
            if not chunk:
                break
            out += chunk
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        os.close(master)
    return OnTerminal(code, out.decode("utf-8", "replace"))


# What each command prints on a terminal, and the code it exits with. Every one of them
# colours something when colour is allowed (verdict banner, "◀ binds", export lines, ...).
COMMANDS = {
    "watch": (["watch", "{pid}", "--duration", "1.5", "--interval", "0.5"], ExitStatus.OK),
    "cpus": (["cpus"], ExitStatus.OK),
    "recommend": (["recommend", "--procs", "4"], ExitStatus.OK),
    "check-static": (["check", "--procs", "4", "--threads", "4", "--cpus", "2"], ExitStatus.FOUND),
}


def _command(name: str, pid: int) -> tuple[list[str], int]:
    args, code = COMMANDS[name]
    return [a.replace("{pid}", str(pid)) for a in args], int(code)


# --------------------------------------------------------------------- B. NO_COLOR, TERM=dumb


@pytest.mark.parametrize("name", list(COMMANDS))
def test_terminal_gets_colour_by_default(target: int, name: str) -> None:
    # The control case: without it the two tests below could pass on output never coloured.
    args, code = _command(name, target)
    run = _on_terminal(args, _env(TERM="xterm-256color"))
    assert run.code == code, run.raw
    assert run.colour_sgr(), run.raw
    if name == "watch":
        assert run.cursor_moves(), "the live view should redraw on a terminal"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_color_drops_every_colour(target: int, name: str) -> None:
    args, code = _command(name, target)
    run = _on_terminal(args, _env(TERM="xterm-256color", NO_COLOR="1"))
    assert run.code == code, run.raw
    assert run.colour_sgr() == [], run.raw
    if name in ("watch", "check-static"):
        assert _VERDICT.search(run.text()), run.raw  # the banner keeps its word


@pytest.mark.parametrize("name", list(COMMANDS))
def test_dumb_terminal_gets_no_colour_and_no_redraw(target: int, name: str) -> None:
    args, code = _command(name, target)
    run = _on_terminal(args, _env(TERM="dumb"))
    assert run.code == code, run.raw
    assert run.colour_sgr() == [], run.raw
    assert run.cursor_moves() == [], run.raw
    if name == "watch":
        assert "oversub summary" in run.text(), run.raw


# --------------------------------------------------------------------- C. 40 columns

NARROW = 40


def _narrow(args: list[str]) -> OnTerminal:
    return _on_terminal(args, _env(TERM="xterm-256color", COLUMNS=str(NARROW)), columns=NARROW)


def _too_wide(run: OnTerminal) -> list[str]:
    return [line for line in run.lines() if cell_len(line) > NARROW]


def _verdict_lines_readable(run: OnTerminal) -> list[str]:
    verdicts = [line for line in run.lines() if _VERDICT.search(line)]
    assert verdicts, run.raw
    assert not [line for line in verdicts if "…" in line], verdicts
    return verdicts


def test_narrow_watch_live_view_and_summary(target: int, vcpus: int) -> None:
    args, code = _command("watch", target)
    run = _narrow(args)
    assert run.code == code, run.raw
    assert _too_wide(run) == [], run.raw
    text = run.text()
    assert "oversub watch" in text and "oversub summary" in text, run.raw
    assert len(_verdict_lines_readable(run)) >= 2, run.raw  # a live frame and the summary
    assert f"N = {vcpus} usable vCPUs" in text, run.raw
    assert re.search(rf"\b\d+/{TARGET_THREADS}\b", text), run.raw  # active/threads column
    assert f"{TARGET_THREADS} threads" in text, run.raw  # the totals line of the summary


def test_narrow_cpus(vcpus: int) -> None:
    run = _narrow(["cpus"])
    assert run.code == ExitStatus.OK, run.raw
    assert _too_wide(run) == [], run.raw
    assert f"N = {vcpus} usable vCPUs" in run.text(), run.raw


def test_narrow_recommend(vcpus: int) -> None:
    from oversub.analysis.plans import thread_env
    from oversub.render.plan_formats import prefix_line
    from oversub.render.plan_text import code_lines_for

    run = _narrow(["recommend", "--procs", "4"])
    assert run.code == ExitStatus.OK, run.raw
    t = threads_for(vcpus, 4)
    # Text wraps; code to paste never does (issue 39): a longer line is printed whole.
    code = {
        *code_lines_for(t),
        f"{prefix_line(thread_env(t)).strip()} python job.py",
        "env $(oversub recommend --procs 4 --format prefix) python job.py",
    }
    wide = [line for line in _too_wide(run) if line.strip() not in code]
    assert [line for line in wide if not re.match(r"process \d+: taskset -c ", line)] == []
    text = run.text()
    assert f"N = {vcpus} usable vCPUs" in text, run.raw
    assert f"export OMP_NUM_THREADS={t}" in text, run.raw
    assert f"torch.set_num_threads({t})" in text, run.raw


def test_narrow_check_static_keeps_its_facts() -> None:
    run = _narrow(["check", "--procs", "4", "--threads", "4", "--cpus", "2"])
    assert run.code == ExitStatus.FOUND, run.raw
    text = run.text()
    assert "OVERSUBSCRIBED" in text, run.raw
    _verdict_lines_readable(run)
    assert "N = 2 usable vCPUs" in text, run.raw
    assert "4 threads" in text and "16 threads" in text, run.raw
    assert "exit 1" in text, run.raw


def test_narrow_check_static_fits_40_columns() -> None:
    run = _narrow(["check", "--procs", "4", "--threads", "4", "--cpus", "2"])
    assert run.code == ExitStatus.FOUND, run.raw
    assert _too_wide(run) == [], run.raw


# ------------------------------------------------ untrusted text and unusual streams

FORGED = "8\x1b]0;x\x07\x1b[2J\n::error::forged\noversub check: pass <script>alert(1)</script>"
"""A thread-variable value that sets the terminal title, clears the screen, forges a GitHub
workflow command and a verdict line, and carries HTML."""
HOSTILE_COMM = b"\x1b[2J\x1b]0;x\x07<s>"
"""A process name (15 bytes at most) that clears the screen and sets the title."""

# Pinned to one CPU by the test: three busy threads oversubscribe it, so there are findings,
# and with libgomp mapped the fix names OMP_NUM_THREADS and its value.
HOSTILE_TARGET = f"""
import ctypes, hashlib, threading, time
try:
    ctypes.CDLL("libgomp.so.1")
except OSError:
    pass
with open("/proc/self/comm", "wb") as comm:
    comm.write({HOSTILE_COMM!r})
def busy():
    buffer, digest = bytes(1 << 20), hashlib.sha256()
    while True:
        digest.update(buffer)
for _ in range(3):
    threading.Thread(target=busy, daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


def _pin_one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _raw_controls(text: str) -> list[str]:
    """Control characters other than the line breaks of the output's own lines."""
    return sorted({c for c in text if c in "\x1b\x07\r" or ("\x00" <= c < " " and c != "\n")})


def test_untrusted_names_and_variables_reach_no_sink_raw(tmp_path: Path) -> None:
    env = {**_env(), "OMP_NUM_THREADS": FORGED, "OMP_PLACES": "{0}," * 30_000}
    target = subprocess.Popen(
        [sys.executable, "-c", HOSTILE_TARGET],
        stdout=subprocess.PIPE,
        env=env,
        preexec_fn=_pin_one_cpu,
        start_new_session=True,
    )
    runs: list[subprocess.Popen[bytes]] = []
    try:
        assert target.stdout is not None
        ready, _, _ = select.select([target.stdout], [], [], TIMEOUT_S)
        assert ready and target.stdout.readline() == b"ready\n"
        pid = str(target.pid)
        sampled = ["--duration", "1.5", "--interval", "0.5"]
        ci = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "step.md")}
        reports = ["--json", "r.json", "--markdown", "r.md"]
        for name, args, extra in (
            ("check", ["check", "--pid", pid, *sampled, *reports], ci),
            ("ndjson", ["watch", pid, *sampled, "--format", "ndjson"], {}),
        ):
            with (
                open(tmp_path / f"{name}.out", "wb") as out,
                open(tmp_path / f"{name}.err", "wb") as err,
            ):
                runs.append(
                    subprocess.Popen(
                        [*OVERSUB, *args],
                        stdout=out,
                        stderr=err,
                        cwd=tmp_path,
                        env={**_env(), **extra},
                        start_new_session=True,
                    )
                )
        live = _on_terminal(["watch", pid, *sampled], _env(TERM="xterm-256color"), columns=200)
        codes = [run.wait(timeout=TIMEOUT_S) for run in runs]
    finally:
        for proc in (target, *runs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if target.stdout is not None:
            target.stdout.close()

    check_err = (tmp_path / "check.err").read_text()
    assert codes[0] in (0, 1) and codes[1] == 0, check_err
    # The CI log: every line is oversub's own; a forged command or verdict never starts one.
    lines = check_err.splitlines()
    assert _raw_controls(check_err) == [], check_err
    assert not [x for x in lines if x.startswith(("::error::forged", "oversub check: pass <"))]
    assert [x for x in lines if x.startswith("::")] == [
        x for x in lines if x.startswith(("::error title=", "::warning title="))
    ]
    # Markdown: no raw HTML or escape sequence, and bounded (the 120 kB variable is cut).
    for name in ("r.md", "step.md"):
        md = (tmp_path / name).read_text()
        assert "<script>" not in md and "<s>" not in md and _raw_controls(md) == [], name
        assert len(md) < 16_000, name
    # JSON keeps the values (JSON escapes them), bounded at the probe.
    report = json.loads((tmp_path / "r.json").read_text())
    (watched,) = [p for p in report["processes"] if p["pid"] == target.pid]
    assert watched["name"] == HOSTILE_COMM.decode()
    assert watched["thread_env"]["OMP_NUM_THREADS"] == FORGED
    assert len(watched["thread_env"]["OMP_PLACES"]) == 128
    for line in (tmp_path / "ndjson.out").read_text().splitlines():
        assert len(line) < 16_000  # was 1 MB per line with a 1 MB variable
    # The terminal: rich's own sequences only; the target's are shown, never obeyed.
    assert live.code == 0, live.raw[-2000:]
    assert "\x1b]0;x" not in live.raw and "\x1b[2J" not in live.raw and "\x07" not in live.raw
    assert "\\x1b]0;x\\x07" in live.text()


def test_full_stdout_is_one_error_line_and_exit_3(target: int) -> None:
    # `oversub cpus > /dev/full` was an internal error.
    for args in (["cpus"], ["cpus", "--format", "json"], ["watch", str(target), "--once"]):
        with open("/dev/full", "w") as full:
            run = subprocess.run(
                [*OVERSUB, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
            )
        assert run.returncode == ExitStatus.UNOBSERVABLE, (args, run.stderr)
        assert run.stderr == "oversub: error: cannot write to stdout: No space left on device\n"


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_json_on_a_narrow_stdout_is_valid_json(encoding: str, tmp_path: Path) -> None:
    # JSON to a Latin-1 stdout got the stream's stand-ins inside its strings (`\U0001f600`,
    # a plain `"` for a curly quote): invalid JSON. Every JSON format goes through one writer
    # (serialize.to_json), which escapes what such a stream cannot encode.
    hostile = "😀x “q” é"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", hostile], start_new_session=True
    )
    recording = tmp_path / f"{hostile}.ndjson"  # diff's JSON names its files
    env = _env(PYTHONIOENCODING=encoding)
    try:
        watch = ["watch", str(proc.pid), "--duration", "1", "--interval", "0.5"]
        outputs = {
            "ndjson": [*watch, "--format", "ndjson", "--record", str(recording)],
            "json": [*watch, "--format", "json"],
        }
        printed = {
            name: subprocess.run([*OVERSUB, *args], capture_output=True, env=env, timeout=60)
            for name, args in outputs.items()
        }
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for args in (["report", str(recording)], ["diff", str(recording), str(recording)]):
        printed[args[0]] = subprocess.run(
            [*OVERSUB, *args, "--format", "json"], capture_output=True, env=env, timeout=60
        )
    for name, run in printed.items():
        assert run.returncode == 0, (name, run.stderr)
        assert run.stdout.isascii(), name
        text = run.stdout.decode(encoding)
        lines = text.splitlines() if name == "ndjson" else [text]
        documents = [json.loads(line) for line in lines]
        assert hostile in json.dumps(documents, ensure_ascii=False), name


def test_ascii_only_streams_get_ascii_stand_ins(target: int) -> None:
    # PYTHONIOENCODING=ascii made `cpus` ("◀ binds", "µs") and the live view ("·", "…")
    # internal errors.
    env = _env(PYTHONIOENCODING="ascii")
    run = subprocess.run([*OVERSUB, "cpus"], capture_output=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.isascii() and b"< binds" in run.stdout
    live = _on_terminal(
        ["watch", str(target), "--duration", "1", "--interval", "0.5"],
        _env(PYTHONIOENCODING="ascii", TERM="xterm-256color"),
    )
    assert live.code == 0, live.raw[-2000:]
    assert live.raw.isascii() and "oversub watch - pid" in live.text()
