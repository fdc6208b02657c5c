"""`oversub merge FILES...`: the per-node reports of one job as one report, and one gate.

The files are untrusted: each is opened without blocking (a FIFO cannot hang merge), must
be a regular file of at most `MAX_REPORT_BYTES`, UTF-8, JSON without NaN or Infinity, and
an oversub report (`analysis.jobmerge.parse_report`); anything else is one line naming the file
and the problem, exit 2. The same file named twice is read once.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import click

from oversub.cli.options import CONTEXT, ReportPath, format_option, setting_option
from oversub.core.errors import ExitStatus, OutputClosed
from oversub.render import MergeFormat

MAX_REPORT_BYTES = 32 << 20
"""The largest report read (32 MiB). A `check --json` report of a tree of thousands of
processes is a few MiB; a larger file is not a node report, and is not loaded whole."""


FIRST_READ = 64 * 1024
"""Bytes read first: a file that does not start like a JSON object is refused after these."""


def _not_a_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _decode(source: str, data: bytes) -> object:
    import json

    from oversub.analysis.jobmerge import BadReport

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadReport(f"{source}: not UTF-8 (byte {exc.start})") from None
    from oversub.analysis.fields import LONE_SURROGATE, has_lone_surrogate

    try:
        value = json.loads(text, parse_constant=_not_a_constant)
    except json.JSONDecodeError as exc:
        hint = ""
        if exc.msg == "Extra data":
            hint = "; of an NDJSON stream, only its last line (the summary record) is a report"
        where = f"line {exc.lineno}, column {exc.colno}"
        raise BadReport(f"{source}: not JSON ({exc.msg} at {where}){hint}") from None
    except RecursionError:
        raise BadReport(f"{source}: not a report: JSON nested too deeply") from None
    except ValueError as exc:  # NaN/Infinity, an integer of thousands of digits
        raise BadReport(f"{source}: not a report: {str(exc)[:80]}") from None
    if has_lone_surrogate(text, value):
        raise BadReport(f"{source}: not a report: {LONE_SURROGATE}")
    return value


def read_report(source: str) -> tuple[tuple[int, int], object]:
    """The file's identity (device, inode) and its decoded JSON; BadReport (exit 2) when it
    cannot be read or is not JSON."""
    from oversub.analysis.jobmerge import BadReport

    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BadReport(f"{source}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise BadReport(f"{source}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        what = "is a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise BadReport(f"{source}: {what} (a report is a regular file)")
    if info.st_size > MAX_REPORT_BYTES:
        os.close(fd)
        raise BadReport(f"{source}: larger than {MAX_REPORT_BYTES >> 20} MiB: not a node report")
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(FIRST_READ)
            start = data.lstrip()[:1]
            if start and start != b"{":  # not a JSON object: refused before the rest is read
                raise BadReport(f"{source}: not JSON (a report is an object, {{...}})")
            data += file.read(MAX_REPORT_BYTES + 1 - len(data))
        except OSError as exc:
            raise BadReport(f"{source}: {exc.strerror or exc}") from None
    if len(data) > MAX_REPORT_BYTES:
        raise BadReport(f"{source}: larger than {MAX_REPORT_BYTES >> 20} MiB: not a node report")
    return (info.st_dev, info.st_ino), _decode(source, data)


@click.command("merge", context_settings=CONTEXT)
@click.argument("files", nargs=-1, required=True, type=click.Path())
@format_option(MergeFormat, MergeFormat.TEXT)
@click.option(
    "-o",
    "--output",
    type=ReportPath(),
    default=None,
    help="Write the report to this file (atomically) instead of stdout.",
)
@setting_option("fail_on")
def command(
    files: tuple[str, ...], fmt: str, output: Path | None, fail_on: str | None
) -> ExitStatus:
    """Merge the per-node reports of one job (`check --json` or `watch --format json`).

    One row per node (N, demand, verdict, worst finding), the job's worst verdict, the
    findings grouped by rule with their nodes. Exit status as `check`: 0 pass, 1 a node
    fails --fail-on (default costly: a critical finding), 2 a file is not a report, 3 a
    node was not judged. The
    verdict line also goes to stderr when the report goes to a file or is not text.

    \b
    Examples:
      oversub merge out/*.json
      oversub merge out/*.json --format markdown -o job.md
      oversub merge out/*.json --format junit -o merged.xml --fail-on starved
    """
    from oversub.analysis.jobmerge import merge, merge_status, parse_report
    from oversub.cli.config import load_config, resolve
    from oversub.cli.output import emit
    from oversub.cli.writtenfiles import check_report_path, write_atomic
    from oversub.core.names import FailOn
    from oversub.render import render_merge
    from oversub.render.escape import terminal
    from oversub.render.mergeview import verdict_line

    chosen = FailOn(str(resolve("fail_on", fail_on, load_config(Path.cwd()))))
    if output is not None:
        output = check_report_path("--output", output)
    seen: dict[tuple[int, int], str] = {}
    notes: list[str] = []
    reports = []
    for source in files:
        identity, doc = read_report(source)
        if identity in seen:
            notes.append(f"{source} is the file {seen[identity]} again: read once")
            continue
        seen[identity] = source
        reports.append(parse_report(doc, source))
    job = merge(reports, chosen, notes=notes)
    status = merge_status(job)
    fmt_ = MergeFormat(fmt)
    text = render_merge(job, status, fmt_)
    if output is not None:
        write_atomic("--output", output, text)
    else:
        try:
            emit(text)
        except OutputClosed:
            # `oversub merge ... | head`: the gate's answer is the exit status, not the text;
            # the reader leaving must not turn a FAIL into 0 (as `check` keeps its code).
            from oversub.cli.app import stdout_to_devnull

            stdout_to_devnull()
    if output is not None or fmt_ is not MergeFormat.TEXT:
        click.echo(f"oversub merge: {terminal(verdict_line(job, status))}", err=True)
        sys.stderr.flush()
    return status
