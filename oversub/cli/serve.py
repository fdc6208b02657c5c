"""`oversub serve`: the verdicts of a process tree, a cgroup or every cgroup of the node as
Prometheus metrics, on /metrics and/or in a file for node_exporter's textfile collector.

Sampling runs in this thread (`run.exporter`, which owns the clock); prometheus-client's HTTP
server answers scrapes from its own thread through a custom collector that reads the latest
state whole, so a scrape never waits for a sample. prometheus-client is imported here only:
no other command pays for it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from oversub.cli.options import CONTEXT, PID, Whole, setting_option, threshold_options
from oversub.core.errors import ExitStatus, OversubError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from oversub.core.targets import Exported
    from oversub.run.exporter import Exporter
    from oversub.run.session import SessionOptions

DEFAULT_PORT = 9808
TEXTFILE = "oversub.prom"


class ServeError(OversubError):
    """The exporter cannot listen where asked (port in use, address not here)."""


@click.command("serve", context_settings=CONTEXT)
@click.option("--pid", type=PID, default=None, help="Export this process tree.")
@click.option(
    "--cgroup",
    "cgroup",
    metavar="PATH",
    default=None,
    help="Export every process of this cgroup, judged against its own budget.",
)
@click.option(
    "--all", "all_cgroups", is_flag=True, help="Export every cgroup that holds load, and the node."
)
@click.option(
    "--port",
    type=Whole(0, 65535),
    default=None,
    help=(
        f"Serve /metrics on this TCP port [{DEFAULT_PORT}; none with only --textfile]; "
        "0: a free port, named on stderr."
    ),
)
@click.option("--bind", metavar="ADDR", default="0.0.0.0", show_default=True, help="Listen here.")
@click.option(
    "--top",
    type=Whole(1, 1000),
    default=20,
    show_default=True,
    help="With --all: export at most this many targets (worst verdict, then demand, first).",
)
@click.option(
    "--textfile",
    type=click.Path(exists=True, file_okay=False, writable=True, path_type=Path),
    default=None,
    help=f"Also write the metrics to DIR/{TEXTFILE} after every sample (node_exporter).",
)
@click.option(
    "--name",
    default=None,
    metavar="NAME",
    help="The target label of a --pid tree [tree], and DIR/oversub-NAME.prom.",
)
@setting_option("interval")
@threshold_options("serve")
def command(
    pid: int | None,
    cgroup: str | None,
    all_cgroups: bool,
    port: int | None,
    bind: str,
    top: int,
    textfile: Path | None,
    name: str | None,
    interval: float | None,
    **kwargs: Any,
) -> ExitStatus:
    """Export verdicts and their evidence as Prometheus metrics (docs/metrics.md).

    Runs until stopped: SIGINT, SIGTERM or SIGHUP end it (exit 130) and remove the textfile.

    \b
    Examples:
      oversub serve --all                       every cgroup with load, on :9808/metrics
      oversub serve --cgroup /slurm/uid_0/job_42 --port 9900
      oversub serve --pid 1234 --name trainer --textfile /var/lib/node_exporter
    """
    from oversub.cli.config import load_config, resolve_float, thresholds_from
    from oversub.cli.options import pop_thresholds
    from oversub.run import stopsignals
    from oversub.run.session import SessionOptions

    targets = sum([pid is not None, cgroup is not None, all_cgroups])
    # No default target: a bare `oversub serve` would publish every cgroup of the node on
    # every interface (--bind 0.0.0.0); `serve --port 0` is asked to say which.
    if targets == 0:
        raise UsageError(
            "serve needs a target: --pid PID, --cgroup PATH or --all (every cgroup of the "
            "node), e.g. oversub serve --all --port 0"
        )
    if targets > 1:
        raise UsageError("serve takes one target: --pid PID, --cgroup PATH or --all, not several")
    if name is not None and (not name or not all(c.isalnum() or c in "-_." for c in name)):
        raise UsageError(f"--name {name!r}: use letters, digits, '-', '_' and '.' only")
    config = load_config(Path.cwd())
    options = SessionOptions(
        interval=resolve_float("interval", interval, config),
        thresholds=thresholds_from(config, pop_thresholds(kwargs)),
    )
    if textfile is None and port is None:
        port = DEFAULT_PORT
    with stopsignals.interrupt():
        exporter = _exporter(pid, cgroup, all_cgroups, name or "tree", options, top)
        path = None
        if textfile is not None:
            from oversub.cli.writtenfiles import check_report_path

            named = textfile / (f"oversub-{name}.prom" if name else TEXTFILE)
            path = check_report_path("--textfile", named)
            exporter.on_update = Textfile(path)
        if all_cgroups:
            from oversub.cli.nodewatch import RootHint

            exporter.on_update = RootHint(then=exporter.on_update)
        server = None if port is None else _listen(exporter, bind, port)
        click.echo(listening_line(server, path), err=True)
        try:
            result = exporter.run()
        finally:
            exporter.source.close()
            if server is not None:
                server.shutdown()
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
    return ExitStatus.INTERRUPTED if result.interrupted else ExitStatus.OK


def _exporter(
    pid: int | None,
    cgroup: str | None,
    all_cgroups: bool,
    name: str,
    options: SessionOptions,
    top: int,
) -> Exporter:
    from oversub import __version__
    from oversub.core.targets import Target
    from oversub.run.exporter import Exporter
    from oversub.run.sources import attach

    if all_cgroups:
        target = Target.node()
    elif cgroup is not None:
        target = Target.of_cgroup(cgroup)
    else:
        assert pid is not None
        target = Target.tree(pid, name=name)
    return Exporter(attach(target), options, top=top, only_loaded=all_cgroups, version=__version__)


def _client_families(state: Exported) -> Iterator[Any]:
    """`render.prometheus.families` as prometheus-client metric families."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from oversub.render.prometheus import families

    for family in families(state):
        kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
        metric = kind(family.name, family.help, labels=list(family.labels))
        for labels, value in family.samples:
            metric.add_metric(list(labels), value)
        yield metric


class _Collector:
    """A custom collector: the latest state, read whole at each scrape (`Exporter.latest`)."""

    def __init__(self, latest: Callable[[], Exported]) -> None:
        self.latest = latest

    def collect(self) -> Iterator[Any]:
        return _client_families(self.latest())


def _listen(exporter: Exporter, bind: str, port: int) -> Any:
    """Serve /metrics: our families and the client's process_* and python_* metrics."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.gc_collector import GCCollector
    from prometheus_client.platform_collector import PlatformCollector
    from prometheus_client.process_collector import ProcessCollector

    registry = CollectorRegistry()
    registry.register(_Collector(exporter.latest))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    try:
        server, _thread = start_http_server(port, addr=bind, registry=registry)
    except OSError as error:
        raise ServeError(f"cannot listen on {bind}:{port}: {error.strerror or error}") from None
    return server


def listening_line(server: Any, textfile: Path | None) -> str:
    """What `serve` prints on stderr once it serves: the URL to scrape (with the port the
    system gave for `--port 0`) and the file it writes."""
    from oversub.render.escape import terminal

    parts = []
    if server is not None:
        host, port = server.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        parts.append(f"http://{shown}:{port}/metrics")
    if textfile is not None:
        parts.append(f"writing {terminal(str(textfile))} after every sample")
    return "oversub serve: " + "; ".join(parts)


def exposition(state: Exported) -> bytes:
    """The text exposition of our families alone (no process_* / python_*)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(_Collector(lambda: state))
    data: bytes = generate_latest(registry)
    return data


def write_textfile(path: Path, state: Exported) -> None:
    """Replace `path` (a target from `writtenfiles.check_report_path`) atomically: a
    temporary file created exclusively in the same directory, whose name does not end in
    .prom (node_exporter ignores it), fsync'ed and renamed over the old one; OSError when
    it cannot be done (the old file is then untouched, no temporary file left)."""
    from oversub.cli.writtenfiles import Replacement

    replacement = Replacement(path)
    replacement.write(exposition(state))
    replacement.commit()


class Textfile:
    """The exporter's `on_update` for --textfile: each sample written to the file. A write
    that fails (a full disk, a directory made read-only) is skipped: the warning names the
    directory once, /metrics goes on serving, the next sample tries again (and a line says
    when it succeeds again)."""

    def __init__(self, path: Path, err: TextIO | None = None) -> None:
        self.path = path
        self.err = err
        self.failing = False

    def __call__(self, state: Exported) -> None:
        try:
            write_textfile(self.path, state)
        except OSError as error:
            if not self.failing:
                self._say(
                    f"warning: cannot write {self.path} in {self.path.parent}: "
                    f"{error.strerror or error}; skipped, /metrics goes on, "
                    "each later sample tries again"
                )
            self.failing = True
            return
        if self.failing:
            self._say(f"{self.path} is written again")
            self.failing = False

    def _say(self, message: str) -> None:
        import sys

        from oversub.render.escape import terminal

        out = self.err if self.err is not None else sys.stderr
        with contextlib.suppress(OSError, ValueError):
            out.write(f"oversub serve: {terminal(message)}\n")
            out.flush()
