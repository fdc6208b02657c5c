"""The `oversub` group and `main`: command results and errors become exit codes here only.

Each command's module is imported when that command runs (or when `--help` lists them
all): `oversub recommend --format env` in a launch script loads click, this module and
`cli.recommend`, not the options of `check` and `watch` (see `oversub.cli`).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import click

from oversub.cli.options import CONTEXT
from oversub.core.errors import (
    ExitStatus,
    OutputClosed,
    OutputFailed,
    OversubError,
    missing_dependency,
)

COMMANDS: dict[str, str] = {
    name: f"oversub.cli.{name}"
    for name in (
        *("cpus", "recommend", "watch", "check", "report", "diff", "serve", "merge", "stress"),
        "tune",
        "run",
        "doctor",
        "completion",
    )
} | {"check": "oversub.cli.check.command", "tune": "oversub.cli.tune.command"}
"""Command name -> the module that defines it as `command` (one module per command)."""


def command(name: str) -> click.Command:
    """The click command `name`, its module imported now."""
    found: click.Command = importlib.import_module(COMMANDS[name]).command
    return found


class _Commands(click.Group):
    """A group whose commands are imported on first use (`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return command(cmd_name) if cmd_name in COMMANDS else None


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    # Imported here: reading the package metadata costs more than the rest of `recommend`.
    from oversub import __version__

    click.echo(f"oversub, version {__version__}")
    ctx.exit()


@click.group(cls=_Commands, context_settings=CONTEXT)
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
    oversub watch --all               a verdict per cgroup of the node (or --cgroup PATH)
    oversub check -- python train.py  CI gate: exit 1 on costly oversubscription
    oversub serve --all               the verdicts as Prometheus metrics on :9808
    oversub merge out/*.json          one report for a multi-node job's per-node reports
    oversub report run.ndjson         a recording (--record) judged again, with charts
    oversub diff before.ndjson after.ndjson   did the fix help? (exit 1: it made it worse)
    oversub stress --procs 2 --threads 4   a workload to try it on
    oversub tune --procs 2 -- python job.py   measure which thread setting is fastest
    oversub doctor --cpus 2           threads each installed library starts on 2 CPUs
    oversub completion bash           tab completion for bash, zsh or fish
    """


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


def stdout_to_devnull() -> None:
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


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: the one place where command results and exceptions become exit codes.

    Every command returns its exit status (None: 0); nothing else calls sys.exit."""
    _reopen_missing_streams()
    try:
        status = cli.main(args=argv, prog_name="oversub", standalone_mode=False)
    except NO_ARGS_IS_HELP as exc:
        # Click >= 8.2 raises this where 8.1 printed the help and exited 0. `oversub` alone
        # is a person asking what it does: the help on stdout, exit 0 (as pip, docker, gh).
        # A command without the argument it needs (`oversub completion`) is a usage error.
        if exc.ctx is not None and exc.ctx.parent is None:
            click.echo(exc.format_message())
            sys.exit(ExitStatus.OK)
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
    except (OutputClosed, BrokenPipeError):
        # `oversub ... | head`: the reader left; say nothing more.
        stdout_to_devnull()
        sys.exit(ExitStatus.OK)
    except OutputFailed as exc:
        # The interpreter's final flush of what is still buffered must not fail again.
        stdout_to_devnull()
        _error(str(exc))
        sys.exit(exc.status)
    except OversubError as exc:
        _error(str(exc))
        sys.exit(exc.status)
    except click.ClickException as exc:
        _error(exc.format_message())
        sys.exit(ExitStatus.USAGE)
    except Exception as exc:
        missing = missing_dependency(exc)
        if missing is not None:
            _error(missing)
            sys.exit(ExitStatus.UNOBSERVABLE)
        # A bug of ours must not read as "found" (exit 1) in CI, nor drown the log.
        if os.environ.get("OVERSUB_DEBUG") == "1":
            raise
        message = " ".join(str(exc).split())
        _error(f"internal error: {type(exc).__name__}: {message}")
        sys.exit(ExitStatus.UNOBSERVABLE)
    sys.exit(int(status or 0))
