"""Reading the fields of a recording's records: every value type-checked and bounded (the
file is untrusted input). A wrong value raises `BadRecord`, which the reader turns into
one line naming the record (`recording.format.bad`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from oversub.core.model import MAX_VCPUS, Budget, CpuQuota, CpusetLimit
from oversub.core.thresholds import Thresholds

MAX_TEXT = 4096
"""Longest string a recording may hold (oversub writes at most 200-character command lines)."""
MAX_ITEMS = 100_000
"""Most entries in one list or object (threads of a process, processes of an interval)."""
MAX_NUMBER = 1e15
"""Largest number a record holds (seconds, rates, thresholds): sums over any number of
intervals and their ratios stay finite, so no chart or mean becomes inf or NaN."""
MAX_RATE = float(MAX_ITEMS)
"""Largest raw delta per second of an interval (CPU or run delay seconds, runnable time of
a thread): one CPU-second per second for each of at most MAX_ITEMS threads."""
MAX_KEY_DIGITS = 6
"""Longest decimal key (a NUMA node's number)."""

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A JSON escape of a UTF-16 surrogate; a pair is one character once decoded, a lone one
stays a surrogate, which is not a Unicode scalar value and cannot be written as UTF-8."""


class BadRecord(Exception):
    """A field of the current record is wrong (`bad` makes it NotARecording with the line)."""


def _refuse_constant(name: str) -> float:
    raise BadRecord(f"{name} is not a number JSON allows")


def loads(line: str) -> dict[str, Any]:
    """One line as a JSON object; BadRecord when it is not one."""
    try:
        value = json.loads(line, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRecord(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadRecord("not a JSON object")
    if has_lone_surrogate(line, value):
        raise BadRecord(LONE_SURROGATE)
    return value


LONE_SURROGATE = "a string holds a lone surrogate escape (\\ud800-\\udfff): not Unicode text"


def has_lone_surrogate(raw: str, value: Any) -> bool:
    """Whether `value`, decoded from the JSON text `raw`, holds a lone surrogate in a key or
    a string (only walked when `raw` has a surrogate escape at all: cheap for every line)."""
    if _SURROGATE_ESCAPE.search(raw) is None:
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= c <= "\udfff" for c in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def field(d: Mapping[str, Any], key: str) -> Any:
    if key not in d:
        raise BadRecord(f"{key!r} is missing")
    return d[key]


def whole(v: Any, what: str, low: int = 0, high: int = 2**63) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise BadRecord(f"{what} is not a whole number in [{low}, {high}]")
    return v


def opt_whole(v: Any, what: str) -> int | None:
    return None if v is None else whole(v, what)


def number(v: Any, what: str, low: float = 0.0, high: float = MAX_NUMBER) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BadRecord(f"{what} is not a number in [{low:g}, {high:g}]")
    try:
        x = float(v)  # an int of hundreds of digits overflows a float
    except OverflowError:
        raise BadRecord(f"{what} is not a number in [{low:g}, {high:g}]") from None
    if not math.isfinite(x) or not low <= x <= high:
        raise BadRecord(f"{what} is not a number in [{low:g}, {high:g}]")
    return x


def per_second(v: Any, what: str, seconds: float) -> float:
    """A raw delta of an interval of `seconds`: at most MAX_RATE per second of it."""
    return number(v, what, 0.0, seconds * MAX_RATE)


def opt_per_second(v: Any, what: str, seconds: float) -> float | None:
    return None if v is None else per_second(v, what, seconds)


def decimal_key(k: Any, what: str) -> int:
    """An object key that is a small whole number in ASCII digits ("²" and "٣" are digits
    to str.isdigit, not to int(); thousands of digits are refused before int() is tried)."""
    if (
        not isinstance(k, str)
        or not 0 < len(k) <= MAX_KEY_DIGITS
        or not k.isascii()
        or not k.isdigit()
    ):
        raise BadRecord(
            f"{what} {str(k)[:20]!r} is not a number of at most {MAX_KEY_DIGITS} digits"
        )
    return int(k)


def opt_number(v: Any, what: str) -> float | None:
    return None if v is None else number(v, what)


def text(v: Any, what: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise BadRecord(f"{what} is not a string of at most {MAX_TEXT} characters")
    return v


def array(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_ITEMS:
        raise BadRecord(f"{what} is not a list")
    return v


def obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict) or len(v) > MAX_ITEMS:
        raise BadRecord(f"{what} is not an object")
    return v


def text_map(v: Any, what: str) -> dict[str, str] | None:
    if v is None:
        return None
    return {text(k, what): text(x, what) for k, x in obj(v, what).items()}


def whole_map(v: Any, what: str) -> dict[str, int] | None:
    if v is None:
        return None
    return {text(k, what): whole(x, what) for k, x in obj(v, what).items()}


def wholes(v: Any, what: str) -> tuple[int, ...]:
    return tuple(whole(x, what, 0, MAX_VCPUS) for x in array(v, what))


def budget_of(d: Any) -> Budget:
    d = obj(d, "budget")
    quota = field(d, "quota")
    cpuset = field(d, "cpuset")
    limited = text(field(d, "limited_by"), "limited_by")
    if limited not in ("affinity", "quota", "cpuset", "launcher", "none"):
        raise BadRecord("limited_by is not a known limit")
    q = None if quota is None else obj(quota, "quota")
    c = None if cpuset is None else obj(cpuset, "cpuset")
    physical = field(d, "physical")
    launcher = field(d, "launcher")
    cgroup = d.get("cgroup")  # a cgroup target's (absent before `--cgroup` existed)
    return Budget(
        pid=whole(field(d, "pid"), "budget pid"),
        vcpus=whole(field(d, "vcpus"), "vcpus", 1, MAX_VCPUS),
        logical=whole(field(d, "logical"), "logical", 1, MAX_VCPUS),
        physical=None if physical is None else whole(physical, "physical", 1, MAX_VCPUS),
        affinity=wholes(field(d, "affinity"), "affinity"),
        quota=None
        if q is None
        else CpuQuota(
            cpus=number(field(q, "cpus"), "quota"),
            quota_us=whole(field(q, "quota_us"), "quota_us"),
            period_us=whole(field(q, "period_us"), "period_us", 1),
            cgroup=text(field(q, "cgroup"), "cgroup"),
            version=2 if field(q, "version") == 2 else 1,
            stat_path=None,
        ),
        cpuset=None
        if c is None
        else CpusetLimit(
            cpus=wholes(field(c, "cpus"), "cpuset"),
            cgroup=text(field(c, "cgroup"), "cgroup"),
            version=2 if field(c, "version") == 2 else 1,
        ),
        numa={
            decimal_key(k, "numa node"): wholes(v, "numa")
            for k, v in obj(field(d, "numa"), "numa").items()
        },
        cores=tuple(wholes(c, "cores") for c in array(field(d, "cores"), "cores")),
        limited_by=limited,  # type: ignore[arg-type]  # checked above
        notes=tuple(text(n, "note") for n in array(field(d, "notes"), "notes")),
        launcher=None if launcher is None else text(launcher, "launcher"),
        cgroup=None if cgroup is None else text(cgroup, "cgroup"),
    )


LATER_THRESHOLDS = frozenset({"episode_share", "episode_seconds", "long_episode"})
"""Thresholds added after the first recordings: a recording without them was judged with
their defaults (there were no episodes), so it is read with those."""


def thresholds_of(d: Any) -> Thresholds:
    d = obj(d, "thresholds")
    return Thresholds(
        **{
            name: number(field(d, name), name)
            for name in Thresholds._fields
            if name in d or name not in LATER_THRESHOLDS
        }
    )
