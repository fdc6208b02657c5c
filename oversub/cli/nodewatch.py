"""`oversub watch --all`: the whole node, a row and a verdict per cgroup that holds load.

One read of /proc per interval for every cgroup (`run.sources.NodeSource`); output as
`watch` does it: a live frame on a terminal (transient, then the run's table), one JSON line
per interval (`"type": "node-interval"`) and a closing `"node-summary"` line with ndjson, or
only the closing object with json (`render.nodeview`).
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, TextIO

from oversub.cli.output import LiveFrames, make_console, reader_may_leave, utc_timestamp
from oversub.core.errors import ExitStatus
from oversub.render import WatchFormat

if TYPE_CHECKING:
    from collections.abc import Callable

    from oversub.core.results import Summary
    from oversub.core.targets import Exported, Round
    from oversub.core.thresholds import Thresholds
    from oversub.run.session import SessionOptions


def watch_node(fmt: WatchFormat, options: SessionOptions) -> ExitStatus:
    from oversub.core.targets import Target
    from oversub.run import stopsignals
    from oversub.run.session import follow
    from oversub.run.sources import attach

    source = attach(Target.node())
    with (
        stopsignals.interrupt(),
        contextlib.closing(source),
        NodeView(fmt, options.thresholds) as view,
    ):
        result = follow(source, options, on_round=view.round, only_loaded=True)
    # Only the cgroups that held load at some point are summed up, like the rows shown.
    shown = {k: s for k, s in result.summaries.items() if k in view.shown}
    view.summary(shown, result.node)
    return ExitStatus.INTERRUPTED if result.interrupted else ExitStatus.OK


class NodeView:
    """Receives each round and the closing summaries and writes them in one format."""

    def __init__(self, fmt: WatchFormat, thresholds: Thresholds, out: TextIO | None = None):
        self.fmt = fmt
        self.thresholds = thresholds
        self.out = out if out is not None else sys.stdout
        self.shown: set[str] = set()
        """Every target that held load in some round."""
        self._frames: LiveFrames | None = None

    def __enter__(self) -> NodeView:
        if self.fmt is WatchFormat.LIVE:
            self._frames = LiveFrames("sampling every process of the node ...").__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._frames is not None:
            self._frames.__exit__(*exc)

    def round(self, r: Round) -> None:
        self.shown.update(t.target for t in r.targets)
        if self.fmt is WatchFormat.LIVE:
            from oversub.render.nodeview import round_renderable

            if self._frames is not None:
                self._frames.show(round_renderable(r, self.thresholds))
        elif self.fmt is WatchFormat.NDJSON:
            from oversub.render.nodeview import round_record
            from oversub.render.serialize import to_json

            self._write(to_json(round_record(r, utc_timestamp()), indent=None) + "\n")

    def summary(self, summaries: dict[str, Summary], node: Summary | None) -> None:
        from oversub.render.nodeview import node_summary_record, node_summary_renderable
        from oversub.render.serialize import to_json

        if self.fmt is WatchFormat.LIVE:
            report: Any = node_summary_renderable(summaries, node)
            with reader_may_leave():
                console = self._frames.console if self._frames is not None else None
                (console or make_console()).print(report)
                self.out.flush()
            return
        record = node_summary_record(summaries, node, utc_timestamp())
        indent = 2 if self.fmt is WatchFormat.JSON else None
        self._write(to_json(record, indent=indent) + "\n")

    def _write(self, text: str) -> None:
        with reader_may_leave():
            self.out.write(text)
            self.out.flush()


class RootHint:
    """`serve --all`'s `on_update`: the first time the root cgroup's own processes hold
    runnable load, one line on stderr says so and names the `serve --pid` that judges them
    (no target exports them: the metrics stay those of docs/metrics.md); then `then`."""

    def __init__(
        self, then: Callable[[Exported], None] | None = None, err: TextIO | None = None
    ) -> None:
        self.then = then
        self.err = err
        self.said = False

    def __call__(self, state: Exported) -> None:
        if not self.said and state.round is not None:
            from oversub.render.nodeview import root_serve_line, round_root_load

            load = round_root_load(state.round)
            if load is not None:
                node = state.round.node
                line = root_serve_line(load, node.interval.totals.demand if node else None)
                _say(line, self.err)
                self.said = True
        if self.then is not None:
            self.then(state)


def _say(line: str, err: TextIO | None) -> None:
    from oversub.render.escape import terminal

    with contextlib.suppress(OSError, ValueError):
        out = err if err is not None else sys.stderr
        out.write(terminal(line) + "\n")
        out.flush()
