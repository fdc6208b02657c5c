"""`[tool.oversub]` in pyproject.toml: project defaults for `oversub check` and `watch`.

A project pins its thresholds next to its code so that CI and developers judge a run by
the same numbers. Flags override the file; the file overrides the built-in defaults. Every
key, its range and its default is a row of `oversub.core.settings` (docs/cli.md lists them all), and
`resolve` is the one place a value is chosen: flag, else key, else default.

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
from pathlib import Path

from oversub.core.errors import UsageError
from oversub.core.settings import BY_KEY, BY_NAME, THRESHOLDS, Range
from oversub.core.thresholds import Thresholds


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
    # Imported only for a file to parse: `watch` and `check` start without it.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        # tomli is the same parser under its pre-stdlib name; it is not installed on 3.11+,
        # where mypy never looks at this branch, hence the tolerant ignore.
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
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
    setting = BY_KEY.get(key)
    if setting is None:
        known = ", ".join(sorted(BY_KEY))
        raise UsageError(f"{where}: unknown key {key!r} (known: {known})")
    if setting.choices:
        if not isinstance(value, str) or value not in setting.choices:
            choices = ", ".join(repr(c) for c in setting.choices)
            raise UsageError(f"{where}: {key} must be one of {choices}, got {value!r}")
        return value
    assert setting.allowed is not None
    return _number(f"{where}: {key}", value, setting.allowed)


def _number(label: str, value: object, allowed: Range) -> float:
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


def resolve(name: str, flag: object, config: Mapping[str, object]) -> object:
    """The value of setting `name`: the flag when given (not None), else the `[tool.oversub]`
    key (already validated by `load_config`), else the default of `oversub.core.settings`."""
    setting = BY_NAME[name]
    if flag is not None:
        return flag
    return config.get(setting.key, setting.default)


def resolve_float(name: str, flag: float | None, config: Mapping[str, object]) -> float:
    """`resolve` for a number that has a default."""
    value = resolve(name, flag, config)
    assert isinstance(value, float | int) and not isinstance(value, bool)
    return float(value)


def thresholds_from(
    config: Mapping[str, object], overrides: Mapping[str, float | None]
) -> Thresholds:
    """Thresholds from defaults, then `config` (pyproject keys), then `overrides` (flags).

    `config` is what `load_config` returned (keys like "delay-ratio"; keys that are not
    thresholds, such as "interval", are ignored here). `overrides` is keyed by Thresholds
    field name ("delay_ratio", as click names the flag's parameter); None means the flag
    was not given. Both are range-checked (UsageError names the key or the flag), so a
    config that did not come through `load_config` cannot slip an invalid value in.
    """
    known = {s.name for s in THRESHOLDS}
    for name in overrides:
        if name not in known:
            raise ValueError(f"unknown threshold {name!r} (known: {', '.join(sorted(known))})")
    values: dict[str, float] = {}
    for setting in THRESHOLDS:
        assert setting.allowed is not None
        flag = overrides.get(setting.name)
        if flag is not None:
            values[setting.name] = _number(setting.flag, flag, setting.allowed)
        elif setting.key in config:
            label = f"pyproject.toml [tool.oversub]: {setting.key}"
            values[setting.name] = _number(label, config[setting.key], setting.allowed)
    return Thresholds()._replace(**values)
