"""`oversub stress`: a reproducible workload of M processes x T busy threads (+ K idle)."""

from __future__ import annotations

import click

from oversub.cli.options import CONTEXT, SECONDS, Whole
from oversub.core.errors import ExitStatus, UsageError
from oversub.run.stressload import MAX_PROCS, MAX_THREADS, MAX_TOTAL_THREADS


@click.command("stress", context_settings=CONTEXT)
@click.option(
    "--procs",
    "-M",
    type=Whole(1, MAX_PROCS),
    required=True,
    help=f"Worker processes (at most {MAX_PROCS}).",
)
@click.option(
    "--threads",
    "-T",
    type=Whole(0, MAX_THREADS),
    required=True,
    help="Busy threads per process (native work that releases the GIL).",
)
@click.option(
    "--idle",
    "-K",
    type=Whole(0, MAX_THREADS),
    default=0,
    show_default=True,
    help="Idle threads per process.",
)
@click.option("--seconds", "-S", type=SECONDS, default=10.0, show_default=True)
def command(procs: int, threads: int, idle: int, seconds: float) -> ExitStatus:
    """Run a reproducible workload: M processes x T busy threads (+ K idle) for S seconds.

    Prints its root pid on stderr, so you can point `oversub watch` at it.

    \b
    Examples:
      oversub stress --procs 2 --threads 4 --seconds 30 &
      oversub check -- oversub stress --procs 2 --threads 1 --seconds 5
    """
    from oversub.run.stressload import run_stress

    if procs * (threads + idle) > MAX_TOTAL_THREADS:
        raise UsageError(
            f"{procs} processes x {threads + idle} threads is more than the "
            f"{MAX_TOTAL_THREADS:,} threads stress starts in all"
        )
    return run_stress(procs, threads, idle, seconds)
