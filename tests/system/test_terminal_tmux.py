"""The terminal as a person sees it: oversub inside tmux, read back with capture-pane.

A pty recording (test_output_hardening) holds every byte, frames that were later erased
included; what a person reads is the screen the bytes leave behind. tmux keeps that screen
(and its scroll-back), so these tests look at it: after `watch` ends only the summary's
verdict is on the screen (issue 11 item 4); a live frame names the processes, says
"active/total" and shows the pools' sizing variables (item 14); `check` draws one status
line while it runs and erases it before the report (item 15).

Each test uses a tmux server of its own (`-L`), which it kills at the end, and every
process it starts runs inside that server's pane, so killing the server ends them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.harness import OVERSUB

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("tmux") is None, reason="tmux is not installed (make test installs it)"
    ),
]

WAIT_S = 90.0
"""Bound on every wait (a run takes seconds); never asserted as a time."""
DONE = "__oversub_test_done__"
VCPUS = len(os.sched_getaffinity(0))
BANNER = re.compile(r"^ ?(OK|AT-RISK|STARVED|OVERSUBSCRIBED|NOT JUDGED) ", re.MULTILINE)


@dataclass
class Pane:
    server: str

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.server, *args], capture_output=True, text=True, timeout=30
        ).stdout

    def screen(self) -> str:
        """The visible screen and the whole scroll-back above it."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")

    def visible(self) -> list[str]:
        """The rows of the screen as a person sees them now, without the scroll-back."""
        return self.tmux("capture-pane", "-p", "-t", "t").rstrip("\n").split("\n")

    def wait_for(self, found: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            text = self.screen()
            if found(text):
                return text
            time.sleep(0.2)
        raise AssertionError(f"not seen within {WAIT_S} s:\n{self.screen()}")


@pytest.fixture
def pane() -> Iterator[Callable[..., Pane]]:
    servers: list[str] = []

    def start(command: str, width: int = 100, height: int = 50) -> Pane:
        server = f"oversub-test-{uuid.uuid4().hex[:8]}"
        servers.append(server)
        script = f"{command}; echo {DONE} $?; sleep 600"
        env = {**os.environ, "TERM": "xterm-256color"}
        env.pop("NO_COLOR", None)
        env.pop("COLUMNS", None)
        subprocess.run(
            [
                "tmux",
                "-L",
                server,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                str(width),
                "-y",
                str(height),
                "sh",
                "-c",
                script,
            ],
            check=True,
            timeout=30,
            env=env,
        )
        return Pane(server)

    yield start
    for server in servers:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=30)


def stress(procs: int, threads: int, seconds: float) -> str:
    return shlex.join(
        [
            *OVERSUB,
            "stress",
            "--procs",
            str(procs),
            "--threads",
            str(threads),
            "--seconds",
            str(seconds),
            "--mode",
            "hash",
        ]
    )


def test_after_watch_the_screen_holds_one_verdict(pane: Callable[[str, int], Pane]) -> None:
    # Issue 11 item 4: the last frame said "OK ... No findings." with exited workers
    # unmarked, right above a summary that said OVERSUBSCRIBED.
    command = (
        f"{stress(2, max(2, VCPUS), 4)} 2>/dev/null & {shlex.join(OVERSUB)} watch $! --interval 0.5"
    )
    p = pane(command, 100)
    text = p.wait_for(lambda screen: DONE in screen)
    assert "oversub summary" in text, text
    assert "oversub watch ·" not in text, text  # the last frame was erased
    assert len(BANNER.findall(text)) == 1, text
    assert "(exited)" in text, text  # the workers ended before the root


def test_a_live_frame_tells_processes_apart(pane: Callable[[str, int], Pane]) -> None:
    # Issue 11 item 14: every row said "python"; "Threads 2/3" without saying which is which.
    command = (
        f"{stress(2, 1, 6)} 2>/dev/null & "
        f"{shlex.join(OVERSUB)} watch $! --interval 0.5 --duration 4"
    )
    p = pane(command, 120)
    frame = p.wait_for(lambda screen: screen.count("spawn worker") >= 2)
    assert "active/total" in frame, frame
    assert "resource tracker" in frame, frame
    assert "python -m oversub stress --procs 2" in frame, frame
    p.wait_for(lambda screen: DONE in screen)


def test_a_live_frame_shows_demand_against_n_over_the_last_minute(
    pane: Callable[[str, int], Pane],
) -> None:
    # Issue 14 item 4: a trend, not a snapshot. The sparkline grows by a column per interval.
    command = (
        f"{stress(1, max(2, VCPUS) + 1, 8)} 2>/dev/null & "
        f"{shlex.join(OVERSUB)} watch $! --interval 0.5 --duration 5"
    )
    p = pane(command, 120)

    def columns(screen: str) -> int:
        line = next((x for x in screen.splitlines() if "demand, last 60 s" in x), "")
        return sum(line.count(block) for block in "▁▂▃▄▅▆▇█") - line.count("= N")

    frame = p.wait_for(lambda screen: columns(screen) >= 4)
    assert "on N = " in frame and "red: above N" in frame, frame
    p.wait_for(lambda screen: DONE in screen)


def test_check_draws_a_status_line_then_erases_it(pane: Callable[[str, int], Pane]) -> None:
    # Issue 11 item 15: check printed nothing until the command ended.
    command = f"{shlex.join(OVERSUB)} check --interval 0.5 -- {stress(1, 1, 4)}"
    p = pane(command, 100)
    status = re.compile(r"oversub check: \d+ s · \d+ samples? · demand \d+\.\d\d on N = \d+ · now ")
    running = p.wait_for(lambda screen: bool(status.search(screen)))
    assert "oversub check: started pid " in running, running
    done = p.wait_for(lambda screen: DONE in screen)
    assert not status.search(done), done  # erased before the report
    assert "oversub check: pass: verdict" in done or "oversub check: FAIL" in done, done


def test_check_status_never_meets_the_commands_output(pane: Callable[[str, int], Pane]) -> None:
    """Issue 20: CMD's output after the status line was glued to it ("now
    oversubscribedtotal 82845113"), and erasing the status erased CMD's unfinished line."""
    job = (
        'sleep 1; i=0; while [ $i -lt 8 ]; do i=$((i+1)); printf "total %d" $i; sleep 0.4; '
        'printf " done\\n"; done'
    )
    p = pane(f"{shlex.join(OVERSUB)} check --interval 0.3 -- sh -c {shlex.quote(job)}", 100)
    status = re.compile(r"^oversub check: \d+ s · \d+ samples? · demand ")
    visible = p.wait_for(
        lambda _: bool(status.search(p.tmux("capture-pane", "-p", "-t", "t").splitlines()[-1]))
    )
    assert visible  # the status line held the bottom row while CMD ran
    bottom = p.tmux("capture-pane", "-p", "-t", "t").splitlines()[-1]
    assert status.search(bottom), bottom
    done = p.wait_for(lambda screen: DONE in screen)
    lines = done.splitlines()
    assert [line for line in lines if line.startswith("total ")] == [
        f"total {i} done" for i in range(1, 9)
    ], done
    assert not any("total" in line and "oversub check:" in line for line in lines), done
    assert not status.search(done.split("total 8 done", 1)[1]), done  # erased at the end


def test_watch_all_shows_a_row_per_cgroup_then_the_run(pane: Callable[[str, int], Pane]) -> None:
    """`watch --all` on a terminal: a live row for the cgroup that holds load (its path, N,
    verdict), erased at the end for the table of the whole run."""
    from tests.support.cgroup_sandbox import pinned_cgroup

    with pinned_cgroup(min(os.sched_getaffinity(0))) as (path, joins):
        join = " && ".join(f"echo $$ > {j}" for j in joins)
        workload = f"sh -c {shlex.quote(f'{join} && exec {stress(2, 2, 8)}')} 2>/dev/null &"
        watch = f"{shlex.join(OVERSUB)} watch --all --interval 0.5 --duration 5"
        p = pane(f"{workload} sleep 1; {watch}; wait", 140)
        live = p.wait_for(lambda s: "oversub watch --all ·" in s and path in s)
        text = p.wait_for(lambda screen: DONE in screen)
    row = next(line for line in live.splitlines() if line.startswith(path))
    assert "oversubscribed" in row, live
    assert "oversub summary --all" in text, text
    assert "oversub watch --all ·" not in text, text  # the last frame was erased
    summary_row = next(line for line in text.splitlines() if line.startswith(path))
    assert "oversubscribed" in summary_row and "oversubscribed-threads" in summary_row, text


def test_report_charts_are_coloured_on_a_terminal(
    pane: Callable[[str, int], Pane], tmp_path: Path
) -> None:
    """Issue 20: the charts of `report` were grey on a terminal, their legend markers alike."""
    from tests.support.builders import oversubscribed_run, recording_lines

    recording = tmp_path / "run.ndjson"
    recording.write_text("\n".join(recording_lines(oversubscribed_run(12))) + "\n")
    p = pane(f"{shlex.join(OVERSUB)} report {shlex.quote(str(recording))}", 100)
    p.wait_for(lambda screen: DONE in screen)
    coloured = p.tmux("capture-pane", "-e", "-p", "-J", "-S", "-", "-t", "t")
    legend = [line for line in coloured.splitlines() if " demand" in line and "┤" in line]
    assert legend and "\x1b[38;5;1m" in legend[0], coloured  # demand's marker in red
    plain = p.screen()
    assert "── N" in plain and "⢕⢕ demand" in plain, plain


ROW = re.compile(r"^ *\d+  \S.* +\d+/\d+ +\d+ +\d+\.\d\d +(\d+%|low|-) +(\d+|-)$")
"""A process row of the live table at 80 columns and more: one line, every number whole."""


@pytest.mark.parametrize(
    ("width", "height", "procs"), [(80, 24, 4), (160, 50, 4), (80, 24, 12)], ids=str
)
def test_the_live_view_keeps_the_verdict_and_the_fix_on_screen(
    pane: Callable[..., Pane], width: int, height: int, procs: int
) -> None:
    """Issue 39 item 1: at 80x24 the finding filled the screen and rich's Live cut the fix
    to "..."; table rows became two-line prose at 80 columns; nothing said how to stop."""
    command = (
        f"{stress(procs, 2, 60)} >/dev/null 2>&1 & "
        f"{shlex.join(OVERSUB)} watch $! --interval 0.5 --duration 6"
    )
    p = pane(command, width, height)

    seen: list[list[str]] = []

    def framed(_: str) -> bool:
        # A whole frame: Live redraws in place, so a capture may fall inside a redraw.
        rows = p.visible()
        seen[:] = [rows]
        fixes = [i for i, row in enumerate(rows) if row.startswith("  fix: ")]
        stops = [i for i, row in enumerate(rows) if row.startswith("Ctrl-C stops")]
        return "samples" in rows[0] and bool(fixes) and bool(stops) and fixes[-1] < stops[0]

    p.wait_for(framed)
    rows = seen[0]
    text = "\n".join(rows)
    assert len(rows) <= height and all(len(row) <= width for row in rows), text
    assert rows[0].startswith("oversub watch · pid "), text  # the top did not scroll away
    assert any(BANNER.match(row) for row in rows), text
    assert not any(row.strip() == "..." for row in rows), text  # rich's Live cut nothing
    # The whole fix: its lines, then (after any other fix) the line that says how to stop.
    stop = next(i for i, row in enumerate(rows) if row.startswith("Ctrl-C stops"))
    assert re.search(r"ends in \d+ s or when pid \d+ exits", rows[stop]), text
    assert rows[stop - 1].rstrip().endswith((".", ")")), text  # the last fix's last line
    table = rows[next(i for i, r in enumerate(rows) if r.lstrip().startswith("─")) + 1 :]
    body = table[: next(i for i, r in enumerate(table) if r.lstrip().startswith("total"))]
    processes = [row for row in body if not row.strip().startswith("…")]
    assert processes and all(ROW.match(row.rstrip()) for row in processes), text
    shown = len(processes)
    if procs + 2 > shown:
        assert any(row.strip() == f"… {procs + 2 - shown} more" for row in body), text
    p.wait_for(lambda screen: DONE in screen)
