"""Where `watch` output goes: a live terminal view, one JSON line per interval, or one summary.

Renderers build strings and renderables; this module decides when to write them. The rich
Console is made per invocation (never at import) so colour follows the real stdout and
`NO_COLOR`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

from oversub.model import Assessment, Budget, Interval, Summary
from oversub.render import WatchFormat
from oversub.render.serialize import interval_dict, summary_dict, to_json

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live


def make_console(*, stderr: bool = False) -> Console:
    """A Console for this invocation; rich itself honours NO_COLOR and non-terminals."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


class WatchView:
    """Receives each interval and the final summary and writes them in one format."""

    def __init__(self, fmt: WatchFormat, budget: Budget, *, out: TextIO | None = None) -> None:
        self.fmt = fmt
        self.budget = budget
        self.out = out if out is not None else sys.stdout
        self._console: Console | None = None
        self._live: Live | None = None

    def __enter__(self) -> WatchView:
        if self.fmt is WatchFormat.LIVE:
            from rich.live import Live
            from rich.text import Text

            self._console = make_console()
            # auto_refresh off: the sampling loop owns the clock and refreshes after each sample.
            self._live = Live(
                Text(f"sampling every interval; N = {self.budget.vcpus} vCPUs ..."),
                console=self._console,
                auto_refresh=False,
                transient=False,
            )
            self._live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def interval(self, iv: Interval, assessment: Assessment, samples: int, elapsed: float) -> None:
        if self.fmt is WatchFormat.LIVE:
            from oversub.render.live import watch_renderable

            assert self._live is not None
            self._live.update(
                watch_renderable(iv, assessment, self.budget, elapsed=elapsed, samples=samples),
                refresh=True,
            )
        elif self.fmt is WatchFormat.NDJSON:
            record: dict[str, Any] = {"type": "interval", **interval_dict(iv, assessment)}
            self.out.write(to_json(record, indent=None) + "\n")
            self.out.flush()
        elif self.fmt is WatchFormat.JSON:
            pass  # only the final summary
        else:  # pragma: no cover - exhaustive over WatchFormat
            raise AssertionError(self.fmt)

    def summary(self, summary: Summary) -> None:
        if self.fmt is WatchFormat.LIVE:
            from oversub.render.live import summary_renderable

            console = self._console or make_console()
            console.print(summary_renderable(summary))
        elif self.fmt is WatchFormat.NDJSON:
            record: dict[str, Any] = {"type": "summary", **summary_dict(summary)}
            self.out.write(to_json(record, indent=None) + "\n")
        elif self.fmt is WatchFormat.JSON:
            self.out.write(to_json(summary_dict(summary), indent=2) + "\n")
        else:  # pragma: no cover - exhaustive over WatchFormat
            raise AssertionError(self.fmt)
        self.out.flush()


def default_watch_format(out: TextIO) -> WatchFormat:
    """Live on a terminal, one JSON line per interval otherwise (a pipe gets no redraws)."""
    return WatchFormat.LIVE if out.isatty() else WatchFormat.NDJSON
