"""The owners of threads: which library a thread's name or code names, and its row.

A thread's owner is found from outside (`oversub.probe.owners`): its name, or the shared
object whose code it is blocked in. The rows (`core.catalogue`: how to recognise each
library, what its waiting threads do, which knob sizes them; only that knob is ever offered
as its fix) and the rows made for libraries without one (`_dynamic`) are looked up here by
owner key. Pure, standard library only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from oversub.core.catalogue import CATALOGUE, OPENMP, Library, Waits
from oversub.core.libraries import (
    library_key,
    library_of,
    object_of,
    split_vendored,
    vendor_of,
    vendored_key,
)

if TYPE_CHECKING:
    from oversub.core.results import OwnerCount

UNATTRIBUTED = "unattributed"
"""The owner of a thread no evidence names (never guessed from the mapped libraries)."""

Runtime = Library
"""One owner of threads: a row of `core.catalogue` (its `label`, `waits`, `knob`, `code` and
`measured` describe the threads the row names), or a row `_dynamic` makes."""

RUNTIMES: tuple[Runtime, ...] = CATALOGUE
"""Every owner, most specific first: a thread name is matched against `names` in this order
(gloo's `pt_gloo_*` before torch's `pt_*`)."""


@lru_cache(maxsize=512)
def _dynamic(key: str) -> Runtime | None:
    """The row of an owner no static row names: a library without a row (`lib:PATH`: its
    name, no knob known) or an OpenMP runtime vendored by a package without a row
    (`libgomp@foo`: the runtime's knobs, labelled as the package's team)."""
    vendored = split_vendored(key)
    if vendored is not None:
        base = _STATIC.get(vendored[0])
        if base is None or base.key not in OPENMP:
            return None
        short = base.label.rsplit("(", 1)[-1].rstrip(")")
        label = f"{vendored[1]}'s OpenMP team ({short})"
        # Its cost is not the one measured for another program's team.
        return base._replace(key=key, label=label, measured="", mapped=())
    path = object_of(key)
    if path is None:
        return None
    return Runtime(key, library_of(path).name, "unknown", caller=False)


class _Catalogue(Mapping[str, Runtime]):
    """Owner key -> row: the static rows, and the rows `_dynamic` makes for the keys of
    libraries without a row (iterating gives the static rows only)."""

    def __init__(self, rows: Mapping[str, Runtime]) -> None:
        self._rows = rows

    def __getitem__(self, key: str) -> Runtime:
        row = self._rows.get(key)
        if row is None:
            row = _dynamic(key)
        if row is None:
            raise KeyError(key)
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


_STATIC: Mapping[str, Runtime] = {r.key: r for r in RUNTIMES}
RUNTIMES_BY_KEY: Mapping[str, Runtime] = _Catalogue(_STATIC)

_NAME_ORDER: tuple[Runtime, ...] = tuple(
    sorted((r for r in RUNTIMES if r.names), key=lambda r: -max(len(n) for n in r.names))
)

NOT_EVIDENCE_NAMES: tuple[str, ...] = ("pt_main_thread",)
"""Thread names that say nothing about the owner: torch renames the main thread."""

SYSTEM_OBJECTS: tuple[str, ...] = (
    "libc.so",
    "libc-",
    "libpthread",
    "ld-linux",
    "ld-musl",
    "libc.musl",
    "libstdc++",
    "libgcc_s",
    "libm.so",
    "librt.so",
    "libdl.so",
    "[vdso]",
)
"""Objects every runtime calls into to wait (the C library, the C++ runtime): a thread
blocked there is attributed by the first return address outside them."""


def owner_of_name(comm: str) -> str | None:
    """The owner a thread name proves, or None (a name inherited from the process, or one
    no runtime gives its threads)."""
    if comm.startswith(NOT_EVIDENCE_NAMES):
        return None
    for runtime in _NAME_ORDER:
        if comm.startswith(runtime.names):
            return runtime.key
    return None


def is_system_object(path: str) -> bool:
    """True for the C library and its kin (see SYSTEM_OBJECTS)."""
    return path.rsplit("/", 1)[-1].startswith(SYSTEM_OBJECTS)


_PACKAGE_ROOTS = frozenset({"site-packages", "dist-packages"})


def owner_of_object(path: str) -> str | None:
    """The owner whose code a shared object (or executable) holds, by its path."""
    base = path.rsplit("/", 1)[-1]
    # A package directory counts only right under site-packages (a user named "numba" has
    # /home/numba/... in every path).
    top = _package_tops(path)
    for runtime in RUNTIMES:
        if runtime.dirs and any(d in top for d in runtime.dirs):
            return runtime.key
    for runtime in RUNTIMES:
        if runtime.objects and base.startswith(runtime.objects):
            return runtime.key
    return None


def _package_tops(path: str) -> list[str]:
    """The path components right under site-packages (or dist-packages) in `path`."""
    parts = path.split("/")
    return [parts[i + 1] for i, p in enumerate(parts[:-2]) if p in _PACKAGE_ROOTS]


_DRIVERS: tuple[Runtime, ...] = tuple(r for r in RUNTIMES if r.drives)
_IMPORTED_BY_OTHERS = frozenset({"sklearn"})
"""Drivers that other drivers import (XGBoost's and LightGBM's estimators import
scikit-learn): beside another, not the team's."""


def openmp_driver(paths: Sequence[str]) -> str | None:
    """The library whose OpenMP team a process runs, from the paths of its mapped code: the
    one row whose `drives` package it maps (scikit-learn only when no other), None when
    there is none, several, or torch (its team keeps the runtime's key and torch's call)."""
    tops: set[str] = set()
    for path in paths:
        if path.rsplit("/", 1)[-1].startswith("libtorch_cpu"):
            return None
        tops.update(_package_tops(path))
    found = [r.key for r in _DRIVERS if any(d in tops for d in r.drives)]
    specific = [k for k in found if k not in _IMPORTED_BY_OTHERS]
    if len(specific) == 1:
        return specific[0]
    return found[0] if len(found) == 1 else None


def is_openmp_owner(key: str) -> bool:
    """An OpenMP runtime's key, or such a runtime vendored by a package (`libgomp@foo`)."""
    vendored = split_vendored(key)
    return (vendored[0] if vendored is not None else key) in OPENMP


def owner_of_row(path: str) -> str | None:
    """`owner_of_object`, with an OpenMP runtime vendored by a package without a row of its
    own (`<package>.libs/libgomp-*.so`) as that package's team (`libgomp@package`)."""
    owner = owner_of_object(path)
    if owner in OPENMP:
        vendor = vendor_of(path)
        if vendor is not None:
            return vendored_key(owner, vendor)
    return owner


PROGRAM = "program"
"""The owner of threads started by the program's own executable (not an interpreter's)."""


def owner_of_code(path: str, exe: str | None = None) -> str | None:
    """The owner of a thread whose code (its start routine, or where it waits) is the
    object at `path`: a row's key (an OpenMP runtime vendored by a package without a row
    as that package's team, `libgomp@foo`); `PROGRAM` for the program's executable `exe`
    when it is no interpreter; else the library the path names (`libraries.library_key`).
    None for the C library and its kin (`is_system_object`) and for anonymous code."""
    if not path.startswith("/") or is_system_object(path):
        return None
    owner = owner_of_row(path)
    if owner is not None:
        return owner
    if exe is not None and path == exe:
        return PROGRAM
    return library_key(path)


def label(key: str) -> str:
    """The human name of an owner key ("unattributed" and unknown keys as they are)."""
    runtime = RUNTIMES_BY_KEY.get(key)
    return runtime.label if runtime is not None else key


def waits(key: str) -> Waits | None:
    """What the owner's threads do when oversubscribed; None for unknown owners."""
    runtime = RUNTIMES_BY_KEY.get(key)
    return runtime.waits if runtime is not None else None


def describe(counts: Sequence[OwnerCount]) -> str:
    """ "ONNX Runtime intra-op pool: 2 busy, OpenBLAS: 1 idle, Python interpreter: 1"."""
    parts = []
    for c in counts:
        if c.busy and c.busy == c.threads:
            n = f"{c.busy} busy"
        elif c.busy:
            n = f"{c.threads} ({c.busy} busy)"
        elif not c.ran:
            n = f"{c.threads} idle"
        else:
            n = str(c.threads)
        parts.append(f"{label(c.owner)}: {n}")
    return ", ".join(parts)
