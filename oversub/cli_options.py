"""The CLI's option types and shared option groups (click only: imported at start-up).

Kept apart from `cli.py`, which wires commands: what a valid pid, number of seconds or
process count is, which thresholds every judging command takes, and which `check` flags
belong to which mode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from oversub.errors import UsageError
from oversub.model import MAX_VCPUS, Thresholds

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
WARMUP = Seconds(min=0.0)
INTERVAL_MAX = 3600.0
"""The longest interval: an hour between two samples is already one rate for the hour."""
INTERVAL = Seconds(min=0.1, max=INTERVAL_MAX)
"""At least 0.1 s: sampling a large tree more often makes oversub itself a CPU hog."""
# `oversub stress` bounds (oversub.stress has the same numbers; it is not imported here).
STRESS_MAX_PROCS = 256
STRESS_MAX_THREADS = 1024
"""Per process, for each of --threads and --idle."""
STRESS_MAX_TOTAL = 16384
"""Threads of all stress workers together: far beyond any useful oversubscription, far below
what makes a machine unusable."""


def config_float(config: dict[str, object], key: str, default: float) -> float:
    """A numeric `[tool.oversub]` value (load_config validated it) or `default`."""
    value = config.get(key, default)
    assert isinstance(value, float | int)
    return float(value)


THRESHOLD_HELP: dict[str, str] = {
    "margin": "demand may exceed N by this fraction of N (measurement noise)",
    "delay_ratio": (
        'delay ratio above which threads "wait" (healthy ≈ 0.01, 2× oversubscribed ≈ 0.5)'
    ),
    "active_cpu": (
        'share of the interval a thread must be runnable (running or waiting) to count as "active"'
    ),
    "throttle_ratio": "share of quota periods throttled that counts as the quota biting",
    "outside_cpu": "CPUs used outside the tree that count as the cause of waiting",
    "idle_seconds": "idle time after which a forked OpenMP child is reported hung",
    "min_wait": ("CPU-seconds per second of waiting below which nothing counts as waiting"),
}
"""What each threshold means: the `--help` text, word for word the README's table."""


def threshold_options(f: F) -> F:
    """The verdict thresholds (defaults in README); also read from pyproject."""
    d = Thresholds()

    def help_for(key: str) -> str:
        return f"{THRESHOLD_HELP[key]} [{getattr(d, key)}]."

    opts = [
        click.option("--margin", type=Number(min=0), default=None, help=help_for("margin")),
        click.option(
            "--delay-ratio",
            type=Number(0, 1),
            default=None,
            help=help_for("delay_ratio"),
        ),
        click.option(
            "--active-cpu",
            type=Number(0, 1, min_open=True),
            default=None,
            help=help_for("active_cpu"),
        ),
        click.option(
            "--throttle-ratio",
            type=Number(0, 1),
            default=None,
            help=help_for("throttle_ratio"),
        ),
        click.option(
            "--outside-cpu",
            type=Number(min=0),
            default=None,
            help=help_for("outside_cpu"),
        ),
        click.option("--idle-seconds", type=SECONDS, default=None, help=help_for("idle_seconds")),
        click.option("--min-wait", type=Number(min=0), default=None, help=help_for("min_wait")),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


THRESHOLD_KEYS = (
    "margin",
    "delay_ratio",
    "active_cpu",
    "throttle_ratio",
    "outside_cpu",
    "idle_seconds",
    "min_wait",
)


def pop_thresholds(kwargs: dict[str, Any]) -> dict[str, float | None]:
    return {k: kwargs.pop(k) for k in THRESHOLD_KEYS}


# check's modes -> the mode-specific flags each accepts, and what to say to someone who
# gives a flag to the wrong mode (a silently ignored flag makes a gate lie).
_MODE_FLAGS: dict[str, tuple[str, ...]] = {
    "command": ("--timeout", "--warmup", "--interval"),
    "pid": ("--duration", "--interval"),
    "static": ("--workers", "--cpus"),
}
_WRONG_MODE_HINT: dict[str, str] = {
    "--duration": "--duration only applies with --pid (use --timeout with a command)",
    "--timeout": "--timeout only applies with a command (-- CMD ARGS...)",
    "--warmup": "--warmup only applies with a command (-- CMD ARGS...)",
    "--interval": "--interval does not apply to the static preflight: it samples nothing",
    "--workers": "--workers only applies to the static preflight (--procs/--threads)",
    "--cpus": "--cpus only applies to the static preflight (--procs/--threads)",
}


def refuse_flags_of_other_modes(mode: str, given: dict[str, object]) -> None:
    """UsageError for the first flag given that `check` in `mode` would ignore."""
    for flag, value in given.items():
        if value is not None and flag not in _MODE_FLAGS[mode]:
            raise UsageError(_WRONG_MODE_HINT[flag])


def check_mode(
    command: tuple[str, ...], pid: int | None, procs: int | None, threads: int | None
) -> str:
    """Which of check's three modes the flags ask for ("command", "pid" or "static");
    UsageError unless exactly one is asked for, completely."""
    static = procs is not None or threads is not None
    if sum([bool(command), pid is not None and not static, static]) != 1:
        raise UsageError(
            "check needs exactly one of: -- CMD ARGS..., --pid PID, or --procs M --threads T"
        )
    if static and (procs is None or threads is None):
        raise UsageError("static preflight needs both --procs and --threads")
    return "command" if command else "static" if static else "pid"
