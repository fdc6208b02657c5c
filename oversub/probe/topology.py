"""CPU topology from sysfs: online CPUs, SMT sibling groups, NUMA nodes.

CPU lists are parsed and printed by `oversub.core.cpulist`.

Every path is `root` joined with the absolute system path, so tests point `root` at a fake
tree. Unreadable files degrade to notes; nothing here raises for a missing file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.cpulist import format_cpulist, parse_cpulist

_CPU_DIR = "/sys/devices/system/cpu"
_NODE_DIR = "/sys/devices/system/node"
# Newer kernels call the SMT siblings "core_cpus"; thread_siblings is the older name that
# most kernels still provide. Either gives the same groups.
_SIBLING_FILES = ("topology/core_cpus_list", "topology/thread_siblings_list")


def rooted(root: str, path: str) -> str:
    """`path` (absolute) inside the tree at `root`; `root="/"` is the real system."""
    return os.path.join(root, path.lstrip("/"))


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
