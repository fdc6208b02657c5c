"""Where `watch` output goes: a live terminal view, one JSON line per interval, or one summary.

Renderers build strings and renderables; this module decides when to write them. The rich
Console is made per invocation (never at import) so colour follows the real stdout and
`NO_COLOR`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from oversub.errors import OutputClosed, OutputFailed
from oversub.model import Budget, Thresholds
from oversub.plural import count
from oversub.render import WatchFormat, render_watch_interval, render_watch_summary
from oversub.results import Assessment, Interval, Summary

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live


UNWRAPPED_WIDTH = 100_000
"""Console width off a terminal: wide enough that no line is ever hard-wrapped."""


def make_console(*, stderr: bool = False) -> Console:
    """A Console for this invocation; rich itself honours NO_COLOR and non-terminals.

    Off a terminal (a pipe, a file, a CI log) lines are not wrapped at 80 columns: a wrapped
    "oversubscribes by M/N = ⏎2.0x" breaks grep. COLUMNS, when set, still wins.
    """
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if "COLUMNS" not in os.environ and not _isatty(stream):
        width = UNWRAPPED_WIDTH

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich's default raises SystemExit(1), which in `check` reads as "found" and
            # elsewhere as a failure; a reader that left (`| head`) is exit 0 (cli.main).
            self.quiet = True
            raise OutputClosed("stdout was closed by its reader")

    # No markup: a process named "[/]" or "[link=…]" is text, not an instruction to rich.
    return _Console(stderr=stderr, highlight=False, width=width, markup=False)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class WatchView:
    """Receives each interval and the final summary and writes them in one format."""

    def __init__(
        self,
        fmt: WatchFormat,
        budget: Budget,
        *,
        out: TextIO | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.fmt = fmt
        self.budget = budget
        self.thresholds = thresholds
        self.out = out if out is not None else sys.stdout
        self._console: Console | None = None
        self._live: Live | None = None

    def __enter__(self) -> WatchView:
        if self.fmt is WatchFormat.LIVE:
            from rich.live import Live
            from rich.text import Text

            self._console = make_console()
            # auto_refresh off: the sampling loop owns the clock and refreshes after each sample.
            # Transient: the last frame is erased when the run ends, so the screen never shows
            # a frame's verdict (one interval's) above the summary's (the whole run's); and
            # off a terminal no frame is printed at all, only the summary.
            self._live = Live(
                Text(f"sampling every interval; N = {count(self.budget.vcpus, 'vCPU')} ..."),
                console=self._console,
                auto_refresh=False,
                transient=True,
            )
            self._live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            with _reader_may_leave():
                live.stop()

    def interval(self, iv: Interval, assessment: Assessment, samples: int, elapsed: float) -> None:
        frame = render_watch_interval(
            iv,
            assessment,
            self.budget,
            self.fmt,
            elapsed=elapsed,
            samples=samples,
            thresholds=self.thresholds,
            timestamp=utc_timestamp(),
        )
        if self._live is not None and frame is not None:
            with _reader_may_leave():
                self._live.update(frame, refresh=True)
        elif isinstance(frame, str):
            with _reader_may_leave():
                self.out.write(frame)
                self.out.flush()

    def summary(self, summary: Summary) -> None:
        report = render_watch_summary(summary, self.fmt, timestamp=utc_timestamp())
        with _reader_may_leave():
            if isinstance(report, str):
                self.out.write(report)
            else:
                (self._console or make_console()).print(report)
            self.out.flush()


def utc_timestamp() -> str:
    """Now, wall clock, UTC, ISO 8601 to the millisecond: "2025-01-31T12:00:00.123Z".

    NDJSON records carry it beside `t` (monotonic seconds, only differences mean anything)
    so that a log line can be matched with other logs."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return now.replace("+00:00", "Z")


@contextmanager
def _reader_may_leave() -> Iterator[None]:
    """A closed pipe (`oversub watch PID | head`) becomes OutputClosed: stop, exit 0. Any
    other failure to write (a full disk) is OutputFailed: one line, exit 3."""
    try:
        yield
    except BrokenPipeError:
        raise OutputClosed("stdout was closed by its reader") from None
    except OSError as exc:
        raise OutputFailed(f"cannot write to stdout: {exc.strerror or exc}") from None


def default_watch_format(out: TextIO) -> WatchFormat:
    """Live on a terminal, one JSON line per interval otherwise (a pipe gets no redraws)."""
    return WatchFormat.LIVE if out.isatty() else WatchFormat.NDJSON
