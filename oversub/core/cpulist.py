"""The kernel's cpu-list syntax ("0-3,8-11,15"): affinity masks, cpusets, topology files.

Pure text, shared by the probes that read such lists and the renderers that print them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# One element of a cpu list: "5", "0-7" or the grouped form "0-15:2/4" (bitmap_parselist).
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?$")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse kernel cpu-list syntax ("0-3,8-11,15") into sorted, unique CPU ids.

    An empty string (or only whitespace) is the empty list. The grouped form the kernel
    accepts on input, "first-last:used/group" (e.g. "0-7:2/4" = 0,1,4,5), is understood too.
    Raises ValueError on anything else.
    """
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return ()
    for item in stripped.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise ValueError(f"bad cpu list element {item.strip()!r} in {stripped!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"bad cpu range {item.strip()!r} in {stripped!r}")
        if match.group(3) is None:
            cpus.update(range(first, last + 1))
            continue
        used, group = int(match.group(3)), int(match.group(4))
        if group == 0 or used == 0 or used > group:
            raise ValueError(f"bad cpu group {item.strip()!r} in {stripped!r}")
        cpus.update(cpu for cpu in range(first, last + 1) if (cpu - first) % group < used)
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids as a compact kernel cpu list: (0, 1, 2, 3, 8) -> "0-3,8".

    Input order and duplicates do not matter; the empty input gives "".
    """
    ordered = sorted(set(cpus))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        start = index
        while index + 1 < len(ordered) and ordered[index + 1] == ordered[index] + 1:
            index += 1
        first, last = ordered[start], ordered[index]
        parts.append(str(first) if first == last else f"{first}-{last}")
        index += 1
    return ",".join(parts)
