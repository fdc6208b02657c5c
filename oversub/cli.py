"""Command-line wiring: click options in, calls into the package, exit codes out.

Only click and the small model/error modules are imported at start-up: launch scripts run
`oversub recommend ... --format env` on busy machines, so rich, psutil and py-cpuinfo are
imported inside the commands that need them. Errors become exit codes in `main` only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from oversub.cli_options import (
    CONTEXT,
    COUNT,
    CPUS,
    INTERVAL,
    PID,
    POSITIVE,
    SECONDS,
    STRESS_MAX_PROCS,
    STRESS_MAX_THREADS,
    STRESS_MAX_TOTAL,
    WARMUP,
    ReportPath,
    Whole,
    check_mode,
    config_float,
    parse_procs,
    pop_thresholds,
    refuse_flags_of_other_modes,
    threshold_options,
)
from oversub.errors import (
    ExitStatus,
    Interrupted,
    OutputClosed,
    OutputFailed,
    OversubError,
    UsageError,
)
from oversub.model import Budget, Verdict


def _emit(output: Any) -> None:
    """Strings (JSON, env lines) go to stdout as they are; rich renderables via a Console."""
    try:
        if isinstance(output, str):
            click.echo(output, nl=False)
            sys.stdout.flush()
        else:
            from oversub.views import make_console

            make_console().print(output)
    except BrokenPipeError:
        raise OutputClosed("stdout was closed by its reader") from None
    except OSError as exc:
        raise OutputFailed(f"cannot write to stdout: {exc.strerror or exc}") from None


def _budget(pid: int | None, cpus: int | None = None, *, detail: bool = False) -> Budget:
    if cpus is not None:
        from oversub.analysis.recommend import synthetic_budget

        return synthetic_budget(cpus)
    from oversub.probe.budget import read_budget

    return read_budget(pid, detail=detail)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    # Imported here: reading the package metadata costs more than the rest of `recommend`.
    from oversub import __version__

    click.echo(f"oversub, version {__version__}")
    ctx.exit()


@click.group(context_settings=CONTEXT)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version (from the installed package) and exit.",
)
def cli() -> None:
    """Find CPU oversubscription in multi-process jobs and say how to fix it.

    \b
    oversub cpus                      usable CPU budget N and what limits it
    oversub recommend --procs 4       threads per process, exports, binding
    oversub watch PID                 live verdict for a running process tree
    oversub check -- python train.py  CI gate: exit 1 when the job oversubscribes
    oversub stress --procs 2 --threads 4   a workload to try it on
    oversub completion bash           tab completion for bash, zsh or fish
    """


@cli.command(context_settings=CONTEXT)
@click.option(
    "--pid", type=PID, default=None, help="Measure this process [default: oversub itself]."
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("--detail", is_flag=True, help="Add CPU model and flags (py-cpuinfo; ~1 s).")
def cpus(pid: int | None, fmt: str, detail: bool) -> None:
    """Show the usable CPU budget N of a process and where each limit comes from.

    N is the tightest of affinity, cgroup CPU quota (rounded down, at least 1) and cpuset.

    \b
    Examples:
      oversub cpus
      oversub cpus --pid 1234 --format json
      oversub cpus --detail
    """
    from oversub.render import CpusFormat, render_cpus

    _emit(render_cpus(_budget(pid, detail=detail), CpusFormat(fmt)))


@cli.command(context_settings=CONTEXT)
@click.option(
    "--procs",
    "-M",
    "procs",
    type=str,
    metavar="M|auto",
    callback=parse_procs,
    required=True,
    help="Processes sharing the CPUs, or 'auto' (torchrun, SLURM, MPI variables).",
)
@click.option(
    "--workers",
    "-W",
    type=COUNT,
    default=0,
    show_default=True,
    help="Single-thread helper processes per process (DataLoader/pool workers).",
)
@click.option("--pid", type=PID, default=None, help="Use this process's budget.")
@click.option("--cpus", "ncpus", type=CPUS, default=None, help="Use N CPUs instead of measuring.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "env"]),
    default="text",
    show_default=True,
    help="env: only `export NAME=VALUE` lines, for eval.",
)
def recommend(procs: int | str, workers: int, pid: int | None, ncpus: int | None, fmt: str) -> None:
    """Threads per process for M processes on this budget: T = max(1, floor(N/M)).

    \b
    Examples:
      oversub recommend --procs 4
      eval "$(oversub recommend --procs 4 --format env)"
      oversub recommend --procs auto --workers 2 --format json
      oversub recommend --procs 8 --cpus 16
    """
    from oversub.analysis.recommend import make_plan
    from oversub.render import RecommendFormat, render_recommend

    if pid is not None and ncpus is not None:
        raise UsageError("--pid and --cpus exclude each other")
    budget = _budget(pid, ncpus)
    if procs == "auto":
        from oversub.analysis.launcher import plan_for_launcher, procs_from_env

        plan = plan_for_launcher(budget, procs_from_env(os.environ), workers)
    else:
        assert isinstance(procs, int)
        plan = make_plan(budget, procs, workers)
    _emit(render_recommend(plan, RecommendFormat(fmt)))
    _warn(plan.warnings, severe=plan.oversubscribed)


def _warn(warnings: tuple[str, ...], *, severe: bool) -> None:
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
    from oversub.render.live import hanging
    from oversub.views import make_console

    console = make_console(stderr=True)
    style = "bold red" if severe else "yellow"
    for warning in warnings:
        console.print(hanging("oversub: warning: ", warning, style))


@cli.command(context_settings=CONTEXT)
@click.argument("pid", type=PID)
@click.option("--interval", type=INTERVAL, default=None, help="Seconds per sample [1.0].")
@click.option("--duration", type=SECONDS, default=None, help="Stop after this many seconds.")
@click.option("--once", is_flag=True, help="One interval, one report, then exit.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["live", "ndjson", "json"]),
    default=None,
    help="live on a terminal, ndjson otherwise; json = only the final summary.",
)
@threshold_options
def watch(
    pid: int,
    interval: float | None,
    duration: float | None,
    once: bool,
    fmt: str | None,
    **kwargs: Any,
) -> None:
    """Watch a process tree: CPU, threads, run-queue delay, switches, pools; verdict and fix.

    Observes only: exits 0 whatever the verdict (use `oversub check` to gate). Ctrl-C,
    SIGTERM and SIGHUP end it with the summary (exit 130). Thresholds and interval also
    come from [tool.oversub] in ./pyproject.toml; flags win.

    \b
    Examples:
      oversub watch 1234
      oversub watch 1234 --duration 30 --format json > report.json
      oversub watch 1234 --once --format ndjson
    """
    from oversub.config import load_config, thresholds_from
    from oversub.probe.sampler import TreeSampler
    from oversub.render import WatchFormat
    from oversub.runner import ExitWatch
    from oversub.session import SessionOptions, run_session, stop_signals_interrupt
    from oversub.views import WatchView, default_watch_format

    config = load_config(Path.cwd())
    thresholds = thresholds_from(config, pop_thresholds(kwargs))
    budget = _budget(pid)
    chosen = WatchFormat(fmt) if fmt else default_watch_format(sys.stdout)
    options = SessionOptions(
        interval=interval if interval is not None else config_float(config, "interval", 1.0),
        duration=duration,
        thresholds=thresholds,
        max_intervals=1 if once else None,
    )
    with (
        stop_signals_interrupt(),
        TreeSampler.for_budget(pid, budget) as sampler,
        ExitWatch(pid) as target,
        WatchView(chosen, budget, thresholds=thresholds) as view,
    ):
        # A target that exits mid-interval ends the run now, not at the end of the interval.
        result = run_session(
            sampler, budget, options, on_interval=view.interval, should_stop=target.gone
        )
    view.summary(result.summary)
    if result.interrupted:
        # Ctrl-C is the normal way to leave `watch`: the summary is the answer, exit 130.
        raise Interrupted("interrupted")


@cli.command(context_settings={**CONTEXT, "ignore_unknown_options": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--pid", type=PID, default=None, help="Attach to this running tree.")
@click.option("--duration", type=SECONDS, default=None, help="With --pid: seconds to sample.")
@click.option("--procs", "-M", type=POSITIVE, default=None, help="Static preflight: processes.")
@click.option(
    "--threads", "-T", type=POSITIVE, default=None, help="Static preflight: threads each."
)
@click.option(
    "--workers",
    "-W",
    type=COUNT,
    default=None,
    help="Static preflight: single-thread workers per process [0].",
)
@click.option("--cpus", "ncpus", type=CPUS, default=None, help="Static preflight: N CPUs.")
@click.option("--interval", type=INTERVAL, default=None, help="Seconds per sample [1.0].")
@click.option(
    "--warmup",
    type=WARMUP,
    default=None,
    help="With a command: seconds ignored at start (imports, pool start-up) [1.0].",
)
@click.option(
    "--timeout",
    type=SECONDS,
    default=None,
    help="With a command: end it after this many seconds (TERM, then KILL); not a failure.",
)
@click.option(
    "--fail-on",
    type=click.Choice([v.value for v in Verdict if v is not Verdict.OK]),
    default=None,
    help="Fail on this verdict or worse [oversubscribed].",
)
@click.option(
    "--json",
    "json_path",
    type=ReportPath(),
    default=None,
    help="Write the JSON report here.",
)
@click.option(
    "--junit",
    "junit_path",
    type=ReportPath(),
    default=None,
    help="Write a JUnit XML report here.",
)
@click.option(
    "--markdown",
    "markdown_path",
    type=ReportPath(),
    default=None,
    help="Write a Markdown report here.",
)
@threshold_options
def check(
    command: tuple[str, ...],
    pid: int | None,
    duration: float | None,
    procs: int | None,
    threads: int | None,
    workers: int | None,
    ncpus: int | None,
    interval: float | None,
    warmup: float | None,
    timeout: float | None,
    fail_on: str | None,
    json_path: Path | None,
    junit_path: Path | None,
    markdown_path: Path | None,
    **kwargs: Any,
) -> None:
    """CI gate: exit 1 when a job oversubscribes its CPUs (see README for all exit codes).

    \b
    Three ways:
      oversub check [options] -- CMD ARGS...     run CMD and sample its whole tree
      oversub check --pid PID --duration S       attach to a running tree
      oversub check --procs M --threads T [--workers W] [--cpus N]   static preflight
    Defaults also come from [tool.oversub] in ./pyproject.toml; flags win.

    \b
    Examples:
      oversub check --timeout 120 --junit oversub.xml -- python train.py --smoke
      oversub check --pid 1234 --duration 20 --fail-on at-risk
      oversub check --procs 4 --threads 8 --cpus 16
    """
    from oversub.check import CheckOptions, check_command, check_pid, check_static
    from oversub.config import load_config, thresholds_from
    from oversub.session import SessionOptions

    mode = check_mode(command, pid, procs, threads)
    refuse_flags_of_other_modes(
        mode,
        {
            "--duration": duration,
            "--timeout": timeout,
            "--warmup": warmup,
            "--interval": interval,
            "--workers": workers,
            "--cpus": ncpus,
        },
    )
    if ncpus is not None and pid is not None:
        raise UsageError("--pid and --cpus exclude each other")
    config = load_config(Path.cwd())
    thresholds = thresholds_from(config, pop_thresholds(kwargs))

    def setting(flag: Any, key: str, default: Any) -> Any:
        return flag if flag is not None else config.get(key, default)

    opts = CheckOptions(
        fail_on=Verdict(setting(fail_on, "fail-on", Verdict.OVERSUBSCRIBED.value)),
        session=SessionOptions(
            interval=float(setting(interval, "interval", 1.0)),
            duration=duration,
            warmup=float(setting(warmup, "warmup", 1.0)) if mode == "command" else 0.0,
            thresholds=thresholds,
        ),
        timeout=setting(timeout, "timeout", None),
        json_path=json_path,
        junit_path=junit_path,
        markdown_path=markdown_path,
    )
    if mode == "static":
        assert procs is not None and threads is not None
        status = check_static(_budget(pid, ncpus), procs, threads, workers or 0, opts)
    elif mode == "command":
        # CMD inherits our affinity and cgroup, so our own budget is its budget (and reading
        # it before CMD starts cannot race with a command that exits at once).
        status = check_command(list(command), _budget(None), opts)
    else:
        assert pid is not None
        status = check_pid(pid, _budget(pid), opts)
    sys.exit(int(status))


@cli.command(context_settings=CONTEXT)
@click.option(
    "--procs",
    "-M",
    type=Whole(1, STRESS_MAX_PROCS),
    required=True,
    help=f"Worker processes (at most {STRESS_MAX_PROCS}).",
)
@click.option(
    "--threads",
    "-T",
    type=Whole(0, STRESS_MAX_THREADS),
    required=True,
    help="Busy threads per process (native work that releases the GIL).",
)
@click.option(
    "--idle",
    "-K",
    type=Whole(0, STRESS_MAX_THREADS),
    default=0,
    show_default=True,
    help="Idle threads per process.",
)
@click.option("--seconds", "-S", type=SECONDS, default=10.0, show_default=True)
def stress(procs: int, threads: int, idle: int, seconds: float) -> None:
    """Run a reproducible workload: M processes x T busy threads (+ K idle) for S seconds.

    Prints its root pid on stderr, so you can point `oversub watch` at it.

    \b
    Examples:
      oversub stress --procs 2 --threads 4 --seconds 30 &
      oversub check -- oversub stress --procs 2 --threads 1 --seconds 5
    """
    from oversub.stress import run_stress

    if procs * (threads + idle) > STRESS_MAX_TOTAL:
        raise UsageError(
            f"{procs} processes x {threads + idle} threads is more than the "
            f"{STRESS_MAX_TOTAL:,} threads stress starts in all"
        )
    sys.exit(run_stress(procs, threads, idle, seconds))


@cli.command(context_settings=CONTEXT, no_args_is_help=True)
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]), metavar="SHELL")
def completion(shell: str) -> None:
    """Print the tab-completion script for SHELL (bash, zsh or fish).

    It completes commands, options and their values (formats, verdicts, paths).

    \b
    Examples:
      eval "$(oversub completion bash)"     # in ~/.bashrc
      oversub completion bash > ~/.local/share/bash-completion/completions/oversub
      eval "$(oversub completion zsh)"      # in ~/.zshrc, after compinit
      oversub completion fish > ~/.config/fish/completions/oversub.fish
    """
    from oversub.completion import completion_script

    _emit(completion_script(cli, shell))


class _NeverRaised(click.UsageError):
    """Stands in for NoArgsIsHelpError on click versions that do not have it."""


NO_ARGS_IS_HELP: type[click.UsageError] = getattr(
    click.exceptions, "NoArgsIsHelpError", _NeverRaised
)


def _error(message: str) -> None:
    # One line whatever the input held: a newline or an escape sequence in a path or an
    # argument is shown escaped ("\\n", "\\x1b"), never passed to the terminal or the log.
    from oversub.render.escape import terminal

    click.echo(f"oversub: error: {terminal(message)}", err=True)


def _interrupted() -> None:
    click.echo("oversub: interrupted", err=True)


def _stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null: the reader left, and the interpreter's final flush of
    buffered output must not fail again (see "Note on SIGPIPE" in Python's signal docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        pass  # stdout is not a real file (tests) or is gone already
    finally:
        os.close(devnull)


def _reopen_missing_streams() -> None:
    """Started with fd 1 or 2 closed, Python sets sys.stdout/stderr to None: write to
    /dev/null instead of failing on the first report line."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives until exit
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives until exit


def main(argv: list[str] | None = None) -> None:
    """Entry point: the one place where exceptions become exit codes."""
    _reopen_missing_streams()
    try:
        cli.main(args=argv, prog_name="oversub", standalone_mode=False)
    except NO_ARGS_IS_HELP as exc:
        # `oversub` alone: the help text, not an error line (click >= 8.2 raises this).
        click.echo(exc.format_message(), err=True)
        sys.exit(ExitStatus.USAGE)
    except click.UsageError as exc:
        hint = f" (try '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        _error(exc.format_message().replace("\n", " ") + hint)
        sys.exit(ExitStatus.USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        # A stop signal is no error: one line says why the output ends here.
        _interrupted()
        sys.exit(ExitStatus.INTERRUPTED)
    except Interrupted:
        sys.exit(ExitStatus.INTERRUPTED)  # the summary was printed: nothing more to say
    except (OutputClosed, BrokenPipeError):
        # `oversub ... | head`: the reader left; say nothing more.
        _stdout_to_devnull()
        sys.exit(ExitStatus.OK)
    except OutputFailed as exc:
        # The interpreter's final flush of what is still buffered must not fail again.
        _stdout_to_devnull()
        _error(str(exc))
        sys.exit(exc.status)
    except OversubError as exc:
        _error(str(exc))
        sys.exit(exc.status)
    except click.ClickException as exc:
        _error(exc.format_message())
        sys.exit(ExitStatus.USAGE)
    except Exception as exc:
        # A bug of ours must not read as "found" (exit 1) in CI, nor drown the log.
        if os.environ.get("OVERSUB_DEBUG") == "1":
            raise
        message = " ".join(str(exc).split())
        _error(f"internal error: {type(exc).__name__}: {message}")
        sys.exit(ExitStatus.UNOBSERVABLE)
