"""`oversub diff BEFORE AFTER`: did the fix help? Two recordings side by side, and a gate."""

from __future__ import annotations

from pathlib import Path

import click

from oversub.cli.options import CONTEXT, Number, format_option
from oversub.core.errors import ExitStatus
from oversub.recording import DiffFormat


@click.command("diff", context_settings=CONTEXT)
@click.argument("before", type=click.Path(path_type=Path, dir_okay=True))
@click.argument("after", type=click.Path(path_type=Path, dir_okay=True))
@format_option(DiffFormat, DiffFormat.TEXT)
@click.option(
    "--metric",
    default=None,
    metavar="NAME",
    help="Also judge this figure, recorded by `check --metric NAME` (higher is better); "
    "every figure both recordings hold is shown without it.",
)
@click.option(
    "--tolerance",
    type=Number(0.0, 1.0),
    default=0.05,
    show_default=True,
    help="How much lower AFTER's --metric may be, as a share of BEFORE's, and not be worse.",
)
def command(
    before: Path, after: Path, fmt: str, metric: str | None, tolerance: float
) -> ExitStatus:
    """Compare two recordings (`--record`): verdict, demand, delay ratio, active threads,
    switches and the throughputs both recorded, side by side with the change.

    Exit 0 when AFTER is not worse than BEFORE, 1 when it is: a worse verdict, a delay
    ratio more than 0.10 higher, or (with --metric) the metric lower by more than
    --tolerance. 3 when a run has no verdict or a file cannot be read; 2 when a file is not
    a recording. Each run is judged with its own recorded thresholds.

    \b
    Examples:
      oversub diff before.ndjson after.ndjson
      oversub diff before.ndjson after.ndjson --metric steps_per_s --format markdown
    """
    from oversub.cli.check.metric import check_names
    from oversub.cli.output import emit
    from oversub.cli.record.reader import read_recording
    from oversub.recording import render_diff
    from oversub.recording.compare import compare
    from oversub.recording.replay import reassess

    if metric is not None:
        check_names([metric])
    old, new = (reassess(read_recording(path)) for path in (before, after))
    comparison = compare(old, new, metric=metric, tolerance=tolerance)
    emit(render_diff(comparison, DiffFormat(fmt), before=str(before), after=str(after)))
    if comparison.unjudged:
        return ExitStatus.UNOBSERVABLE
    return ExitStatus.FOUND if comparison.worse else ExitStatus.OK
