"""`oversub run -- CMD`: runs CMD with every runtime of every process of its tree sized to
the plan, and proves it did (docs/run.md)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from oversub.cli.options import CONTEXT, COUNT, CPUS, POSITIVE, procs_option, setting_option
from oversub.core.errors import CommandError, ExitStatus, UsageError

if TYPE_CHECKING:
    from oversub.core.cures import Cure
    from oversub.core.model import Budget


@click.command("run", context_settings={**CONTEXT, "ignore_unknown_options": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@procs_option(
    "Processes sharing the CPUs; 'auto': the launcher's (torchrun, SLURM, MPI), else "
    "the tree's own count as it starts.",
    default="auto",
    show_default=True,
)
@click.option(
    "--workers",
    "-W",
    type=COUNT,
    default=0,
    show_default=True,
    help="Single-thread workers per process (DataLoader/pool workers).",
)
@click.option(
    "--threads", "-T", type=POSITIVE, default=None, help="Threads of each process (not a plan's)."
)
@click.option("--cpus", "ncpus", type=CPUS, default=None, help="Plan for N CPUs, not measured.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan, the variables and the hooks that would act; run nothing.",
)
@click.option("--quiet", "-q", is_flag=True, help="No lines of oversub's own but errors.")
@setting_option("interval")
@setting_option("warmup")
def command(
    command: tuple[str, ...],
    procs: int | str,
    workers: int,
    threads: int | None,
    ncpus: int | None,
    dry_run: bool,
    quiet: bool,
    interval: float | None,
    warmup: float | None,
) -> int:
    """Run CMD with every thread pool of every process of its tree sized to the plan, and
    say for each runtime and process: sized, kept (your own setting) or escaped.

    CMD's output and exit status pass through (exit: CMD's status, 127 or 126 when it
    cannot start, 130 when interrupted); oversub's lines go to stderr.

    \b
    Examples:
      oversub run -- python train.py
      oversub run --procs 4 --workers 2 -- python train.py
      oversub run --dry-run -- python train.py
      torchrun --nproc-per-node 4 oversub run -- python train.py
    """
    from oversub.cli.config import load_config, resolve_float
    from oversub.cli.target import budget_of
    from oversub.run.session import SessionOptions

    if not command and not dry_run:
        raise UsageError("no command given after -- (oversub run [options] -- CMD ARGS...)")
    cure = make_cure_for(budget_of(None, ncpus), procs, workers, threads)
    if dry_run:
        return _dry_run(cure, command)
    config = load_config(__import__("pathlib").Path.cwd())
    session = SessionOptions(
        interval=resolve_float("interval", interval, config),
        warmup=resolve_float("warmup", warmup, config),
    )
    return _run(list(command), cure, session, quiet=quiet)


def make_cure_for(budget: Budget, procs: int | str, workers: int, threads: int | None) -> Cure:
    """The cure of `--procs/--workers/--threads` on `budget` (also `check --apply`'s)."""
    from oversub.analysis.cureplan import make_cure
    from oversub.analysis.launcher import launcher_set, plan_for_procs

    tree = procs == "auto" and not launcher_set(os.environ)
    plan = plan_for_procs(budget, 1 if tree else procs, workers, os.environ)
    return make_cure(plan, os.environ, tree=tree, threads=threads)


def _dry_run(cure: Cure, command: tuple[str, ...]) -> int:
    from oversub.cli.output import emit_text
    from oversub.hook._oversub_hook.knobs import KNOBS
    from oversub.run.curing import installed_modules

    interpreter = command[0] if command and _is_python(command[0]) else sys.executable
    installed = installed_modules(interpreter, [k[0] for k in KNOBS])
    from oversub.render.cure_text import dry_run

    emit_text(dry_run(cure, KNOBS, installed, interpreter))
    return ExitStatus.OK


def _is_python(program: str) -> bool:
    return os.path.basename(program).startswith(("python", "pypy"))


def _run(argv: list[str], cure: Cure, session: object, *, quiet: bool) -> int:
    from oversub.analysis.cured import verdicts
    from oversub.render import cure_text
    from oversub.run.checking import Silent
    from oversub.run.curing import run_cured
    from oversub.run.session import SessionOptions

    assert isinstance(session, SessionOptions)
    say = _Say(quiet)
    say(cure_text.plan_line(cure))
    for line in cure_text.variable_lines(cure):
        say(line)
    for warning in cure.plan.warnings:
        say(f"{cure_text.PREFIX}note: {warning}")
    try:
        cured = run_cured(argv, cure, cure.plan.budget, session, Silent())
    except CommandError as exc:
        cause = exc.__cause__
        missing = isinstance(cause, FileNotFoundError)
        click.echo(f"oversub run: error: {_escaped(str(exc))}", err=True)
        return 127 if missing else 126
    outcome = cured.outcome
    lines = verdicts(
        cured.records,
        cured.watch,
        fallback=cure.threads or cure.plan.budget.vcpus,
        kept_vars=cure.variables.kept,
        tree=cure.tree,
    )
    for line in cure_text.verification(lines):
        say(line)
    status = _status(outcome.command_status, outcome.interrupted)
    summary = outcome.summary
    verdict = None if summary.verdict is None else summary.verdict.value
    demand = summary.totals.demand if summary.samples else None
    told = "interrupted" if outcome.interrupted else f"exit {status} (the command's)"
    say(cure_text.closing_line(verdict, demand, summary.budget.vcpus, told))
    return status


def _status(command_status: int | None, interrupted: bool) -> int:
    """CMD's exit status as a shell gives it (128 + N for a signal); 130 when interrupted."""
    if interrupted:
        return ExitStatus.INTERRUPTED
    if command_status is None:
        return ExitStatus.UNOBSERVABLE
    return 128 - command_status if command_status < 0 else command_status


def _escaped(text: str) -> str:
    from oversub.render.escape import terminal

    return terminal(text)


class _Say:
    """oversub's own lines on stderr (none with --quiet); a closed stderr loses them only."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, line: str) -> None:
        if self.quiet:
            return
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            self.quiet = True
