"""The live frame on a terminal of a given size (issue 39 item 1): the verdict, every fix and
how to stop stay on the screen, the process table gives way first, its rows stay one line.

A terminal is a Console with `force_terminal` and a height: `LiveFrame` fits the frame to
the height it is drawn in, as rich's Live draws it; off a terminal it prints everything.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console, RenderableType

from oversub.core.names import Severity, Verdict
from oversub.core.results import Finding
from oversub.core.rules import Rule
from oversub.render.live import footer, watch_renderable
from oversub.render.phrases import starved_clause
from oversub.render.richparts import LEGENDS
from tests.support.builders import (
    make_assessment,
    make_budget,
    make_finding,
    make_interval,
    make_process_rates,
    make_totals,
)

MESSAGE = (
    "The tree keeps 8.0 threads runnable on 2 CPUs (4.0x); the busy threads are the "
    "application's own Python threads (pid 9440: Python interpreter: 3 (2 busy); pid 9443: "
    "Python interpreter: 3 (2 busy); pid 9442: Python interpreter: 3 (2 busy)): task threads "
    "or executors, not a native pool's."
)
FIX = (
    "Run at most 2 busy processes at a time, with 1 busy thread each (workers x threads per "
    "worker <= 2, e.g. 2 workers x 1 thread): dask LocalCluster(threads_per_worker=...), "
    "ThreadPoolExecutor(max_workers=...), joblib's n_jobs with the threading backend, or the "
    "application's own thread count."
)
CONSOLE_SCRIPT = "/work/main/.venv/bin/python /work/main/.venv/bin/oversub stress --procs {n}"
SPAWN = (
    "/work/main/.venv/bin/python -c from multiprocessing.spawn import spawn_main; "
    "spawn_main(tracker_fd=5, pipe_handle=7) --multiprocessing-fork"
)


def screen(renderable: RenderableType, width: int, height: int) -> list[str]:
    """The lines a terminal of `width` x `height` shows of `renderable`."""
    buffer = io.StringIO()
    console = Console(
        file=buffer, width=width, height=height, force_terminal=True, color_system=None
    )
    console.print(renderable)
    return buffer.getvalue().rstrip("\n").split("\n")


def stress_frame(
    procs: int, findings: tuple[Finding, ...] | None = None, *, duration: float | None = None
) -> RenderableType:
    """A frame like `oversub stress --procs M --threads 2` gives: M busy spawn workers, the
    idle root (a console script) and the resource tracker."""
    workers = tuple(
        make_process_rates(pid=3000 + i, ppid=100, cmdline=SPAWN, cpu_percent=40.0 - i)
        for i in range(procs)
    )
    root = make_process_rates(
        pid=100,
        ppid=1,
        cmdline=CONSOLE_SCRIPT.format(n=procs),
        pools=(),
        threads=1,
        active_threads=0,
        cpu_percent=0.0,
        demand=0.0,
        run_delay_ratio=None,
    )
    tracker = make_process_rates(
        pid=101,
        ppid=100,
        cmdline="python -c from multiprocessing.resource_tracker import main",
        threads=1,
        active_threads=0,
        cpu_percent=0.0,
        demand=0.0,
        run_delay_ratio=None,
        pools=(),
    )
    processes = (*workers, root, tracker)
    totals = make_totals(processes=len(processes), demand=2.0 * procs)
    if findings is None:
        findings = (make_finding(severity=Severity.WARNING, message=MESSAGE, fix=FIX),)
    return watch_renderable(
        make_interval(processes=processes, totals=totals),
        make_assessment(findings=findings),
        make_budget(vcpus=2),
        elapsed=6.0,
        samples=6,
        history=[(float(i), 2.0 * procs, 2) for i in range(6)],
        duration=duration,
    )


def table_rows(lines: list[str]) -> list[str]:
    """The process table's rows: from under its header's rule to its total, inclusive."""
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("─"))
    end = next(i for i, line in enumerate(lines) if line.lstrip().startswith("total"))
    return lines[start + 1 : end + 1]


def joined(lines: list[str]) -> str:
    """The screen's words as one line: a wrapped sentence reads whole again."""
    return " ".join(" ".join(lines).split())


def assert_fix_whole(lines: list[str], fix: str) -> None:
    assert " ".join(fix.split()) in joined(lines), "\n".join(lines)


@pytest.mark.parametrize(("width", "height", "procs"), [(80, 24, 4), (80, 24, 12), (160, 50, 4)])
def test_the_verdict_the_fix_and_how_to_stop_stay_on_the_screen(
    width: int, height: int, procs: int
) -> None:
    lines = screen(stress_frame(procs, duration=60), width, height)
    text = "\n".join(lines)
    assert len(lines) <= height, text
    assert all(len(line.rstrip()) <= width for line in lines), text
    assert lines[0].startswith("oversub watch · pid 1234"), text
    assert any(line.startswith(" OVERSUBSCRIBED ") for line in lines), text
    assert_fix_whole(lines, FIX)
    assert "Ctrl-C stops and prints the summary · ends in 54 s or when pid 1234 exits" in text
    assert not any(line.strip() == "..." for line in lines), text  # not rich's crop
    total = next(line for line in lines if line.lstrip().startswith("total"))
    assert f"{procs + 2} procs" in total and f"{2.0 * procs:.2f} / 2" in total, text


def test_at_80x24_the_table_gives_way_first() -> None:
    lines = screen(stress_frame(4), 80, 24)
    text = "\n".join(lines)
    rows = [line for line in table_rows(lines) if re.match(r"^ *\d+  ", line)]
    # Some rows, the busiest first, and how many are left out.
    assert 3 <= len(rows) < 6, text
    assert "3000  spawn worker" in rows[0], text
    assert f"… {6 - len(rows)} more" in text, text
    # The message is whole too here: the table went first.
    assert " ".join(MESSAGE.split()) in joined(lines), text
    # On a tall terminal nothing is cut.
    tall = "\n".join(screen(stress_frame(4), 80, 60))
    assert "… " not in tall and "oversub stress --procs 4" in tall, tall
    assert "demand, last 60 s" in tall and "host: " in tall, tall


def test_many_findings_keep_every_fix_while_they_fit() -> None:
    findings = tuple(
        make_finding(rule=f"rule-{i}", message=MESSAGE, fix=f"fix number {i}: {FIX}")
        for i in range(2)
    )
    lines = screen(stress_frame(4, findings), 80, 24)
    assert len(lines) <= 24
    for i in range(2):
        assert_fix_whole(lines, f"fix number {i}: {FIX}")
    # Too many to fit: the first finding whole, and a word of the rest.
    many = tuple(
        make_finding(rule=f"rule-{i}", message=MESSAGE, fix=f"fix number {i}: {FIX}")
        for i in range(6)
    )
    lines = screen(stress_frame(4, many), 80, 24)
    assert len(lines) <= 24, "\n".join(lines)
    assert_fix_whole(lines, f"fix number 0: {FIX}")
    assert "… 5 more findings: in the summary when watch ends" in "\n".join(lines)


@pytest.mark.parametrize("width", [60, 70, 80, 100, 160, 200])
@pytest.mark.parametrize("height", [20, 24, 30, 50])
def test_every_size_fits_and_keeps_the_fix(width: int, height: int) -> None:
    for procs in (1, 4, 12, 40):
        lines = screen(stress_frame(procs), width, height)
        assert len(lines) <= height, (procs, "\n".join(lines))
        assert_fix_whole(lines, FIX)


@pytest.mark.parametrize("width", [46, 60, 70, 80, 120])
def test_table_rows_stay_one_line_and_numbers_whole(width: int) -> None:
    # Issue 39: at 80 columns the table became two-line prose rows (the root's label, a
    # venv's path, has a 28-character word).
    lines = screen(stress_frame(4), width, 200)
    text = "\n".join(lines)
    rows = table_rows(lines)
    assert len(rows) == 7, text  # 6 processes and the total, one line each
    for row in rows:
        cells = row.split()
        assert not any(cell.endswith("…") and cell[:-1].isdigit() for cell in cells), text
    assert "2.00" in rows[0] and "50%" in rows[0], text  # demand and delay whole
    assert "8.00 / 2" in rows[-1], text
    header = next(line for line in lines if "PID" in line)
    if width >= 70:
        assert "Invol/s" in header, text
    else:  # the least useful column goes first
        assert "Invol/s" not in header and "CPU%" in header, text


def test_a_long_label_is_cut_not_folded() -> None:
    lines = screen(stress_frame(1), 60, 200)
    root = next(line for line in lines if line.lstrip().startswith("100 "))
    assert "oversub stress" in root and root.rstrip().endswith("-"), lines  # delay unknown


def test_off_a_terminal_the_frame_is_printed_whole() -> None:
    buffer = io.StringIO()
    Console(file=buffer, width=80, height=24, color_system=None).print(stress_frame(12))
    text = buffer.getvalue()
    assert "… " not in text and text.count("spawn worker") == 12
    assert "demand, last 60 s" in text and "host: " in text


def test_the_footer_says_how_to_stop_and_when_it_ends() -> None:
    assert footer("pid 12", elapsed=3.2, duration=None) == (
        "Ctrl-C stops and prints the summary · ends when pid 12 exits"
    )
    assert footer("pid 12", elapsed=3.2, duration=10) == (
        "Ctrl-C stops and prints the summary · ends in 7 s or when pid 12 exits"
    )
    assert footer("cgroup /a/b", elapsed=12.0, duration=10) == (
        "Ctrl-C stops and prints the summary · ends in 0 s or when cgroup /a/b is removed"
    )


def test_the_legend_is_one_line_at_every_width() -> None:
    assert len(LEGENDS[2]) <= 79  # every term of the table at 80 columns
    for width in (30, 40, 80, 120, 200):
        lines = screen(stress_frame(2), width, 200)
        legend = [line for line in lines if line.startswith("Demand: ")]
        assert len(legend) == 1 and len(legend[0]) <= width, lines
    wide = screen(stress_frame(2), 200, 200)
    assert any("PSI some:" in line for line in wide)


def test_a_not_oversubscribed_frame_says_no_findings() -> None:
    ok = watch_renderable(
        make_interval(),
        make_assessment(verdict=Verdict.OK, findings=()),
        make_budget(),
        elapsed=1.0,
        samples=1,
    )
    lines = screen(ok, 80, 24)
    assert any(line.startswith(" OK ") for line in lines)
    assert "No findings." in lines


HOSTILE = "\x1b[2J\x1b]0;x\x07[/]"


def test_a_fitted_frame_escapes_hostile_names() -> None:
    procs = tuple(
        make_process_rates(pid=3000 + i, name=HOSTILE, cmdline="", cpu_percent=float(i))
        for i in range(20)
    )
    frame = watch_renderable(
        make_interval(processes=procs),
        make_assessment(findings=(make_finding(message=HOSTILE, fix=f"set {HOSTILE}"),)),
        make_budget(),
        elapsed=1.0,
        samples=1,
    )
    for height in (12, 24, 200):
        text = "\n".join(screen(frame, 80, height))
        assert "\x1b" not in text and "\x07" not in text, text
        assert "\\x1b[2J" in text and "[/]" in text, text


def test_a_starved_banner_names_what_its_finding_measured() -> None:
    # Outside load 0.04 CPUs against 0.27 CPU-seconds waited (#43): the banner must not
    # blame CPUs "taken outside the tree"; it says what the headline says, in its words.
    starved = make_finding(
        rule=Rule.STARVED_OUTSIDE,
        severity=Severity.WARNING,
        verdict=Verdict.STARVED,
        evidence={"outside_cpus": 0.04, "steal_cpus": 0.0, "waited_cpus": 0.27},
    )
    frame = watch_renderable(
        make_interval(),
        make_assessment(verdict=Verdict.STARVED, findings=(starved,)),
        make_budget(vcpus=2),
        elapsed=6.0,
        samples=6,
    )
    words = joined(screen(frame, 160, 50))
    assert starved_clause(starved) in words
    assert "other processes used 0.04 CPUs, of the 0.27 CPU-seconds per second" in words
    assert "taken outside the tree" not in words
