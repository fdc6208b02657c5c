"""`oversub watch PID`: a live view of a process tree, its verdict and the fix.

`WatchView` decides when output is written: a live terminal view, one JSON line per
interval, or one summary at the end (the renderers in `oversub.render` build each).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from oversub.cli.options import (
    CONTEXT,
    PID,
    SECONDS,
    format_option,
    record_options,
    setting_option,
    threshold_options,
)
from oversub.cli.output import LiveFrames, make_console, reader_may_leave, utc_timestamp
from oversub.core.errors import ExitStatus, UsageError
from oversub.core.plural import count
from oversub.render import WatchFormat, render_watch_interval, render_watch_summary

if TYPE_CHECKING:
    from oversub.cli.record.writer import Recorder
    from oversub.core.model import Budget
    from oversub.core.origin import NodeIdentity
    from oversub.core.results import Assessment, Interval, Summary
    from oversub.core.thresholds import Thresholds
    from oversub.render.serialize import ProcessTexts
    from oversub.render.sparkline import History


@click.command("watch", context_settings=CONTEXT)
@click.argument("pid", type=PID, required=False)
@click.option(
    "--cgroup",
    "cgroup",
    metavar="PATH",
    default=None,
    help="Watch every process of this cgroup (its path as /proc/PID/cgroup shows it, or its "
    "directory) against its own budget.",
)
@click.option(
    "--all",
    "all_cgroups",
    is_flag=True,
    help="Watch the whole node: a row and a verdict per cgroup that holds load.",
)
@setting_option("interval")
@click.option("--duration", type=SECONDS, default=None, help="Stop after this many seconds.")
@click.option("--once", is_flag=True, help="One interval, one report, then exit.")
@format_option(
    WatchFormat, None, "live on a terminal, ndjson otherwise; json = only the final summary."
)
@record_options
@threshold_options("watch")
def command(
    pid: int | None,
    cgroup: str | None,
    all_cgroups: bool,
    interval: float | None,
    duration: float | None,
    once: bool,
    fmt: str | None,
    record_path: Path | None,
    record_max_mb: float | None,
    **kwargs: Any,
) -> ExitStatus:
    """Watch a process tree: CPU, threads, run-queue delay, switches, pools; verdict and fix.

    Observes only: exits 0 whatever the verdict (use `oversub check` to gate). Ctrl-C,
    SIGTERM and SIGHUP end it with the summary (exit 130); the tree's exit or --duration
    too (exit 0). Thresholds and interval also come from [tool.oversub] in ./pyproject.toml;
    flags win.

    \b
    What the view shows:
      Demand    threads runnable (running or waiting for a CPU), against N
      Delay     share of that runnable time spent waiting for a CPU
      Invol/s   involuntary context switches (preemptions) per second
      PSI some  (host line) share of time some task of the host waited for a CPU

    \b
    Examples:
      oversub watch 1234
      oversub watch 1234 --duration 30 --format json > report.json
      oversub watch 1234 --once --format ndjson
      oversub watch 1234 --record run.ndjson   # then: oversub report run.ndjson
      oversub watch --cgroup /system.slice/slurmstepd.scope/job_42
      oversub watch --all
    """
    import contextlib
    import os

    from oversub.cli.config import load_config, resolve_float, thresholds_from
    from oversub.cli.identity import read_identity
    from oversub.cli.options import pop_thresholds
    from oversub.cli.target import budget_of, cgroup_target
    from oversub.core.targets import Target
    from oversub.run import stopsignals
    from oversub.run.session import SessionOptions, each_interval, follow
    from oversub.run.sources import attach

    if sum([pid is not None, cgroup is not None, all_cgroups]) != 1:
        raise UsageError("watch needs exactly one of: PID, --cgroup PATH, --all")
    if all_cgroups and record_path is not None:
        raise UsageError("--record records one target: use it with PID or --cgroup, not --all")
    config = load_config(Path.cwd())
    thresholds = thresholds_from(config, pop_thresholds(kwargs))
    chosen = WatchFormat(fmt) if fmt else default_watch_format(sys.stdout)
    # Read before the run: a bad OVERSUB_NODE is a usage error now, not after minutes.
    identity = read_identity(os.environ)
    options = SessionOptions(
        interval=resolve_float("interval", interval, config),
        duration=duration,
        thresholds=thresholds,
        max_intervals=1 if once else None,
    )
    if all_cgroups:
        from oversub.cli.nodewatch import watch_node

        return watch_node(chosen, options)
    if cgroup is not None:
        ref, budget = cgroup_target(cgroup)
        target = Target.of_cgroup(ref.path)
    else:
        assert pid is not None
        budget = budget_of(pid)
        target = Target.tree(pid)
    recorder = None
    if record_path is not None:
        from oversub.cli.record.writer import open_recorder

        recorder = open_recorder(
            record_path,
            resolve_float("record_max_mb", record_max_mb, config),
            mode="watch",
            pid=pid,
            command=None,
            interval=options.interval,
            budget=budget,
            thresholds=thresholds,
        )
    with (
        stopsignals.interrupt(),
        contextlib.closing(attach(target, budget)) as source,
        WatchView(
            chosen,
            budget,
            thresholds=thresholds,
            identity=identity,
            recorder=recorder,
            duration=0.0 if once else duration,  # --once ends after this frame
        ) as view,
    ):
        result = follow(source, options, on_round=each_interval(view.interval))
    if recorder is not None:
        from oversub.cli.record.writer import finish_quietly, summary_record

        with stopsignals.deferred():
            failure = finish_quietly(recorder, summary_record(result.summary))
    view.summary(result.summary)
    if recorder is not None and failure is not None:
        from oversub.core.errors import ReportError

        raise ReportError(failure)
    # Ctrl-C is the normal way to leave `watch`: the summary is the answer, exit 130.
    return ExitStatus.INTERRUPTED if result.interrupted else ExitStatus.OK


class WatchView:
    """Receives each interval and the final summary and writes them in one format."""

    def __init__(
        self,
        fmt: WatchFormat,
        budget: Budget,
        *,
        out: TextIO | None = None,
        thresholds: Thresholds | None = None,
        identity: NodeIdentity | None = None,
        recorder: Recorder | None = None,
        duration: float | None = None,
    ) -> None:
        self.fmt = fmt
        self.duration = duration
        """--duration, which the live frame counts down."""
        self.identity = identity
        self.recorder = recorder
        self._history: History | None = None
        self._texts: ProcessTexts | None = None
        """The NDJSON stream's encoded processes (`serialize.ProcessTexts`)."""
        self.budget = budget
        self.thresholds = thresholds
        self.out = out if out is not None else sys.stdout
        self._frames: LiveFrames | None = None

    def __enter__(self) -> WatchView:
        if self.fmt is WatchFormat.LIVE:
            waiting = f"sampling every interval; N = {count(self.budget.vcpus, 'vCPU')} ..."
            self._frames = LiveFrames(waiting).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._frames is not None:
            self._frames.__exit__(*exc)

    def interval(
        self, iv: Interval, assessment: Assessment, intervals: int, elapsed: float
    ) -> None:
        if self.recorder is not None:
            self.recorder.interval(iv, utc_timestamp())
        if self._frames is not None:
            from oversub.render.sparkline import History

            if self._history is None:
                self._history = History()
            self._history.add(iv.t1, iv.totals.demand, iv.vcpus)
        frame = render_watch_interval(
            iv,
            assessment,
            self.budget,
            self.fmt,
            elapsed=elapsed,
            samples=intervals,
            thresholds=self.thresholds,
            timestamp=utc_timestamp(),
            history=tuple(self._history.points) if self._history is not None else (),
            texts=self._ndjson_texts(),
            duration=self.duration,
        )
        if self._frames is not None and frame is not None:
            self._frames.show(frame)
        elif isinstance(frame, str):
            with reader_may_leave():
                self.out.write(frame)
                self.out.flush()

    def _ndjson_texts(self) -> ProcessTexts | None:
        if self.fmt is not WatchFormat.NDJSON:
            return None
        if self._texts is None:
            from oversub.render.serialize import ProcessTexts

            self._texts = ProcessTexts()
        return self._texts

    def summary(self, summary: Summary) -> None:
        report = render_watch_summary(
            summary, self.fmt, timestamp=utc_timestamp(), identity=self.identity
        )
        with reader_may_leave():
            if isinstance(report, str):
                self.out.write(report)
            else:
                console = self._frames.console if self._frames is not None else None
                (console or make_console()).print(report)
            self.out.flush()


def default_watch_format(out: TextIO) -> WatchFormat:
    """Live on a terminal, one JSON line per interval otherwise (a pipe gets no redraws)."""
    return WatchFormat.LIVE if out.isatty() else WatchFormat.NDJSON
