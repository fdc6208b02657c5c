"""`[tool.oversub]` in pyproject.toml: project defaults for `oversub check` and `watch`.

A project pins its thresholds next to its code so that CI and developers judge a run by
the same numbers. Flags override the file; the file overrides the built-in defaults of
`model.Thresholds`. Keys (all optional)::

    [tool.oversub]
    margin = 0.15          # float >= 0: demand may exceed N by this fraction of N
    delay-ratio = 0.10     # 0..1: share of runnable time spent waiting that counts as waiting
    active-cpu = 0.20      # (0..1]: fraction of one CPU above which a thread is active
    throttle-ratio = 0.10  # 0..1: share of cgroup periods throttled above which a quota bites
    outside-cpu = 0.50     # float >= 0: CPUs used outside the tree that count as the cause
    idle-seconds = 3.0     # > 0: idle time after which a forked OpenMP child counts as hung
    min-wait = 0.05        # float >= 0: CPU-seconds per second the tree must wait before its
                           # threads count as waiting (an idle tree's rare wake-ups do not)
    fail-on = "oversubscribed"  # "oversubscribed", "starved" or "at-risk": check fails at this
    interval = 1.0         # 0.1..3600: seconds between samples (faster makes oversub a CPU hog)
    warmup = 2.0           # >= 0: seconds ignored at the start of a run (imports, start-up)
    timeout = 60.0         # > 0: seconds after which `check` stops the command and decides

Every mistake (unknown key, wrong type, out-of-range value, invalid TOML, a file that is not
a regular file of at most 1 MiB, nesting too deep for the parser) is a UsageError: a silently
ignored typo in a CI threshold would make the check pass for the wrong reason.
"""

from __future__ import annotations

import math
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType

from oversub.errors import UsageError
from oversub.model import Thresholds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    # tomli is the same parser under its pre-stdlib name; it is not installed on 3.11+,
    # where mypy never looks at this branch, hence the tolerant ignore.
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = ["FAIL_ON_CHOICES", "KEYS", "load_config", "thresholds_from"]

FAIL_ON_CHOICES: tuple[str, ...] = ("oversubscribed", "starved", "at-risk")
"""Values of `fail-on`, worst first (the same strings as `model.Verdict`)."""

KEYS: Mapping[str, str] = MappingProxyType(
    {
        "margin": "float >= 0: demand may exceed N by this fraction of N before it counts",
        "delay-ratio": "0..1: share of runnable time spent waiting above which threads wait",
        "active-cpu": "(0..1]: a thread using at least this fraction of one CPU is active",
        "throttle-ratio": "0..1: share of cgroup periods throttled above which a quota bites",
        "outside-cpu": "float >= 0: CPUs used outside the tree above which others are the cause",
        "idle-seconds": "> 0: a forked child idle this long with OpenMP mapped counts as hung",
        "min-wait": "float >= 0: CPU-seconds per second the tree must wait before threads wait",
        "fail-on": "one of " + ", ".join(FAIL_ON_CHOICES) + ": verdict at which check fails",
        "interval": "0.1 to 3600: seconds between samples",
        "warmup": ">= 0: seconds ignored at the start of a run",
        "timeout": "> 0: seconds after which check stops the command and decides",
    }
)
"""Every key allowed in `[tool.oversub]` -> what it means and which values it takes."""


@dataclass(frozen=True)
class _Range:
    """Allowed interval of a numeric key; None = unbounded on that side."""

    low: float | None
    low_open: bool
    high: float | None = None
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (
            self.high is not None and (value >= self.high if self.high_open else value > self.high)
        )

    def describe(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"in {left}{self.low:g}, {self.high:g}{right}"


_RANGES: Mapping[str, _Range] = MappingProxyType(
    {
        "margin": _Range(0.0, low_open=False),
        "delay-ratio": _Range(0.0, low_open=False, high=1.0),
        "active-cpu": _Range(0.0, low_open=True, high=1.0),
        "throttle-ratio": _Range(0.0, low_open=False, high=1.0),
        "outside-cpu": _Range(0.0, low_open=False),
        "idle-seconds": _Range(0.0, low_open=True),
        "min-wait": _Range(0.0, low_open=False),
        "interval": _Range(0.1, low_open=False, high=3600.0),
        "warmup": _Range(0.0, low_open=False),
        "timeout": _Range(0.0, low_open=True),
    }
)

# Thresholds field name -> pyproject key: the field names are the contract in model.py,
# the keys follow the CLI's flag spelling.
_THRESHOLD_KEYS: Mapping[str, str] = MappingProxyType(
    {f.name: f.name.replace("_", "-") for f in fields(Thresholds)}
)


def load_config(directory: Path) -> dict[str, object]:
    """Read and validate `[tool.oversub]` from `directory/pyproject.toml`.

    Returns key -> value with the keys as spelled in the file (e.g. "delay-ratio"); numbers
    come back as float, `fail-on` as str. A missing file or a file without the table gives
    {}. Raises UsageError for unreadable files, invalid TOML, unknown keys and bad values.
    """
    path = directory / "pyproject.toml"
    text = _read_bounded(path)
    if text is None:
        return {}
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from exc
    except RecursionError:
        raise UsageError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None

    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise UsageError(f"{path}: 'tool' must be a table")
    table = tool.get("oversub")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.oversub] must be a table, got {table!r}")
    return {str(key): _validate(str(key), value) for key, value in table.items()}


CONFIG_MAX_BYTES = 1 << 20
"""The largest pyproject.toml read (real ones are a few kilobytes)."""


def _read_bounded(path: Path) -> str | None:
    """The text of `path`, None when it does not exist. Only a regular file of at most
    CONFIG_MAX_BYTES is read: a link to /dev/zero would grow without bound and a FIFO would
    block (it is opened without blocking, then refused); UsageError says why."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"cannot read {path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > CONFIG_MAX_BYTES:
                raise UsageError(f"cannot read {path}: larger than {CONFIG_MAX_BYTES:,} bytes")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"cannot read {path}: not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from exc


def _validate(key: str, value: object) -> object:
    """Check one `[tool.oversub]` entry; return its normalised value."""
    where = "pyproject.toml [tool.oversub]"
    if key not in KEYS:
        known = ", ".join(sorted(KEYS))
        raise UsageError(f"{where}: unknown key {key!r} (known: {known})")
    if key == "fail-on":
        if not isinstance(value, str) or value not in FAIL_ON_CHOICES:
            choices = ", ".join(repr(c) for c in FAIL_ON_CHOICES)
            raise UsageError(f"{where}: fail-on must be one of {choices}, got {value!r}")
        return value
    return _number(f"{where}: {key}", value, _RANGES[key])


def _number(label: str, value: object, allowed: _Range) -> float:
    """`value` as a finite float inside `allowed`, else UsageError naming `label`."""
    # bool is an int subclass: `margin = true` is a typo, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{label} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise UsageError(f"{label} must be a finite number, got {value!r}")
    if not allowed.contains(number):
        raise UsageError(f"{label} must be {allowed.describe()}, got {value!r}")
    return number


def thresholds_from(
    config: Mapping[str, object], overrides: Mapping[str, float | None]
) -> Thresholds:
    """Thresholds from defaults, then `config` (pyproject keys), then `overrides` (flags).

    `config` is what `load_config` returned (keys like "delay-ratio"; keys that are not
    thresholds, such as "interval", are ignored here). `overrides` is keyed by Thresholds
    field name ("delay_ratio", as click names the flag's parameter); None means the flag
    was not given. Overrides are range-checked like the file (UsageError names the flag).
    """
    values: dict[str, float] = {}
    for name, key in _THRESHOLD_KEYS.items():
        if key in config:
            values[name] = _number(
                f"pyproject.toml [tool.oversub]: {key}", config[key], _RANGES[key]
            )
    for name, flag_value in overrides.items():
        if name not in _THRESHOLD_KEYS:
            known = ", ".join(sorted(_THRESHOLD_KEYS))
            raise ValueError(f"unknown threshold {name!r} (known: {known})")
        if flag_value is not None:
            key = _THRESHOLD_KEYS[name]
            values[name] = _number(f"--{key}", flag_value, _RANGES[key])
    return replace(Thresholds(), **values)
