"""`oversub recommend`: threads per process for M processes on the budget N."""

from __future__ import annotations

import os
import sys

import click

from oversub.cli.options import CONTEXT, COUNT, CPUS, PID, format_option, procs_option
from oversub.core.errors import ExitStatus, UsageError
from oversub.render import RecommendFormat


@click.command("recommend", context_settings=CONTEXT)
@procs_option(
    "Processes sharing the CPUs, or 'auto' (torchrun, SLURM, MPI variables).",
    required=True,
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
@format_option(
    RecommendFormat,
    RecommendFormat.TEXT,
    "env: only `export NAME=VALUE` lines, for eval (the shell keeps them for every later "
    "command); prefix: `NAME=VALUE ...` on one line, for one command.",
)
def command(
    procs: int | str, workers: int, pid: int | None, ncpus: int | None, fmt: str
) -> ExitStatus:
    """Threads per process for M processes on this budget: T = max(1, floor(N/M)).

    \b
    Examples:
      oversub recommend --procs 4
      env $(oversub recommend --procs 4 --format prefix) python job.py
      eval "$(oversub recommend --procs 4 --format env)"   # this shell, every later command
      oversub recommend --procs auto --workers 2 --format json
      oversub recommend --procs 8 --cpus 16
    """
    from oversub.analysis.launcher import plan_for_procs
    from oversub.cli.output import colour_for, emit, emit_text, text_width, warn
    from oversub.cli.target import budget_of
    from oversub.render import render_recommend

    if pid is not None and ncpus is not None:
        raise UsageError("--pid and --cpus exclude each other")
    plan = plan_for_procs(budget_of(pid, ncpus), procs, workers, os.environ)
    again = ["oversub", "recommend", "--procs", str(procs)]
    again += ["--workers", str(workers)] if workers else []
    again += ["--pid", str(pid)] if pid is not None else []
    again += ["--cpus", str(ncpus)] if ncpus is not None else []
    command = " ".join(again)
    if fmt == RecommendFormat.TEXT.value:
        colour, width = colour_for(sys.stdout), text_width(sys.stdout)
        text = render_recommend(
            plan, RecommendFormat.TEXT, command=command, colour=colour, width=width
        )
        emit_text(text)
    else:
        emit(render_recommend(plan, RecommendFormat(fmt), command=command))
    warn(plan.warnings, severe=plan.oversubscribed)
    return ExitStatus.OK
