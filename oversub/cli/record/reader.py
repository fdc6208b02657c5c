"""Reading a recording back (`report`, `diff`): the file is untrusted input.

A file that cannot be read is exit 3 (`UnreadableFile`); one that is not a recording, is
corrupt or has another format version is exit 2 (`NotARecording`), with one line naming
the problem and the line. The file is read line by line, never whole: the first bad line
ends the reading (a line that does not start like a record, `{`, after its first 64 KiB).
A last line without its newline was cut by a killed run: it is left out and the rest is
read (`Recording.cut`).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from oversub.core.errors import NotARecording, UnreadableFile
from oversub.recording.types import Recording

MAX_LINE = 64 * 1024 * 1024
"""Longest line read (a recorded interval of 100,000 threads is about 3 MB)."""
CHUNK = 64 * 1024
"""Bytes read at a time: a line that does not start like a record is refused after these."""


class _Lines:
    """The file's lines, read one at a time (never the whole file): each bounded by
    MAX_LINE, decoded from UTF-8; a last line without its newline is left out (`cut`)."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.cut = False

    def __iter__(self) -> Iterator[str]:
        number = 0
        while first := self.file.readline(CHUNK):
            number += 1
            parts, size = [first], len(first)
            started = False
            while not parts[-1].endswith(b"\n"):
                if not started:
                    start = parts[-1].lstrip()[:1]
                    if start and start != b"{":  # junk: refused now, not read to its end
                        raise NotARecording(f"line {number}: not JSON (a record is an object)")
                    started = bool(start)
                more = self.file.readline(min(CHUNK, MAX_LINE + 1 - size))
                if not more:
                    break
                parts.append(more)
                size += len(more)
                if size > MAX_LINE:
                    raise NotARecording(f"line {number} is longer than 64 MiB")
            raw = b"".join(parts)
            if not raw.endswith(b"\n"):
                self.cut = True  # cut by a killed run: the rest is read
                return
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise NotARecording(f"line {number}: not UTF-8 text ({exc.reason})") from None


def read_recording(path: Path) -> Recording:
    from oversub.recording.replay import parse
    from oversub.render.escape import terminal

    shown = terminal(str(path))
    try:
        # Non-blocking: a FIFO in place of the file must not hang `report` (it is refused).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotARecording(f"{shown}: not a regular file")
        with open(fd, "rb") as f:
            lines = _Lines(f)
            recording = parse(lines)
    except OSError as exc:
        raise UnreadableFile(f"cannot read {shown}: {exc.strerror or exc}") from exc
    except NotARecording as exc:
        if str(exc).startswith(f"{shown}: "):
            raise
        raise NotARecording(f"{shown}: {exc}") from None
    return dataclasses.replace(recording, cut=lines.cut)
