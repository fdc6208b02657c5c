"""Reading a recording back (`report`, `diff`): the file is untrusted input.

A file that cannot be read is exit 3 (`UnreadableFile`); one that is not a recording, is
corrupt or has another format version is exit 2 (`NotARecording`), with one line naming
the problem and the line. A last line without its newline was cut by a killed run: it is
left out and the rest is read (`Recording.cut`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from oversub.errors import NotARecording, UnreadableFile
from oversub.timeline import Recording

MAX_LINE = 64 * 1024 * 1024
"""Longest line read (a recorded interval of 100,000 threads is about 3 MB)."""


def read_recording(path: Path) -> Recording:
    from oversub.analysis.replay import parse
    from oversub.render.escape import terminal

    shown = terminal(str(path))
    try:
        # Non-blocking: a FIFO in place of the file must not hang `report` (it is refused).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotARecording(f"{shown}: not a regular file")
        with open(fd, "rb") as f:
            raw: list[bytes] = []
            while line := f.readline(MAX_LINE + 1):
                if len(line) > MAX_LINE:
                    raise NotARecording(f"{shown}: line {len(raw) + 1} is longer than 64 MiB")
                raw.append(line)
    except OSError as exc:
        raise UnreadableFile(f"cannot read {shown}: {exc.strerror or exc}") from exc
    cut = bool(raw) and not raw[-1].endswith(b"\n")
    if cut:
        raw.pop()
    try:
        lines = [line.decode("utf-8") for line in raw]
    except UnicodeDecodeError as exc:
        raise NotARecording(f"{shown}: not UTF-8 text ({exc.reason})") from None
    try:
        return parse(lines, cut=cut)
    except NotARecording as exc:
        raise NotARecording(f"{shown}: {exc}") from None
