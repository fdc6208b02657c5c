"""`check --metric NAME -- CMD`: figures the workload prints, captured from its stdout.

CMD's stdout becomes a pipe that oversub reads: every byte is passed on to oversub's own
stdout at once, unchanged (as `CMD | tee` would), and each whitespace-separated token
`NAME=<number>` for a NAME asked for is remembered, the last value winning (a throughput
printed at the end, or a running figure). Only while CMD runs: fd 1 of oversub itself is
pointed at the pipe when CMD starts (CMD inherits it) and restored when CMD's tree is gone.
With a pipe instead of a terminal, CMD may buffer its output (Python does): that is the
price of reading it, and why this happens only with `--metric`.

CMD's output is hostile input: the reader is linear in it. A line is split on whitespace
(one pass) and a token is a figure only when it is `NAME=` for a NAME asked for followed by a
number (`is_number`: split at its sign, exponent and point, nothing that backtracks); of a
line longer than `MAX_LINE` bytes only the whole tokens of its last `MAX_LINE` bytes count.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import threading
from collections.abc import Collection, Iterator, Sequence

from oversub.core.errors import UsageError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}\Z")
"""What a metric may be called: a word of at most 64 characters."""
MAX_LINE = 4096
"""Bytes of a line kept for matching (a longer line is passed on whole, matched on its end)."""
MAX_NAMES = 16
"""Names remembered when any name is read (`StdoutMetrics(None)`): the first ones seen."""


def check_names(names: Sequence[str]) -> tuple[str, ...]:
    for name in names:
        if not NAME.match(name):
            raise UsageError(
                f"--metric {name!r}: a name is a letter or _ then letters, digits, _ or . "
                "(at most 64)"
            )
    return tuple(dict.fromkeys(names))


def is_number(text: str) -> bool:
    """A decimal figure: `[-+]?(D+(.D*)?|.D+)([eE][-+]?D+)?` with D an ASCII digit, tested
    by splitting it at its sign, exponent and point (each a single pass of str's C code:
    no pattern that backtracks over the digits)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    mantissa, sep, exponent = body.replace("E", "e").partition("e")
    if sep:
        exponent = exponent[1:] if exponent[:1] in ("+", "-") else exponent
        if not (exponent.isascii() and exponent.isdigit()):
            return False
    whole, _, fraction = mantissa.partition(".")
    if not whole and not fraction:
        return False
    return all(not part or (part.isascii() and part.isdigit()) for part in (whole, fraction))


def scan(line: bytes, names: Collection[str] | None) -> Iterator[tuple[str, float]]:
    """The `NAME=<number>` tokens of one line (without its newline) whose NAME is in `names`
    (any valid name when None) and whose number is finite, in order. Only the last `MAX_LINE`
    bytes of a longer line are read, without the token the cut went through."""
    cut = len(line) > MAX_LINE
    text = (line[-MAX_LINE - 1 :] if cut else line).decode("utf-8", "replace")
    tokens = text.split()
    if cut and tokens and not text[:1].isspace():
        tokens = tokens[1:]  # the cut went through it (or just before it: unknown)
    for token in tokens:
        name, sep, value = token.partition("=")
        if not sep or not is_number(value):
            continue
        if names is None and not NAME.match(name):
            continue
        if names is not None and name not in names:
            continue
        number = float(value)
        if math.isfinite(number):
            yield name, number


class StdoutMetrics:
    """A context that tees fd 1 through a pipe and collects `NAME=<number>` tokens.

    `names` None: any valid name, the first `MAX_NAMES` seen (what CMD prints, for a hint)."""

    def __init__(self, names: Sequence[str] | None) -> None:
        self._names = None if names is None else frozenset(names)
        self.values: dict[str, float] = {}
        """The last value of each name."""
        self.means: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        """Mean and number of every value of each name (`tune --metric-stat mean`). The mean
        is kept as a running mean, which stays finite for any finite figures (a sum of
        figures near the largest double would not)."""
        self._saved: int | None = None
        self._read: int | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StdoutMetrics:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        self._saved = os.dup(1)
        read, write = os.pipe()
        os.dup2(write, 1)
        os.close(write)
        self._read = read
        self._thread = threading.Thread(target=self._pump, name="oversub-metrics", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        assert self._saved is not None
        os.dup2(self._saved, 1)  # our last write end of the pipe: the reader gets EOF
        if self._thread is not None:
            # A process that escaped the tree may still hold the pipe: do not wait for it.
            self._thread.join(timeout=2.0)
        os.close(self._saved)

    def _pump(self) -> None:
        assert self._read is not None and self._saved is not None
        pending = b""
        out: int | None = self._saved
        try:
            while chunk := os.read(self._read, 65536):
                if out is not None:
                    try:
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(out, view) :]
                    except OSError:
                        out = None  # the reader left: keep draining so CMD never blocks
                *lines, pending = (pending + chunk).split(b"\n")
                pending = pending[-MAX_LINE - 1 :]  # one byte more: was the cut at a blank?
                for line in lines:
                    self._take(line)
            self._take(pending)
        finally:
            os.close(self._read)

    def _take(self, line: bytes) -> None:
        for name, number in scan(line, self._names):
            count = self.counts.get(name, 0) + 1
            if count == 1 and self._names is None and len(self.counts) >= MAX_NAMES:
                continue
            self.values[name] = number
            self.counts[name] = count
            mean = self.means.get(name, 0.0)
            # (k-1)/k of the old mean plus 1/k of the figure: each term is at most the
            # largest figure in size, so the mean never overflows.
            self.means[name] = mean * ((count - 1) / count) + number / count
