"""The CLI's option types and shared option groups (click only: imported at start-up).

Kept apart from `cli.py`, which wires commands: what a valid pid, number of seconds or
process count is, which thresholds every judging command takes, and which `check` flags
belong to which mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from oversub.errors import UsageError
from oversub.model import MAX_VCPUS, Thresholds

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def parse_procs(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """A process count >= 1, or `auto` (from the launcher's environment)."""
    if value is None or value == "auto":
        return value
    try:
        n = int(value, 10)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a whole number of processes or 'auto'"
        ) from None
    if n < 1:
        raise click.BadParameter(f"{n} processes: need at least 1")
    return n


class Seconds(click.FloatRange):
    """A finite number of seconds in a range: NaN and infinity are refused, not slept on."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number


POSITIVE = click.IntRange(min=1)
CPUS = click.IntRange(1, MAX_VCPUS)
PID = click.IntRange(1, 2**31 - 1)
"""A pid fits the kernel's pid_t (a signed 32-bit int); larger numbers are typos."""
SECONDS = Seconds(min=0.0, min_open=True)
WARMUP = Seconds(min=0.0)
INTERVAL = Seconds(min=0.1)
"""At least 0.1 s: sampling a large tree more often makes oversub itself a CPU hog."""


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
        click.option(
            "--margin", type=click.FloatRange(min=0), default=None, help=help_for("margin")
        ),
        click.option(
            "--delay-ratio",
            type=click.FloatRange(0, 1),
            default=None,
            help=help_for("delay_ratio"),
        ),
        click.option(
            "--active-cpu",
            type=click.FloatRange(0, 1, min_open=True),
            default=None,
            help=help_for("active_cpu"),
        ),
        click.option(
            "--throttle-ratio",
            type=click.FloatRange(0, 1),
            default=None,
            help=help_for("throttle_ratio"),
        ),
        click.option(
            "--outside-cpu",
            type=click.FloatRange(min=0),
            default=None,
            help=help_for("outside_cpu"),
        ),
        click.option("--idle-seconds", type=SECONDS, default=None, help=help_for("idle_seconds")),
        click.option(
            "--min-wait", type=click.FloatRange(min=0), default=None, help=help_for("min_wait")
        ),
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
