"""What `check` says while it runs, so a 120-s CI smoke run never looks hung.

A start line (what was started or attached to, N and what limits it, warm-up, interval,
until when), then progress on stderr: in a CI log (not a terminal) one short line every
`every` seconds; on a terminal one status line redrawn in place after each interval and
erased before the report. The status line is drawn with a carriage return and "erase to
end of line" only, never by moving the cursor up: the command's own output shares the
terminal, and a redraw that moved up would overwrite its lines.

No clock is read here: the session passes the elapsed time with each interval.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from oversub.model import Budget
from oversub.names import Verdict
from oversub.plural import count
from oversub.render.phrases import budget_limit_line
from oversub.results import Assessment, Interval

if TYPE_CHECKING:
    from oversub.run.session import SessionOptions

PREFIX = "oversub check: "
_ERASE_LINE = "\r\x1b[K"
COMMAND_WIDTH = 60
"""Characters of the command line in the start line."""


def shown_command(argv: Sequence[str], width: int = COMMAND_WIDTH) -> str:
    """The command for the start line: shell-quoted, control characters escaped, cut."""
    import shlex

    from oversub.render.escape import terminal

    text = terminal(shlex.join(argv))
    return text if len(text) <= width else text[: width - 1] + "…"


def _on_terminal(stream: TextIO) -> bool:
    """A terminal that can redraw a line (TERM=dumb cannot erase)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM") != "dumb"


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


class CheckProgress:
    """Start line and progress of one `check` run, written to `err`."""

    def __init__(self, err: TextIO, budget: Budget, *, every: float = 10.0) -> None:
        self.err = err
        self.budget = budget
        self.every = every
        """Seconds between progress lines off a terminal."""
        self.terminal = _on_terminal(err)
        self._status_shown = False
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
            line = self._status(iv.totals.demand, assessment.verdict, intervals, elapsed)
            width = max(20, _columns(self.err) - 1)  # a wrapped status line cannot be erased
            if len(line) > width:
                line = line[: width - 1] + "…"
            self._write(_ERASE_LINE + line)
            self._status_shown = True
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

    def close(self) -> None:
        """Erase the status line, so the report starts on a clean line."""
        if self._status_shown:
            self._write(_ERASE_LINE)
            self._status_shown = False
