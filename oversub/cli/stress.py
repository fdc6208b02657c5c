"""`oversub stress`: a reproducible workload of M processes x a team of T threads (+ K idle)."""

from __future__ import annotations

import click

from oversub.cli.options import CONTEXT, SECONDS, Whole
from oversub.core.errors import ExitStatus, UsageError
from oversub.run.stressload import (
    DEFAULT_SECONDS,
    FLAG,
    MAX_PROCS,
    MAX_THREADS,
    MAX_TOTAL_THREADS,
    MODES,
    TEAM_VARIABLE,
)


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
    default=None,
    help=f"Threads per process: the team's size (hash: busy threads). Default: "
    f"{TEAM_VARIABLE} (team mode), else every usable vCPU, as an OpenMP team.",
)
@click.option(
    "--idle",
    "-K",
    type=Whole(0, MAX_THREADS),
    default=0,
    show_default=True,
    help="Idle threads per process.",
)
@click.option("--seconds", "-S", type=SECONDS, default=DEFAULT_SECONDS, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=MODES[0],
    show_default=True,
    help="team: threads in lockstep rounds that spin at a barrier, like an OpenMP team "
    "(oversubscribing it costs multiples; prints rounds_per_s=); hash: independent hashing "
    "threads (it costs little).",
)
def command(procs: int, threads: int | None, idle: int, seconds: float, mode: str) -> ExitStatus:
    """Run a reproducible workload: M processes x a team of T threads (+ K idle) for S seconds.

    Prints its root pid on stderr, so you can point `oversub watch` at it, and, at the end,
    the teams' throughput on stdout (`rounds_per_s=...`, for `--metric`).

    \b
    Examples:
      oversub stress --procs 2 &
      oversub check -- oversub stress --procs 2 --seconds 10
      OMP_NUM_THREADS=1 oversub check -- oversub stress --procs 2 --seconds 10
      oversub stress --procs 4 --threads 2 --mode hash --seconds 30
    """
    import os

    from oversub.probe.budget import read_budget
    from oversub.run.stressload import Mode, team_size
    from oversub.run.stressroot import run_stress

    chosen: Mode = "team" if mode == "team" else "hash"
    size = team_size(threads, os.environ, read_budget().vcpus if threads is None else 0, chosen)
    if procs * (size.threads + idle) > MAX_TOTAL_THREADS:
        raise UsageError(
            f"{procs} processes x {size.threads + idle} threads is more than the "
            f"{MAX_TOTAL_THREADS:,} threads stress starts in all"
            + (
                ""
                if size.source == FLAG
                else f" (T = {size.threads}: {size.source}; give --threads)"
            )
        )
    if size.note is not None:
        click.echo(size.note, err=True)
    return run_stress(procs, size.threads, idle, seconds, mode=chosen, size=size)
