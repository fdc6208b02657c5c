"""`oversub cpus`: the usable CPU budget N and where each limit comes from."""

from __future__ import annotations

import click

from oversub.cli.options import CONTEXT, PID, format_option
from oversub.core.errors import ExitStatus
from oversub.render import CpusFormat


@click.command("cpus", context_settings=CONTEXT)
@click.option(
    "--pid", type=PID, default=None, help="Measure this process [default: oversub itself]."
)
@format_option(CpusFormat, CpusFormat.TEXT)
@click.option("--detail", is_flag=True, help="Add CPU model and flags (py-cpuinfo; ~1 s).")
def command(pid: int | None, fmt: str, detail: bool) -> ExitStatus:
    """Show the usable CPU budget N of a process and where each limit comes from.

    N is the tightest of affinity, cgroup CPU quota (rounded down, at least 1) and cpuset.

    \b
    Examples:
      oversub cpus
      oversub cpus --pid 1234 --format json
      oversub cpus --detail
    """
    import sys

    from oversub.cli.output import colour_for, emit, emit_text, text_width
    from oversub.cli.target import budget_of
    from oversub.render import render_cpus

    budget = budget_of(pid, detail=detail)
    if CpusFormat(fmt) is CpusFormat.TEXT:
        colour, width = colour_for(sys.stdout), text_width(sys.stdout)
        emit_text(render_cpus(budget, CpusFormat.TEXT, colour=colour, width=width))
    else:
        emit(render_cpus(budget, CpusFormat(fmt)))
    return ExitStatus.OK
