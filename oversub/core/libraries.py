"""The library a shared object belongs to, from its path: the owner of threads no row names.

A thread whose code lives in a shared object that no row of `runtimes` names still belongs to
a library, and its path says which (docs/pools.md, "A library without a row"):

- under `site-packages` (or `dist-packages`), the package directory right below it:
  `site-packages/tokenizers/tokenizers.abi3.so` -> `tokenizers`, `cv2/cv2.abi3.so` -> `cv2`;
  a module file right in it, its module: `_foo.cpython-311-x86_64-linux-gnu.so` -> `_foo`;
- a copy vendored by a wheel (auditwheel's `<distribution>.libs/`) -> the distribution that
  vendors it: `xgboost.libs/libgomp-a34b3233.so.1.0.0` -> `xgboost`, `scikit_learn.libs` ->
  `scikit_learn`;
- anywhere else, the file's name up to `.so`: `/usr/lib/x86_64-linux-gnu/libfoo.so.1` ->
  `libfoo`.

The path is the watched process's to choose (a mapped file's name): a name keeps only
letters, digits and `._+-` (anything else becomes `_`) and at most `NAME_MAX` characters; the
path itself travels percent-encoded inside the owner key (`library_key`), so a key never holds
a comma, a colon after its prefix, white space or a control character, and is decoded only
for the JSON reports (whose encoder escapes it). After the path, a key may carry the
variables the library's binary names (`?A_NUM_THREADS+B_THREADS`: capitals, digits and `_`
only, at most `MAX_CANDIDATES`), offered as unverified candidates. Pure, standard library
only.
"""

from __future__ import annotations

from typing import NamedTuple

LIBRARY_PREFIX = "lib:"
"""Owner keys of a library without a row: `lib:` and the percent-encoded object path."""
VENDOR_MARK = "@"
"""Owner keys of a runtime vendored by a package without a row: `libgomp@foo`."""
NAME_MAX = 64
PATH_MAX = 1024
"""Characters of an object path kept in a key (longer paths are cut: the name is taken
before the cut)."""
_PACKAGE_ROOTS = frozenset({"site-packages", "dist-packages"})
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-")
_PATH_SAFE = "/._+-"


class Library(NamedTuple):
    """What an object path says about its library."""

    name: str
    """The library's name, safe to print (`clean`)."""
    vendored: bool
    """The object is a copy vendored by the package `name` (`<name>.libs/`)."""


def clean(text: str) -> str:
    """`text` with only letters, digits and `._+-` (others `_`), at most `NAME_MAX`
    characters; "?" when nothing is left."""
    out = "".join(c if c in _SAFE else "_" for c in text[:NAME_MAX])
    return out.strip(".") or "?"


def library_of(path: str) -> Library:
    """The library of the object at `path` (see the module docstring)."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return Library("?", False)
    roots = [i for i, p in enumerate(parts[:-1]) if p in _PACKAGE_ROOTS]
    if roots:
        top = parts[roots[-1] + 1]
        if top.endswith(".libs") and len(top) > len(".libs") and roots[-1] + 2 < len(parts):
            return Library(clean(top[: -len(".libs")]), True)
        if roots[-1] + 2 == len(parts):  # a module file right in site-packages
            return Library(clean(top.split(".", 1)[0]), False)
        return Library(clean(top), False)
    base = parts[-1]
    stem = base.split(".so", 1)[0] if ".so" in base else base
    return Library(clean(stem), False)


def vendor_of(path: str) -> str | None:
    """The package that vendors the object at `path` (`<package>.libs/`), or None."""
    found = library_of(path)
    return found.name if found.vendored else None


CANDIDATES_MARK = "?"
"""Separates a library key's path from the variables its binary names (`candidates_of`)."""
MAX_CANDIDATES = 3
VARIABLE_MAX = 48


def is_variable_name(name: str) -> bool:
    """An environment variable's name as libraries spell them: capitals, digits, `_`."""
    return (
        0 < len(name) <= VARIABLE_MAX
        and name[0].isascii()
        and name[0].isupper()
        and all(c.isascii() and (c.isupper() or c.isdigit() or c == "_") for c in name)
    )


def library_key(path: str, candidates: tuple[str, ...] = ()) -> str:
    """The owner key of a library without a row whose code is the object at `path`, with
    the variables its binary names (`probe.libvars`: unverified candidates, never a fix)."""
    from urllib.parse import quote  # only where a library without a row is met

    key = LIBRARY_PREFIX + quote(path[:PATH_MAX], safe=_PATH_SAFE, errors="replace")
    names = [c for c in candidates if is_variable_name(c)][:MAX_CANDIDATES]
    return key + (CANDIDATES_MARK + "+".join(names) if names else "")


def _parts(key: str) -> tuple[str, tuple[str, ...]] | None:
    """(decoded path, candidates) of a well-formed `library_key` key, else None."""
    limit = len(LIBRARY_PREFIX) + 3 * PATH_MAX + 1 + MAX_CANDIDATES * (VARIABLE_MAX + 1)
    if not key.startswith(LIBRARY_PREFIX) or len(key) > limit:
        return None
    from urllib.parse import quote, unquote

    rest, mark, tail = key[len(LIBRARY_PREFIX) :].partition(CANDIDATES_MARK)
    names = tuple(tail.split("+")) if mark else ()
    if mark and (len(names) > MAX_CANDIDATES or not all(map(is_variable_name, names))):
        return None
    if not rest.startswith("/") or len(rest) > 3 * PATH_MAX:
        return None
    path = unquote(rest)
    return (path, names) if quote(path, safe=_PATH_SAFE) == rest else None


def object_of(key: str) -> str | None:
    """The object path of a `library_key` key, or None for any other key."""
    found = _parts(key)
    return None if found is None else found[0]


def candidates_of(key: str) -> tuple[str, ...]:
    """The variables the binary of a `library_key` key's object names (unverified)."""
    found = _parts(key)
    return () if found is None else found[1]


def vendored_key(runtime: str, vendor: str) -> str:
    """The owner key of `runtime` (a row's key) vendored by the package `vendor`."""
    return f"{runtime}{VENDOR_MARK}{clean(vendor)}"


def split_vendored(key: str) -> tuple[str, str] | None:
    """(runtime, vendor) of a `vendored_key` key, or None for any other key."""
    runtime, mark, vendor = key.partition(VENDOR_MARK)
    if not mark or not runtime or clean(vendor) != vendor or key.startswith(LIBRARY_PREFIX):
        return None
    return runtime, vendor
