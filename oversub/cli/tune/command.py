"""`oversub tune -- CMD`: run CMD under several thread settings and measure which is fastest.

The command validates its flags; `cli.tune.driver` builds the candidates, runs the trials
(`cli.tune.loop`) and reports (`tuning.view`, `tuning.exports`). Only click is imported here
(start-up).
"""

from __future__ import annotations

from pathlib import Path

import click

from oversub.cli.options import (
    CONTEXT,
    COUNT,
    POSITIVE,
    SECONDS,
    Number,
    ReportPath,
    format_option,
    procs_option,
    setting_option,
)
from oversub.core.errors import ExitStatus, UsageError
from oversub.tuning import TuneFormat

DEFAULT_BUDGET = "5m"
DEFAULT_TRIAL_SECONDS = 10.0
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """`--budget`: seconds, or a number with s, m (min) or h: "90s", "10m", "1.5h"."""
    import re

    if value is None:
        return None
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(s|m|min|h)?", value.strip())
    if match is None or not value.isascii():
        raise click.BadParameter(f"{value!r} is not a duration such as 90s, 10m or 1h")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
    if not 0 < seconds <= 7 * 86400:
        raise click.BadParameter(f"{value!r}: a budget is more than 0 s and at most 7 days")
    return seconds


@click.command("tune", context_settings={**CONTEXT, "ignore_unknown_options": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@procs_option(
    "Processes CMD runs (the recommendation is floor(N/M)); 'auto' or not given: from "
    "torchrun, SLURM, MPI variables, else the processes the first trial keeps busy, else 1.",
)
@click.option(
    "--procs-values",
    metavar="1,2,4",
    default=None,
    help="Also vary the process count: {procs} in CMD's arguments and OVERSUB_TUNE_PROCS.",
)
@click.option(
    "--env",
    "env_dims",
    multiple=True,
    metavar="NAME=V1,V2",
    help="A custom dimension: try each value of NAME (repeatable).",
)
@click.option(
    "--max-trials",
    type=POSITIVE,
    default=8,
    show_default=True,
    help="At most this many candidate settings.",
)
@click.option(
    "--warmup",
    type=COUNT,
    default=None,
    help="Discarded runs per candidate [1 for fixed work, 0 with --metric].",
)
@click.option(
    "--runs",
    type=POSITIVE,
    default=None,
    help="Timed runs per candidate [as many as fit the budget, 2 to 10].",
)
@click.option(
    "--metric",
    metavar="NAME",
    default=None,
    help="Fixed time: the figure is the NAME=<number> CMD prints (higher is better); "
    "each trial runs --trial-seconds.",
)
@click.option(
    "--metric-stat",
    type=click.Choice(["last", "mean"]),
    default="last",
    show_default=True,
    help="With --metric: the last NAME= value of a trial, or the mean of all of them.",
)
@click.option(
    "--trial-seconds",
    type=SECONDS,
    default=None,
    help=f"With --metric: seconds each trial runs before its tree is stopped "
    f"[{DEFAULT_TRIAL_SECONDS:g}].",
)
@click.option(
    "--budget",
    "budget_s",
    metavar="DURATION",
    callback=parse_duration,
    default=DEFAULT_BUDGET,
    show_default=True,
    help="Bound of the whole run (90s, 10m, 1h): the trials are planned to fit it.",
)
@click.option(
    "--fail-if-slower",
    type=Number(0.0, min_open=True),
    default=None,
    metavar="PCT",
    help="Exit 1 when the default is more than PCT % slower than the best (beyond noise).",
)
@format_option(TuneFormat, TuneFormat.TEXT)
@click.option("--json", "json_path", type=ReportPath(), default=None, help="Write JSON here.")
@click.option(
    "--record",
    "record_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep each trial's recording in this directory (for `report` and `diff`).",
)
@click.option(
    "--show-output",
    is_flag=True,
    help="Pass CMD's stdout on to stderr (by default it is discarded, its stderr shown).",
)
@setting_option("interval")
def command(
    command: tuple[str, ...],
    procs: int | str | None,
    procs_values: str | None,
    env_dims: tuple[str, ...],
    max_trials: int,
    warmup: int | None,
    runs: int | None,
    metric: str | None,
    metric_stat: str,
    trial_seconds: float | None,
    budget_s: float,
    fail_if_slower: float | None,
    fmt: str,
    json_path: Path | None,
    record_dir: Path | None,
    show_output: bool,
    interval: float | None,
) -> ExitStatus:
    """Measure which thread setting makes CMD fastest on this machine.

    Runs CMD under each candidate (the default as inherited, oversub's recommendation
    floor(N/M), 1 thread, powers of two and neighbours), interleaved, each trial watched
    as `check` watches it; reports throughput with 95 % intervals, the speed-up over the
    default, each verdict, and the setting to paste. Exit 0 measured, 1 --fail-if-slower,
    2 usage, 3 not measurable (the default run failed), 130 interrupted.

    \b
    Examples:
      oversub tune --procs 2 -- python train.py --smoke
      oversub tune --metric steps_per_s --trial-seconds 8 -- python bench.py
      oversub tune --procs-values 1,2,4 -- python job.py --workers {procs}
      oversub tune --env POLARS_MAX_THREADS=1,2 --format json -- python etl.py
    """
    from oversub.cli.tune.driver import tune
    from oversub.tuning.trials import TuneOptions

    if not command:
        raise UsageError("tune needs a command: oversub tune [options] -- CMD ARGS...")
    if metric is None and trial_seconds is not None:
        raise UsageError("--trial-seconds only applies with --metric (fixed time)")
    if metric is None and metric_stat != "last":
        raise UsageError("--metric-stat only applies with --metric")
    opts = TuneOptions(
        procs=procs,
        procs_values=procs_values,
        env_dims=env_dims,
        max_candidates=max_trials,
        warmup=warmup if warmup is not None else (0 if metric else 1),
        runs=runs,
        metric=metric,
        metric_stat=metric_stat,
        trial_seconds=(trial_seconds or DEFAULT_TRIAL_SECONDS) if metric else None,
        budget_s=budget_s,
        fail_if_slower=fail_if_slower,
        fmt=fmt,
        json_path=json_path,
        record_dir=record_dir,
        show_output=show_output,
        interval=interval,
    )
    return tune(list(command), opts)
