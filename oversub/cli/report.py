"""`oversub report FILE`: a recording judged again, as text with charts, JSON, Markdown or HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import click

from oversub.cli.options import CONTEXT, format_option, threshold_options
from oversub.cli.options import ReportPath as OutPath
from oversub.core.errors import ExitStatus
from oversub.recording import ReportFormat


@click.command("report", context_settings=CONTEXT)
@click.argument("file", type=click.Path(path_type=Path, dir_okay=True))
@format_option(ReportFormat, ReportFormat.TEXT)
@click.option("-o", "--output", "out", type=OutPath(), default=None, help="Write it here.")
@threshold_options("report")
def command(file: Path, fmt: str, out: Path | None, **kwargs: Any) -> ExitStatus:
    """Judge a recording (`watch/check --record FILE`) again and show it over time.

    Without threshold flags the recording's own thresholds are used, which gives the
    verdict the run printed; a flag changes that threshold only (pyproject's
    [tool.oversub] is not read: a recording carries its thresholds). Exit 0 when it was
    read, 2 when FILE is not a recording this oversub reads, 3 when it cannot be read or
    -o cannot be written.

    \b
    Examples:
      oversub report run.ndjson
      oversub report run.ndjson --format html -o run.html
      oversub report run.ndjson --margin 0.5 --format json
    """
    import sys

    from oversub.cli.options import pop_thresholds
    from oversub.cli.output import colour_for, emit
    from oversub.cli.record.reader import read_recording
    from oversub.recording import render_report
    from oversub.recording.replay import reassess

    if out is not None:
        from oversub.cli.writtenfiles import check_report_path

        out = check_report_path("-o", out)
    recording = read_recording(file)
    given = {k: v for k, v in pop_thresholds(kwargs).items() if v is not None}
    thresholds = recording.header.thresholds._replace(**given)
    replay = reassess(recording, thresholds)
    width = text_width(None if out is not None else sys.stdout)
    color = out is None and colour_for(sys.stdout)
    text = render_report(replay, ReportFormat(fmt), width=width, color=color)
    if out is not None:
        from oversub.cli.writtenfiles import write_atomic

        write_atomic("-o", out, text)
    else:
        emit(text)
    return ExitStatus.OK


FILE_WIDTH = 80
"""Columns of a text report written anywhere but a terminal (`-o FILE`, `> FILE`, `| less`):
the classic width, so that a saved report reads whole in any terminal."""


def text_width(stream: TextIO | None) -> int:
    """Columns of the text report's charts: on a terminal (`stream`, where the report is
    written) its width, COLUMNS when set; anywhere else FILE_WIDTH, whatever the environment
    says, so that `report > f` and `report -o f` write the same bytes on every machine.

    The terminal asked is the stream written, never `sys.__stdout__` (shutil's choice):
    under a test runner that captures stdout the two differ."""
    import os

    try:
        if stream is None or not stream.isatty():
            return FILE_WIDTH
        size = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return FILE_WIDTH
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else size or FILE_WIDTH
