"""`check`'s report files: refused early when they cannot work, written whole or not at all.

- A report path (`--json`, `--junit`, `--markdown`) is checked before anything is started
  or sampled (a run of minutes must not end in "cannot write"): its directory must exist
  and be writable, and an existing file must be a regular, writable file. A FIFO would
  block the write forever, and a device or socket cannot be replaced by a rename.
- A report is written to a temporary file in the same directory, flushed to disk, and
  renamed over the path (`write_atomic`): a full disk or a stop signal never leaves an empty
  or half-written report, and the previous report stays as it was until the new one is
  complete. A symbolic link is followed: the file it names is replaced, the link stays.
- `$GITHUB_STEP_SUMMARY` is appended to (other steps share it), only when it is a regular
  file (opened without blocking, so a FIFO cannot hang oversub), and only as much as keeps
  it under GitHub's 1 MiB limit per step (`STEP_SUMMARY_MAX`). Any problem with it is a
  warning: the job summary is a courtesy of the CI page, the gate's answer stands.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from oversub.errors import ReportError, UsageError

STEP_SUMMARY_MAX = 1 << 20
"""Bytes GitHub accepts in one step's job summary file (larger ones are not shown)."""


def _target(path: Path) -> Path:
    """The file a report replaces: the path itself, or what a symbolic link there names."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def check_report_path(flag: str, path: Path) -> None:
    """UsageError (naming flag and path) unless a report can be written at `path`."""
    try:
        _check_report_path(flag, path)
    except OSError as exc:  # a name too long, a loop of symlinks...
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from exc


def _check_report_path(flag: str, path: Path) -> None:
    target = _target(path)
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: directory {parent} is not writable")
    if not target.exists():
        return
    if not stat.S_ISREG(target.stat().st_mode):
        raise UsageError(
            f"{flag} {path}: is not a regular file (a FIFO, device or socket cannot hold a report)"
        )
    if not os.access(target, os.W_OK):
        raise UsageError(f"{flag} {path}: file is not writable")


def _new_file_mode(target: Path) -> int:
    """The mode the report gets: the old file's, else what open() would give (umask)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(flag: str, path: Path, text: str) -> None:
    """Replace the file at `path` with `text` (UTF-8) in one rename; on any failure the old
    file is untouched, no temporary file is left, and ReportError (exit 3) says why."""
    target = _target(path)
    data = text.encode("utf-8")
    try:
        # A short fixed prefix: the temporary name stays valid whatever the report's name.
        fd, temporary = tempfile.mkstemp(prefix=".oversub-", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise ReportError(f"cannot write the {flag} report {path}: {exc.strerror or exc}") from exc
    try:
        try:
            os.fchmod(fd, _new_file_mode(target))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)  # a full disk may only say so here (delayed allocation)
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            reason = exc.strerror or str(exc)
            raise ReportError(f"cannot write the {flag} report {path}: {reason}") from exc
        raise


def step_summary_problem(path: str) -> str | None:
    """Why `path` cannot take the job summary (checked before the run), or None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None  # appending creates it
    except OSError as exc:
        return f"cannot use GITHUB_STEP_SUMMARY {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return f"GITHUB_STEP_SUMMARY {path} is not a regular file: the job summary is skipped"
    return None


def append_step_summary(path: str, render: Callable[[int], str]) -> str | None:
    """Append `render(room)` and a newline to the job summary at `path`, where `room` is what
    the 1 MiB limit leaves; a warning (not raised) when it cannot be done."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        return f"cannot append to GITHUB_STEP_SUMMARY {path}: {exc.strerror or exc}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"GITHUB_STEP_SUMMARY {path} is not a regular file: the job summary is skipped"
        room = STEP_SUMMARY_MAX - info.st_size - 1  # the newline after the report
        data = (render(room) + "\n").encode("utf-8")
        if len(data) > room + 1:
            return (
                f"GITHUB_STEP_SUMMARY {path} already holds {info.st_size:,} bytes: the "
                f"{len(data):,}-byte report would pass GitHub's 1 MiB limit and is skipped"
            )
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        return f"cannot append to GITHUB_STEP_SUMMARY {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None
