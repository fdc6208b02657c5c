"""Native thread pools of another process: mapped libraries and thread variables.

`/proc/PID/maps` says which pool runtimes are loaded (libgomp, OpenBLAS, MKL, ...);
`/proc/PID/environ` says how they were sized. The environment also holds secrets (tokens,
keys, passwords), so only names accepted by `pools.is_thread_var` are ever decoded, kept or
returned: the filter runs on the raw bytes, before anything is put in a structure.

Both return None when the process is gone (or the file is otherwise unreadable): that is
"unknown", not an error. They raise PermissionError for another user's process, so that the
caller can say *why* pools are unknown (run as that user or root) instead of showing "none".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from oversub.core import pools
from oversub.probe.procfiles import read_all

# A maps line's path: from its first " /" to the end of the line (the columns before the
# path, address to inode, hold no slash). Lines without a path (anonymous memory) or with a
# pseudo path ("[heap]") do not match. Twice as fast as matching each line's basename.
_MAPPED_PATH = re.compile(rb" /[^\n]*")

# One `NAME=value` entry of environ whose NAME starts with a thread prefix. Built from
# pools.THREAD_ENV_PREFIXES so that other entries are never even sliced out of the buffer.
_THREAD_ENTRY = re.compile(
    rb"(?:^|\0)((?:"
    + b"|".join(re.escape(p.encode()) for p in pools.THREAD_ENV_PREFIXES)
    + rb")[^=\0]*)=([^\0]*)"
)

_POOL_ORDER = {kind.key: i for i, kind in enumerate(pools.POOL_KINDS)}


def pools_from_maps(maps: bytes) -> tuple[str, ...]:
    """Pool keys of the libraries in a maps file, deduplicated, in `pools.POOL_KINDS` order."""
    found: set[str] = set()
    # Thousands of lines map the same few files: each distinct path is looked at once, and
    # a file name once per run (`_pool_of`).
    for path in set(_MAPPED_PATH.findall(maps)):
        key = _pool_of(path[path.rfind(b"/") + 1 :])
        if key is not None:
            found.add(key)
    return tuple(sorted(found, key=_POOL_ORDER.__getitem__))


_POOL_OF: dict[bytes, str | None] = {}
"""File name -> pool key (or None): the processes of a tree map the same libraries."""
_POOL_OF_MAX = 4096
"""Names kept: a process chooses the names it maps, and may map thousands."""


def _pool_of(name: bytes) -> str | None:
    try:
        return _POOL_OF[name]
    except KeyError:
        pass
    key = pools.classify_library(name.decode("utf-8", "replace"))
    if len(_POOL_OF) >= _POOL_OF_MAX:
        _POOL_OF.clear()
    _POOL_OF[name] = key
    return key


MAPS_MAX = 32 << 20
"""Bytes of /proc/PID/maps read: a process decides how many mappings it has (up to
vm.max_map_count, 65,530 by default) and how long their paths are (4 KiB each), so its maps
could reach 270 MB; a real NumPy or PyTorch process has well under 1 MB."""


ENVIRON_MAX = 8 << 20
"""Bytes of /proc/PID/environ read through a reader (an exec takes at most 6 MiB of
arguments and environment together: 3/4 of the kernel's 8 MiB stack, and no more than a
quarter of the stack limit)."""

Read = Callable[[str, int], bytes]
"""Reads (leaf, limit) of a process's /proc directory elsewhere: the reader process of
`probe.memreader`, since the kernel takes maps, environ and cmdline from the process's
memory or under its memory lock, which it may hold."""


def read_maps(pid: int, root: str = "/", read: Read | None = None) -> bytes | None:
    """/proc/PID/maps up to MAPS_MAX bytes (whole lines); None when it cannot be read
    (gone). PermissionError: another user's."""
    return _read_unless_gone(pid, root, "maps", MAPS_MAX, read)


THREAD_ENV_MAX_VARS = 32
"""Thread variables kept per process (those that size a known pool first)."""
THREAD_ENV_NAME_MAX = 64
"""Characters of a thread variable's name kept; longer names end in "…"."""
THREAD_ENV_VALUE_MAX = 128
"""Characters of a thread variable's value kept; longer values end in "…"."""

# The variables that size a known pool: kept first when a process sets more than the maximum.
_SIZING = frozenset(v for kind in pools.POOL_KINDS for v in kind.variables) | frozenset(
    pools.RECOMMENDED_VARS
)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def thread_env_from_bytes(environ: bytes) -> dict[str, str]:
    """Only the thread-related `NAME=value` entries of a NUL-separated environment block,
    bounded: at most THREAD_ENV_MAX_VARS entries, names and values cut to THREAD_ENV_NAME_MAX
    and THREAD_ENV_VALUE_MAX characters. A watched process chooses its environment, and a
    1 MB `OMP_*` value must not become megabytes of every report."""
    found: list[tuple[str, bytes]] = []
    for match in _THREAD_ENTRY.finditer(environ):
        name = match.group(1).decode("utf-8", "replace")
        if pools.is_thread_var(name):  # the regex mirrors it; this keeps one source of truth
            found.append((name, match.group(2)))
    if len(found) > THREAD_ENV_MAX_VARS:
        found.sort(key=lambda entry: entry[0] not in _SIZING)  # stable: environ order within
        found = found[:THREAD_ENV_MAX_VARS]
    env: dict[str, str] = {}
    for name, raw in found:
        # Decode only what can be kept: a longer value still decodes to more characters than
        # the maximum (4 bytes per character at most), so it is cut and marked.
        value = raw[: 4 * (THREAD_ENV_VALUE_MAX + 1)].decode("utf-8", "replace")
        env[_cut(name, THREAD_ENV_NAME_MAX)] = _cut(value, THREAD_ENV_VALUE_MAX)
    return env


def read_thread_env(pid: int, root: str = "/", read: Read | None = None) -> dict[str, str] | None:
    """Thread-related environment variables of `pid` (initial environment, as exec'd).

    None when environ cannot be read (the process is gone); PermissionError when it belongs
    to another user.
    """
    environ = _read_unless_gone(pid, root, "environ", None, read)
    return None if environ is None else thread_env_from_bytes(environ)


def _read_unless_gone(
    pid: int, root: str, leaf: str, limit: int | None = None, read: Read | None = None
) -> bytes | None:
    """/proc/PID/`leaf` (at most `limit` bytes, cut after its last whole line), through `read`
    where given; None when it cannot be read, except a refusal, which is raised."""
    path = os.path.join(root, "proc", str(pid), leaf)
    try:
        if read is not None:
            data = read(leaf, ENVIRON_MAX if limit is None else limit + 1)
            if limit is None or len(data) <= limit:
                return data
            return data[: data.rfind(b"\n", 0, limit) + 1]
        if limit is None:
            return read_all(path)
        return _read_lines(path, limit)
    except PermissionError:
        raise
    except OSError:
        return None


def _read_lines(path: str, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        chunks, total = [], 0
        while total <= limit and (chunk := os.read(fd, 65536)):
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if total <= limit:
        return data
    return data[: data.rfind(b"\n", 0, limit) + 1]
