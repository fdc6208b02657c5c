"""The thread variables a library's own binary names: candidates for a library without a row.

A library oversub has no row for has no knob it is known to read. Its binary's `.rodata`
holds the names of the variables it may read (`getenv`'s arguments are constant strings):
`RAYON_NUM_THREADS` in a rayon pool, `OPENCV_FOR_THREADS_NUM` in OpenCV. So the names there
that look like a thread count's (`..._NUM_THREADS`, `..._THREADS_NUM`, `..._NTHREADS`,
`..._THREADS`, `..._PARALLELISM`) are offered as candidates, said to be unverified: the
string may be an error message's word, a constant's name (OpenCV's also holds
`CAP_PROP_N_THREADS`), a variable read for another pool, or one it ignores. Never the fix.

The object is the watched process's to choose: it is opened only as `probe.pcmap` opens a
library, and read by `probe.elf.read_only_data` (checked, at most `elf.MAX_RODATA` bytes of
`.rodata`). Anything odd gives no candidate; nothing raises.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from oversub.core.libraries import MAX_CANDIDATES, is_variable_name
from oversub.probe.backing import Mounts, OverBudget, device_number
from oversub.probe.elf import NotReadable, read_only_data
from oversub.probe.memreader import Readers

MAPS_MAX = 4 << 20
"""Bytes of maps read to find the object's mapping (as `probe.procmemory` reads them)."""

VARIABLE = re.compile(
    rb"[A-Z][A-Z0-9]{0,15}(?:_[A-Z0-9]{1,15}){0,3}"
    rb"_(?:NUM_THREADS|THREADS_NUM|NTHREADS|THREADS|PARALLELISM)"
)
"""A thread variable's name. Rust packs its strings without a separator, so a name may
follow another string's last capital: the leftmost match wins (an unverified candidate)."""


def candidates(rodata: bytes) -> tuple[str, ...]:
    """The first `MAX_CANDIDATES` distinct thread-variable names in `rodata`, those with
    `NUM` in them first (the usual spelling of a count), each in order of appearance."""
    seen: dict[str, None] = {}
    for match in VARIABLE.finditer(rodata):
        name = match.group().decode("ascii")
        if is_variable_name(name):
            seen.setdefault(name, None)
        if len(seen) >= 64:
            break
    ranked = sorted(seen, key=lambda n: "NUM" not in n)  # stable: appearance within each
    return tuple(ranked[:MAX_CANDIDATES])


def library_candidates(
    readers: Readers,
    proc_dir: str,
    start: int,
    path: str,
    host: Callable[[], dict[int, bytes] | None],
) -> tuple[str, ...]:
    """The candidates of the object `path` mapped executable by the process `proc_dir`
    (started at `start`, for the reader's quarantine); () when it cannot be read."""
    try:
        maps = readers.read_file(proc_dir, "maps", MAPS_MAX, start)
    except (OSError, OverBudget):
        return ()
    mapping = _mapping(maps, path)
    if mapping is None:
        return ()
    low, high, device, inode = mapping
    number = device_number(device)
    if number is None or not Mounts(proc_dir, host).readable(device):
        return ()
    routes = [(f"{proc_dir}/map_files/{low:x}-{high:x}", 0)]
    routes.append((f"{proc_dir}/root{path}", os.O_NOFOLLOW))
    try:
        opened = readers.open_library(proc_dir, routes, number, inode)
    except (OSError, OverBudget):
        return ()
    if isinstance(opened, str):
        return ()
    fd, size = opened
    try:
        return candidates(read_only_data(lambda n, at: os.pread(fd, n, at), size))
    except NotReadable:
        return ()
    finally:
        os.close(fd)


def _mapping(maps: bytes, path: str) -> tuple[int, int, bytes, int] | None:
    """(start, end, device, inode) of the first executable mapping of `path` in `maps`."""
    wanted = path.encode("utf-8", "surrogateescape")
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or b"x" not in fields[1] or fields[5].strip() != wanted:
            continue
        low, _, high = fields[0].partition(b"-")
        try:
            return int(low, 16), int(high, 16), fields[3], int(fields[4])
        except ValueError:
            return None
    return None
