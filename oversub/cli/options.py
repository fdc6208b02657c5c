"""The CLI's option types and the options shared by commands (click only: imported at
start-up).

What a valid pid, number of seconds or process count is; the options generated from the
settings table (`oversub.core.settings`: thresholds, interval, warm-up, timeout, fail-on) and
from the report table (`REPORTS`), so that a setting or a report format is declared once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import click

from oversub.core.model import MAX_VCPUS
from oversub.core.names import Name, values

if TYPE_CHECKING:
    from oversub.core.settings import Setting

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Numbers as a person types them in ASCII: Python's int() and float() also accept other
# scripts' digits ("٤" is 4), underscores ("1_000") and surrounding blanks, so that a typo
# or a look-alike character would silently become a value.
_WHOLE = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


def parse_procs(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """A process count >= 1, or `auto` (from the launcher's environment)."""
    if value is None or value == "auto":
        return value
    if not _WHOLE.match(value):
        raise click.BadParameter(f"{value!r} is not a whole number of processes or 'auto'")
    try:
        n = int(value, 10)
    except ValueError:  # more digits than int() converts
        raise click.BadParameter(f"{value!r} is not a whole number of processes") from None
    if n < 1:
        raise click.BadParameter(f"{n} processes: need at least 1")
    return n


def procs_option(help: str, **kwargs: Any) -> Callable[[F], F]:
    """`--procs/-M M|auto`, defined once for every command that takes it (`check`, `tune`,
    `run`, `recommend`): `help` and `kwargs` (default, required) are the command's."""
    return click.option(
        "--procs",
        "-M",
        "procs",
        type=str,
        metavar="M|auto",
        callback=parse_procs,
        help=help,
        **kwargs,
    )


class Whole(click.IntRange):
    """A whole number in a range, written with the ASCII digits 0-9 only."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _WHOLE.match(value):
            self.fail(f"{value!r} is not a whole number (digits 0-9)", param, ctx)
        return super().convert(value, param, ctx)


class Number(click.FloatRange):
    """A finite decimal number in a range, ASCII only: NaN and infinity are refused."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _DECIMAL.match(value):
            self.fail(f"{value!r} is not a decimal number", param, ctx)
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class Seconds(Number):
    """A finite number of seconds in a range: NaN and infinity are refused, not slept on."""

    name = "seconds"


class ReportPath(click.Path):
    """A report file's path: an empty one names no file (it would mean the directory ".")."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value:
            self.fail("an empty path names no file", param, ctx)
        return super().convert(value, param, ctx)


POSITIVE = Whole(min=1)
COUNT = Whole(min=0)
CPUS = Whole(1, MAX_VCPUS)
PID = Whole(1, 2**31 - 1)
"""A pid fits the kernel's pid_t (a signed 32-bit int); larger numbers are typos."""
SECONDS = Seconds(min=0.0, min_open=True)


def format_option(
    formats: type[Name], default: Name | None, help: str | None = None
) -> Callable[[F], F]:
    """`--format`, its choices the values of a format enum (`oversub.render`, or the feature
    folder's: `oversub.recording`, `oversub.tuning`)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(values(formats)),
        default=None if default is None else default.value,
        show_default=default is not None,
        help=help,
    )


def _type(setting: Setting) -> click.ParamType:  # type: ignore[type-arg]
    """The click type of a setting: its choices, or a number in its range."""
    if setting.choices:
        return click.Choice(setting.choices)
    allowed = setting.allowed
    assert allowed is not None
    if setting.seconds:
        return Seconds(allowed.low, allowed.high, allowed.low_open, allowed.high_open)
    # Whole bounds of a plain number read as whole numbers in --help and errors ("x>=0").
    low, high = (_whole(b) for b in (allowed.low, allowed.high))
    return Number(low, high, allowed.low_open, allowed.high_open)


def _whole(bound: float | None) -> float | int | None:
    return int(bound) if bound is not None and bound == int(bound) else bound


def setting_option(name: str) -> Callable[[F], F]:
    """The flag of one setting (`oversub.core.settings`), with its type, range and help. No
    default here: None means "not given", so `[tool.oversub]` can still decide."""
    from oversub.core.settings import BY_NAME

    setting = BY_NAME[name]
    return click.option(setting.flag, type=_type(setting), default=None, help=setting.help_text)


def threshold_options(command: str) -> Callable[[F], F]:
    """The verdict thresholds, as flags of `command` (defaults in docs/rules.md)."""

    from oversub.core.settings import SETTINGS

    def add(f: F) -> F:
        for setting in reversed(SETTINGS):
            if setting.threshold and command in setting.commands:
                f = setting_option(setting.name)(f)
        return f

    return add


class Report(NamedTuple):
    """A report file `check` writes: its flag, the parameter it becomes, its help."""

    flag: str
    name: str
    help: str


REPORTS: tuple[Report, ...] = (
    Report("--json", "json_path", "Write the JSON report here."),
    Report("--junit", "junit_path", "Write a JUnit XML report here."),
    Report("--markdown", "markdown_path", "Write a Markdown report here."),
)
"""Every report file of `check`, in the order they are written."""


def report_options(f: F) -> F:
    for report in reversed(REPORTS):
        f = click.option(
            report.flag, report.name, type=ReportPath(), default=None, help=report.help
        )(f)
    return f


def pop_thresholds(kwargs: dict[str, Any]) -> dict[str, float | None]:
    """The threshold flags among a command's parameters (None: not given), removed."""
    from oversub.core.settings import THRESHOLDS

    return {s.name: kwargs.pop(s.name) for s in THRESHOLDS}


def record_options(f: F) -> F:
    """`--record FILE` and its size bound (`watch`, `check`)."""
    f = setting_option("record_max_mb")(f)
    return click.option(
        "--record",
        "record_path",
        type=ReportPath(),
        default=None,
        help="Write the run here as it goes (NDJSON; read it with `oversub report`).",
    )(f)
