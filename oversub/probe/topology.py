"""CPU topology from sysfs: online CPUs, SMT sibling groups, NUMA nodes.

Also home of the kernel cpu-list syntax ("0-3,8-11,15") shared by every probe that reads
affinity masks, cpusets or topology files: `parse_cpulist` and its inverse `format_cpulist`.

Every path is `root` joined with the absolute system path, so tests point `root` at a fake
tree. Unreadable files degrade to notes; nothing here raises for a missing file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "Topology",
    "describe_error",
    "format_cpulist",
    "parse_cpulist",
    "read_topology",
    "rooted",
]

_CPU_DIR = "/sys/devices/system/cpu"
_NODE_DIR = "/sys/devices/system/node"
# Newer kernels call the SMT siblings "core_cpus"; thread_siblings is the older name that
# most kernels still provide. Either gives the same groups.
_SIBLING_FILES = ("topology/core_cpus_list", "topology/thread_siblings_list")
# One element of a cpu list: "5", "0-7" or the grouped form "0-15:2/4" (bitmap_parselist).
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?$")


def rooted(root: str, path: str) -> str:
    """`path` (absolute) inside the tree at `root`; `root="/"` is the real system."""
    return os.path.join(root, path.lstrip("/"))


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


class Topology(NamedTuple):
    """What sysfs says about the host's CPUs."""

    online: tuple[int, ...]
    """Online logical CPU ids (empty when unknown)."""
    cores: tuple[tuple[int, ...], ...]
    """SMT sibling groups, one per physical core, sorted by first CPU."""
    physical: int | None
    """Number of physical cores; None unless every online CPU's siblings were read."""
    numa: Mapping[int, tuple[int, ...]]
    """NUMA node id -> CPU ids; empty when the kernel has no node directory."""
    notes: tuple[str, ...]
    """Files that could not be read, and what that leaves unknown."""


def read_text(path: str) -> str:
    """A small sysfs/cgroup text file (ASCII; odd bytes replaced, never an error)."""
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read()


def _numbered_entries(directory: str, prefix: str) -> list[int]:
    """Ids of entries named `prefix<digits>` in `directory` (e.g. cpu0, node1), sorted."""
    pattern = re.compile(rf"^{prefix}(\d+)$")
    ids = []
    for name in os.listdir(directory):
        match = pattern.match(name)
        if match is not None:
            ids.append(int(match.group(1)))
    return sorted(ids)


def _read_online(root: str, notes: list[str]) -> tuple[int, ...]:
    path = rooted(root, f"{_CPU_DIR}/online")
    try:
        return parse_cpulist(read_text(path))
    except (OSError, ValueError) as error:
        notes.append(f"cannot read online CPUs from {path}: {describe_error(error)}")
    # Without the online mask, every cpuN directory is the best guess (offline CPUs included).
    try:
        return tuple(_numbered_entries(rooted(root, _CPU_DIR), "cpu"))
    except OSError:
        return ()


def _read_cores(
    root: str, online: tuple[int, ...], notes: list[str]
) -> tuple[tuple[tuple[int, ...], ...], bool]:
    """SMT groups of the online CPUs, and whether every online CPU was covered."""
    groups: set[tuple[int, ...]] = set()
    unreadable: list[int] = []
    for cpu in online:
        for name in _SIBLING_FILES:
            try:
                siblings = parse_cpulist(read_text(rooted(root, f"{_CPU_DIR}/cpu{cpu}/{name}")))
            except (OSError, ValueError):
                continue
            # A CPU always belongs to its own sibling group; a list without it is corrupt.
            if cpu in siblings:
                groups.add(siblings)
                break
        else:
            unreadable.append(cpu)
    if unreadable:
        notes.append(
            f"cannot read SMT siblings of CPU {format_cpulist(unreadable)}: "
            "physical core count unknown"
        )
    ordered = tuple(sorted(groups, key=lambda group: group[0]))
    return ordered, bool(online) and not unreadable


def _read_numa(root: str, notes: list[str]) -> dict[int, tuple[int, ...]]:
    directory = rooted(root, _NODE_DIR)
    try:
        node_ids = _numbered_entries(directory, "node")
    except FileNotFoundError:
        return {}  # Kernel built without NUMA: the platform says nothing, not an error.
    except OSError as error:
        notes.append(f"cannot list NUMA nodes in {directory}: {describe_error(error)}")
        return {}
    numa: dict[int, tuple[int, ...]] = {}
    for node in node_ids:
        path = f"{directory}/node{node}/cpulist"
        try:
            numa[node] = parse_cpulist(read_text(path))
        except (OSError, ValueError) as error:
            notes.append(f"cannot read NUMA node {node} CPUs from {path}: {describe_error(error)}")
    return numa


def describe_error(error: Exception) -> str:
    """Short human reason for a failed read (no traceback, no errno number)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error)


def read_topology(root: str = "/") -> Topology:
    """Read online CPUs, SMT sibling groups and NUMA nodes from sysfs under `root`."""
    notes: list[str] = []
    online = _read_online(root, notes)
    cores, complete = _read_cores(root, online, notes)
    numa = _read_numa(root, notes)
    return Topology(
        online=online,
        cores=cores,
        physical=len(cores) if complete else None,
        numa=numa,
        notes=tuple(notes),
    )
