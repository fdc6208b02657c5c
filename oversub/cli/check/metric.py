"""`check --metric NAME -- CMD`: figures the workload prints, captured from its stdout.

CMD's stdout becomes a pipe that oversub reads: every byte is passed on to oversub's own
stdout at once, unchanged (as `CMD | tee` would), and each whitespace-separated token
`NAME=<number>` for a NAME asked for is remembered, the last value winning (a throughput
printed at the end, or a running figure). Only while CMD runs: fd 1 of oversub itself is
pointed at the pipe when CMD starts (CMD inherits it) and restored when CMD's tree is gone.
With a pipe instead of a terminal, CMD may buffer its output (Python does): that is the
price of reading it, and why this happens only with `--metric`.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import threading
from collections.abc import Sequence

from oversub.core.errors import UsageError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}\Z")
"""What a metric may be called: a word of at most 64 characters."""
MAX_LINE = 4096
"""Bytes of a line kept for matching (a longer line is passed on whole, matched on its end)."""


def check_names(names: Sequence[str]) -> tuple[str, ...]:
    for name in names:
        if not NAME.match(name):
            raise UsageError(
                f"--metric {name!r}: a name is a letter or _ then letters, digits, _ or . "
                "(at most 64)"
            )
    return tuple(dict.fromkeys(names))


class StdoutMetrics:
    """A context that tees fd 1 through a pipe and collects `NAME=<number>` tokens."""

    def __init__(self, names: Sequence[str]) -> None:
        alternatives = "|".join(re.escape(n) for n in names)
        self._pattern = re.compile(
            rf"(?:^|\s)({alternatives})=([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)(?=\s|$)"
        )
        self.values: dict[str, float] = {}
        """The last value of each name."""
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        """Sum and number of every value of each name (`tune --metric-stat mean`)."""
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
                pending = pending[-MAX_LINE:]
                for line in lines:
                    self._scan(line[-MAX_LINE:])
            self._scan(pending)
        finally:
            os.close(self._read)

    def _scan(self, line: bytes) -> None:
        for name, value in self._pattern.findall(line.decode("utf-8", "replace")):
            number = float(value)
            if math.isfinite(number):
                self.values[name] = number
                self.sums[name] = self.sums.get(name, 0.0) + number
                self.counts[name] = self.counts.get(name, 0) + 1
