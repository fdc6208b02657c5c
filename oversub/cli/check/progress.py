"""What `check` says while it runs, so a 120-s CI smoke run never looks hung.

A start line (what was started or attached to, N and what limits it, warm-up, interval,
until when), then progress on stderr: in a CI log (not a terminal) one short line every
`every` seconds; on a terminal one status line on the terminal's bottom row, redrawn after
each interval and erased before the report.

The command's own output shares the terminal, and oversub cannot know where it stands: a
status line drawn at the cursor got CMD's next output glued to it ("now oversubscribedtotal
82845113"), and erasing it erased CMD's unfinished line. So the bottom row is taken out of
the scrolling region (as apt's progress bar does: DECSTBM): CMD's output scrolls above it and
never meets the status, which is drawn with the cursor saved and restored, in one write, so
that it cannot land inside CMD's output either. The row is given back (the scrolling region
reset) by `close`, and again at each redraw when the terminal changed size.

No clock is read here: the session passes the elapsed time with each interval.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from oversub.cli.output import is_tty
from oversub.core.model import Budget
from oversub.core.names import Verdict
from oversub.core.plural import count
from oversub.core.results import Assessment, Interval
from oversub.render.phrases import budget_limit_line

if TYPE_CHECKING:
    from oversub.run.session import SessionOptions

PREFIX = "oversub check: "
_SAVE, _RESTORE = "\x1b7", "\x1b8"
_DOWN_SCROLLING, _UP = "\x1bD", "\x1b[1A"
_CLEAR_ROW = "\x1b[2K"


def _row(row: int) -> str:
    return f"\x1b[{row};1H"


def _region(rows: int) -> str:
    """Rows 1..rows-1 scroll, the bottom row is the status line's (cursor saved around it:
    DECSTBM moves it home)."""
    return f"{_SAVE}\x1b[1;{rows - 1}r{_RESTORE}"


_WHOLE_SCREEN = f"{_SAVE}\x1b[r{_RESTORE}"
MIN_ROWS = 3
"""A terminal with fewer rows gets no status line: it would leave CMD too little room."""
COMMAND_WIDTH = 60
"""Characters of the command line in the start line."""


def shown_command(argv: Sequence[str], width: int = COMMAND_WIDTH) -> str:
    """The command for the start line: shell-quoted, control characters escaped, cut."""
    import shlex

    from oversub.render.escape import terminal

    text = terminal(shlex.join(argv))
    return text if len(text) <= width else text[: width - 1] + "…"


def _size(stream: TextIO) -> os.terminal_size:
    try:
        return os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return os.terminal_size((80, 24))


class CheckProgress:
    """Start line and progress of one `check` run, written to `err`."""

    def __init__(self, err: TextIO, budget: Budget, *, every: float = 10.0) -> None:
        self.err = err
        self.budget = budget
        self.every = every
        """Seconds between progress lines off a terminal."""
        self.terminal = is_tty(err) and os.environ.get("TERM") != "dumb"
        """A terminal that can redraw a line (TERM=dumb cannot erase)."""
        self._status_row: int | None = None
        """The bottom row the status line holds (the terminal's rows), None while it holds none."""
        self._last_line_at = 0.0
        self._demand_s = 0.0
        """Demand x seconds since the last progress line (for the mean over the period)."""
        self._seconds = 0.0

    def _write(self, text: str) -> None:
        try:
            self.err.write(text)
            self.err.flush()
        except (BrokenPipeError, ValueError):
            pass  # a reader that left must not end the run; the report says the rest

    def start(self, what: str, *, interval: float, warmup: float, until: str) -> None:
        """ "oversub check: started pid 42 (python train.py); N = 2 usable vCPUs (...);
        warm-up 1 s, then a sample every 1 s until it exits"."""
        warm = f"warm-up {warmup:g} s, then " if warmup > 0 else ""
        self._write(
            f"{PREFIX}{what}; {budget_limit_line(self.budget)}; "
            f"{warm}a sample every {interval:g} s {until}\n"
        )

    def started(
        self, pid: int, command: Sequence[str], session: SessionOptions, timeout: float | None
    ) -> None:
        """The start line of `check -- CMD`."""
        until = "until it exits" + (
            f" (--timeout ends it after {timeout:g} s)" if timeout is not None else ""
        )
        what = f"started pid {pid} ({shown_command(command)})"
        self.start(what, interval=session.interval, warmup=session.warmup, until=until)

    def attached(self, pid: int, session: SessionOptions) -> None:
        """The start line of `check --pid PID` (and `check --cgroup PATH`: pid 0)."""
        from oversub.render.escape import terminal
        from oversub.render.phrases import target_name

        duration = session.duration
        ends = "the cgroup is removed" if self.budget.cgroup else "the target exits"
        until = (
            f"for {duration:g} s, or until {ends}"
            if duration is not None
            else f"until {ends} (no --duration given)"
        )
        what = f"attached to {terminal(target_name(pid, self.budget))}"
        self.start(what, interval=session.interval, warmup=session.warmup, until=until)

    def interval(
        self, iv: Interval, assessment: Assessment, intervals: int, elapsed: float
    ) -> None:
        """After each interval: redraw the status line, or print a line every `every` s."""
        self._demand_s += iv.totals.demand * iv.seconds
        self._seconds += iv.seconds
        if self.terminal:
            self._draw(self._status(iv.totals.demand, assessment.verdict, intervals, elapsed))
            return
        if elapsed - self._last_line_at < self.every:
            return
        mean = self._demand_s / self._seconds if self._seconds > 0 else 0.0
        period = elapsed - self._last_line_at
        self._write(
            f"{PREFIX}{elapsed:.0f} s measured, {count(intervals, 'sample')}: demand {mean:.2f} "
            f"runnable threads on N = {self.budget.vcpus} over the last {period:.0f} s; "
            f"last interval {assessment.verdict.value}\n"
        )
        self._last_line_at = elapsed
        self._demand_s = self._seconds = 0.0

    def _status(self, demand: float, verdict: Verdict, intervals: int, elapsed: float) -> str:
        # "samples" in the words shown, as in the JSON key: the intervals measured (see
        # docs/architecture.md, "Words"); the wording is kept as it was.
        # Short: it must fit an 80-column terminal, or it would wrap and could not be erased.
        return (
            f"{PREFIX}{elapsed:.0f} s · {count(intervals, 'sample')} · demand {demand:.2f} on "
            f"N = {self.budget.vcpus} · now {verdict.value}"
        )

    def _draw(self, line: str) -> None:
        """The status line on the bottom row, in one write; the row reserved first (again
        when the terminal's height changed)."""
        size = _size(self.err)
        if size.lines < MIN_ROWS:
            self.close()
            return
        width = max(20, size.columns - 1)  # a wrapped status line would scroll the screen
        if len(line) > width:
            line = line[: width - 1] + "…"
        text = ""
        if self._status_row != size.lines:
            text += self._release()
            # Down one row (scrolling when the cursor is on the last one, the column kept, so
            # CMD's unfinished line is not broken), reserve the bottom row, back up one row.
            text += _DOWN_SCROLLING + _region(size.lines) + _UP
            self._status_row = size.lines
        text += f"{_SAVE}{_row(size.lines)}{_CLEAR_ROW}{line}{_RESTORE}"
        self._write(text)

    def _release(self) -> str:
        """Give the bottom row back: the whole screen scrolls again, the status row is clear."""
        if self._status_row is None:
            return ""
        row, self._status_row = self._status_row, None
        return f"{_WHOLE_SCREEN}{_SAVE}{_row(row)}{_CLEAR_ROW}{_RESTORE}"

    def close(self) -> None:
        """Erase the status line and give its row back, before the report."""
        text = self._release()
        if text:
            self._write(text)
