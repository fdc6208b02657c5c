"""Writing to stdout and stderr: the Console, failures of the streams, warning lines.

Renderers build strings and renderables; the commands write them through this module. The
rich Console is made per invocation (never at import) so colour follows the real stdout and
`NO_COLOR`. A reader that leaves (`| head`) is OutputClosed (exit 0), any other failure to
write stdout OutputFailed (exit 3).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

import click

from oversub.core.errors import OutputClosed, OutputFailed

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
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
    if "COLUMNS" not in os.environ and not is_tty(stream):
        width = UNWRAPPED_WIDTH

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich's default raises SystemExit(1), which in `check` reads as "found" and
            # elsewhere as a failure; a reader that left (`| head`) is exit 0 (cli.app.main).
            self.quiet = True
            raise OutputClosed("stdout was closed by its reader")

    # No markup: a process named "[/]" or "[link=…]" is text, not an instruction to rich.
    return _Console(stderr=stderr, highlight=False, width=width, markup=False)


def text_width(stream: TextIO) -> int | None:
    """Columns that text oversub lays out itself (`cpus`) may use on `stream`: COLUMNS when
    set, else the terminal's width; None off a terminal, where lines are never wrapped (as
    `make_console` does for rich)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if not is_tty(stream):
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        return None


def colour_for(stream: TextIO) -> bool:
    """Colour for text oversub draws itself (report's charts): a terminal, unless NO_COLOR
    is set or TERM=dumb (rich decides the same for its own renderables)."""
    return is_tty(stream) and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def is_tty(stream: TextIO) -> bool:
    """`stream.isatty()`; False for a stream closed or not a real file."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def utc_timestamp() -> str:
    """Now, wall clock, UTC, ISO 8601 to the millisecond: "2025-01-31T12:00:00.123Z".

    NDJSON records carry it beside `t` (monotonic seconds, only differences mean anything)
    so that a log line can be matched with other logs."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return now.replace("+00:00", "Z")


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """A closed pipe (`oversub watch PID | head`) becomes OutputClosed: stop, exit 0. Any
    other failure to write (a full disk) is OutputFailed: one line, exit 3."""
    try:
        yield
    except BrokenPipeError:
        raise OutputClosed("stdout was closed by its reader") from None
    except OSError as exc:
        raise OutputFailed(f"cannot write to stdout: {exc.strerror or exc}") from None


def emit(output: Any) -> None:
    """Strings (JSON, env lines) go to stdout as they are; rich renderables via a Console."""
    with reader_may_leave():
        if isinstance(output, str):
            click.echo(output, nl=False)
            sys.stdout.flush()
        else:
            make_console().print(output)


def emit_text(text: str) -> None:
    """Text oversub lays out itself for a reader (`cpus`): through sys.stdout, so that a
    stream that cannot encode a character gets its ASCII stand-in (`oversub.launch`), as
    rich's output does. JSON must never get a stand-in (`\\U0001f600` or a plain `"` in
    a string is invalid JSON): `serialize.to_json` writes ASCII JSON for such a stream."""
    with reader_may_leave():
        sys.stdout.write(text)
        sys.stdout.flush()


def warn(warnings: tuple[str, ...], *, severe: bool) -> None:
    """Diagnostics on stderr, most important first, in every format: `eval "$(oversub
    recommend --format env)"` must not swallow "8 processes on 2 vCPUs oversubscribe".

    Plain lines off a terminal (no rich import: launch scripts); on a terminal through a
    Console, wrapped with continuation lines under the text, coloured unless NO_COLOR."""
    if not warnings:
        return
    if not sys.stderr.isatty():
        from oversub.render.escape import terminal

        for warning in warnings:
            click.echo(f"oversub: warning: {terminal(warning)}", err=True)
        return
    from oversub.render.richparts import hanging

    console = make_console(stderr=True)
    style = "bold red" if severe else "yellow"
    for warning in warnings:
        console.print(hanging("oversub: warning: ", warning, style))


class LiveFrames:
    """The frames of a run on a terminal (`watch`, `watch --all`), as a rich Live.

    auto_refresh off: the sampling loop owns the clock and redraws after each sample.
    Transient: the last frame is erased when the run ends, so the screen never shows a
    frame's verdict (one interval's) above the summary's (the whole run's); and off a
    terminal no frame is printed at all, only the summary.
    """

    def __init__(self, waiting: str) -> None:
        self.waiting = waiting
        self.console: Console | None = None
        self._live: Live | None = None

    def __enter__(self) -> LiveFrames:
        from rich.live import Live
        from rich.text import Text

        self.console = make_console()
        self._live = Live(
            Text(self.waiting), console=self.console, auto_refresh=False, transient=True
        )
        self._live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            with reader_may_leave():
                live.stop()

    def show(self, frame: RenderableType) -> None:
        if self._live is not None:
            with reader_may_leave():
                self._live.update(frame, refresh=True)
