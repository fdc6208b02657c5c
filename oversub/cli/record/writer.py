"""`--record FILE`: the run written as it goes, one line per interval (`recording.format`).

- The header is written when the run starts, each interval when it ends, the summary last;
  each line goes to the kernel in one write as soon as it exists, so a SIGKILL of oversub
  leaves every finished interval readable (the page cache outlives the process; a power
  loss is another matter: nothing is fsync'ed until the end).
- Bounded size (`--record-max-mb`): when the file passes the bound, it is rewritten with
  each pair of consecutive intervals merged into one (`recording.replay.merge`: sums of raw
  deltas, so every mean is unchanged) and, from then on, that many intervals are merged
  before one is written. A long run gets coarser, never cut: at the bound a run of any
  length keeps its whole time span.
- A failure to write (a full disk) does not stop the run: the recording stops, a warning
  says why, and the command then exits 3 after its normal output (`finish`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from oversub.analysis.fields import loads
from oversub.core.errors import ReportError
from oversub.core.model import Budget
from oversub.core.results import Assessment, Interval, Summary
from oversub.core.thresholds import Thresholds
from oversub.recording.format import Decoder, Encoder, dumps, header_record
from oversub.recording.replay import merge
from oversub.recording.types import Header
from oversub.run.checking import Tapped

if TYPE_CHECKING:
    from oversub.run.checking import Progress

MB = 1_000_000


class Recorder:
    """One recording being written. Use `open`, then `interval` per interval, then `finish`."""

    def __init__(self, path: Path, max_bytes: int, *, err: TextIO | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.err = err
        self.factor = 1
        """Intervals merged into each written one (doubles at each compaction)."""
        self._fd: int | None = None
        self._size = 0
        self._encoder = Encoder()
        self._pending: list[tuple[Interval, str]] = []
        self._written = 0
        """Interval records in the file."""
        self.failure: str | None = None

    def open(
        self,
        *,
        mode: str,
        pid: int | None,
        command: tuple[str, ...] | None,
        interval: float,
        budget: Budget,
        thresholds: Thresholds,
    ) -> Recorder:
        from oversub import __version__
        from oversub.cli.output import utc_timestamp

        header = Header(
            version=__version__,
            host=socket.gethostname(),
            started=utc_timestamp(),
            mode=mode,
            pid=pid,
            command=command,
            interval=interval,
            budget=budget,
            thresholds=thresholds,
        )
        try:
            # The path is the resolved target (`writtenfiles`' link policy): a link planted
            # there since is not followed (ELOOP), nor a FIFO opened blocking.
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOCTTY
            self._fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
        except OSError as exc:
            raise ReportError(f"cannot write --record {self.path}: {exc.strerror or exc}") from exc
        self._write(dumps(header_record(header)))
        return self

    def interval(self, iv: Interval, timestamp: str) -> None:
        """Record one interval (merged with the next ones once the file has been coarsened)."""
        if self._fd is None:
            return
        self._pending.append((iv, timestamp))
        if len(self._pending) >= self.factor:
            self._flush_pending()
        if self._size > self.max_bytes and self._written > 1:
            self._compact()

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Write what is pending and the summary record, close; ReportError (exit 3) when
        the recording could not be written whole."""
        if self._fd is not None:
            self._flush_pending()
            self._write(dumps(summary))
        self.close()
        if self.failure is not None:
            raise ReportError(self.failure)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.fsync(fd)
            os.close(fd)

    # ------------------------------------------------------------------ internals

    def _flush_pending(self) -> None:
        if not self._pending:
            return
        merged = self._pending[0][0]
        for iv, _ in self._pending[1:]:
            merged = merge(merged, iv)
        stamp = self._pending[-1][1]
        self._pending = []
        self._write(dumps(self._encoder.interval(merged, stamp)))
        self._written += 1

    def _write(self, line: str) -> None:
        if self._fd is None:
            return
        data = (line + "\n").encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._fail(f"cannot write --record {self.path}: {exc.strerror or exc}")
            return
        self._size += len(data)

    def _fail(self, message: str) -> None:
        """Stop recording; the run goes on (its answer stands), the exit status will say."""
        self.failure = message
        self.close()
        from oversub.render.escape import terminal

        out = self.err if self.err is not None else sys.stderr
        with contextlib.suppress(OSError, ValueError):
            out.write(f"oversub: warning: {terminal(message)}; the recording stops here\n")
            out.flush()

    def _compact(self) -> None:
        """Rewrite the file with consecutive intervals merged in pairs, until it fits (or
        holds one interval); later intervals are merged as coarsely."""
        while self._size > self.max_bytes and self._written > 1 and self._fd is not None:
            self.close()
            try:
                self._size, self._written, self._encoder = _rewrite_merged(self.path)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
                self._fd = os.open(self.path, flags | os.O_NONBLOCK)
            except OSError as exc:
                self._fail(f"cannot coarsen --record {self.path}: {exc.strerror or exc}")
                return
            self.factor *= 2


def _records(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        yield from f


def _rewrite_merged(path: Path) -> tuple[int, int, Encoder]:
    """Replace the recording at `path` (the resolved target: a link there stays a link) by
    one with each pair of intervals merged, through `writtenfiles.Replacement`; (its size,
    its interval records, the encoder that continues it)."""
    from oversub.cli.writtenfiles import Replacement

    lines = _records(path)
    header = next(lines)
    decoder, encoder = Decoder(), Encoder()
    out = Replacement(path)
    size = written = 0

    def put(text: str) -> None:
        nonlocal size
        data = text.encode("utf-8")
        out.write(data)
        size += len(data)

    try:
        put(header)
        first: tuple[Interval, str] | None = None
        for line in lines:
            iv, stamp = decoder.interval(loads(line))
            if first is None:
                first = (iv, stamp)
                continue
            put(dumps(encoder.interval(merge(first[0], iv), stamp)) + "\n")
            written += 1
            first = None
        if first is not None:
            put(dumps(encoder.interval(*first)) + "\n")
            written += 1
        out.commit()
    except BaseException:
        out.discard()
        raise
    return size, written, encoder


def summary_record(
    summary: Summary,
    *,
    command_status: int | None = None,
    timed_out: bool = False,
    interrupted: bool = False,
    metrics: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The last record: the summary as `--format ndjson` prints it, and how `check` ended."""
    from oversub.cli.output import utc_timestamp
    from oversub.render.serialize import summary_dict

    return {
        "type": "summary",
        "timestamp": utc_timestamp(),
        **summary_dict(summary),
        "command_status": command_status,
        "timed_out": timed_out,
        "interrupted": interrupted,
        "metrics": dict(metrics or {}),
    }


def stamped(recorder: Recorder | None) -> Callable[[Interval, Assessment, int, float], None]:
    """A session's `on_interval` that records each interval with the wall clock now."""
    from oversub.cli.output import utc_timestamp

    def record(iv: Interval, _a: Assessment, _n: int, _elapsed: float) -> None:
        if recorder is not None:
            recorder.interval(iv, utc_timestamp())

    return record


class RecordingProgress(Tapped):
    """`check`'s progress, which also records each interval (a `run.checking.Progress`)."""

    def __init__(self, inner: Progress, recorder: Recorder) -> None:
        super().__init__(inner, stamped(recorder))


def open_recorder(
    path: Path,
    max_mb: float,
    *,
    mode: str,
    pid: int | None,
    command: tuple[str, ...] | None,
    interval: float,
    budget: Budget,
    thresholds: Thresholds,
    err: TextIO | None = None,
) -> Recorder:
    """The recording at `path`, header written; UsageError before anything runs when the
    path cannot take a file (as for report files), ReportError when it cannot be created."""
    from oversub.cli.writtenfiles import check_report_path

    recorder = Recorder(check_report_path("--record", path), round(max_mb * MB), err=err)
    return recorder.open(
        mode=mode,
        pid=pid,
        command=command,
        interval=interval,
        budget=budget,
        thresholds=thresholds,
    )


def finish_quietly(recorder: Recorder, summary: Mapping[str, Any]) -> str | None:
    """Finish the recording; why it is incomplete (the caller exits 3 after its report), or
    None."""
    try:
        recorder.finish(summary)
    except ReportError as exc:
        return str(exc)
    return None
