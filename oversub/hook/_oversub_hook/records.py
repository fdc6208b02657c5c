"""What the hook tells: each process's record in the run's directory, which `oversub run`
reads back at the end (`analysis.cured.parse_record`), and its one-line faults on stderr."""

from __future__ import annotations

import json
import os
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

MAX_FAULTS = 20
"""Fault lines kept in a record (the last ones)."""
MAX_LINE = 300
"""Characters of a fault line at most (an exception's text is the library's)."""


def write(directory: str, document: dict[str, Any]) -> None:
    """`document` as this process's record, PID.json in `directory`, written whole: a
    temporary file renamed over the last one. A directory that is gone (oversub ended) is
    no error: nobody reads it any more."""
    path = os.path.join(directory, f"{os.getpid()}.json")
    temporary = f"{path}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, separators=(",", ":"))
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError):
        pass


def fault_line(what: str, exc: BaseException) -> str:
    """`could not apply WHAT in pid P: ERROR`, printable and bounded."""
    line = f"could not apply {what} in pid {os.getpid()}: {type(exc).__name__}: {exc}"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)[:MAX_LINE]


def say(text: str) -> None:
    """`text` on stderr; a closed or broken stderr must not break the program."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:
        pass
