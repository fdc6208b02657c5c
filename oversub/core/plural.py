"""Counts in words: "1 CPU", "2 CPUs", "1 process", "0 processes".

One helper for every template (analysis and renderers alike), so that no message can print
"1 vCPUs" or "2 thread" for some input. English plurals here are regular except the ones
passed in explicitly.
"""

from __future__ import annotations

_IRREGULAR = {"is": "are", "was": "were", "has": "have"}


def noun(n: int | float, singular: str, plural: str | None = None) -> str:
    """`singular` when `n` is exactly 1, else `plural` (default: the regular plural of the
    last word: "busy process" -> "busy processes", "CPU" -> "CPUs")."""
    if n == 1:
        return singular
    if plural is not None:
        return plural
    if singular in _IRREGULAR:
        return _IRREGULAR[singular]
    return singular + ("es" if singular.endswith(("s", "x", "z", "ch", "sh")) else "s")


def count(n: int, singular: str, plural: str | None = None) -> str:
    """ "1 CPU", "2 CPUs", "0 processes": `n` and the noun agreeing with it."""
    return f"{n} {noun(n, singular, plural)}"
