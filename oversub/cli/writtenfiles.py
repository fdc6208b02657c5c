"""Every file oversub writes: refused early when it cannot work, written whole or not at all.

- **Up front** (`check_report_path`, before anything is started or sampled: a run of
  minutes must not end in "cannot write"): the path's final target is resolved once (the
  link policy below), its directory must exist and be writable, an existing file must be a
  regular, writable file (a FIFO would block the write forever, a device or socket cannot
  be replaced by a rename), and the final rename must be allowed: in a sticky directory
  (`/tmp`) a file of another user cannot be replaced. Every refusal is a UsageError (exit 2)
  naming the flag and the path. The writers then use the target it returns.
- **The link policy.** A symbolic link at the path is followed, the whole chain, once, up
  front: the file it finally names is replaced, the link stays. A chain that loops or names
  nothing is a usage error, and so is a link owned by another user in a directory that user
  does not own (the kernel's `fs.protected_symlinks` rule, applied everywhere: in a shared
  directory, a link someone planted is not followed). A link planted after the start is
  never followed: the rename replaces the entry at the resolved target, whatever it is.
- **Atomic** (`Replacement`, `write_atomic`): the new content goes to a temporary file
  created exclusively beside the target (`mkstemp`: `O_CREAT | O_EXCL`, a random name, so
  no link planted at a predictable name is followed), with the old file's mode (else 0666
  minus the umask), is fsync'ed and renamed over the target. A full disk or a stop signal
  never leaves an empty or half-written file, the previous one stays as it was until the
  new one is complete, and no temporary file is left.
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

from oversub.core.errors import ReportError, UsageError

STEP_SUMMARY_MAX = 1 << 20
"""Bytes GitHub accepts in one step's job summary file (larger ones are not shown)."""
MAX_LINKS = 40
"""Links followed in one chain (the kernel's own limit, then ELOOP)."""


def _may_follow(link: Path, info: os.stat_result) -> bool:
    """The kernel's fs.protected_symlinks rule: a link is followed when it belongs to us or
    to the owner of the directory that holds it."""
    euid = os.geteuid()
    if info.st_uid == euid:
        return True
    return os.stat(link.parent).st_uid == info.st_uid


def _target(flag: str, path: Path) -> Path:
    """The file a write to `path` replaces: the path itself, or the file its chain of links
    finally names; UsageError for a loop, a link to nothing or a link not ours to follow."""
    current = path
    for _ in range(MAX_LINKS):
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if current == path:
                return path  # a new file
            raise UsageError(
                f"{flag} {path}: is a symbolic link to {current}, which does not exist "
                "(name the file itself)"
            ) from None
        if not stat.S_ISLNK(info.st_mode):
            return Path(os.path.realpath(current))
        if not _may_follow(current, info):
            raise UsageError(
                f"{flag} {path}: the symbolic link {current} belongs to uid {info.st_uid}, "
                "not to this user or the directory's owner: it is not followed"
            )
        current = current.parent / os.readlink(current)
    raise UsageError(f"{flag} {path}: a loop of symbolic links (more than {MAX_LINKS})")


def check_report_path(flag: str, path: Path) -> Path:
    """The file to write for `path` (the link policy); UsageError (naming flag and path)
    unless it can be written and replaced there."""
    try:
        return _check_report_path(flag, path)
    except OSError as exc:  # a name too long, a directory not searchable...
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from exc


def _check_report_path(flag: str, path: Path) -> Path:
    target = _target(flag, path)
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a directory")
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: directory {parent} is not writable")
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(
            f"{flag} {path}: is not a regular file (a FIFO, device or socket cannot hold a report)"
        )
    if not os.access(target, os.W_OK):
        raise UsageError(f"{flag} {path}: file is not writable")
    directory = os.stat(parent)
    euid = os.geteuid()
    if directory.st_mode & stat.S_ISVTX and euid not in (0, info.st_uid, directory.st_uid):
        raise UsageError(
            f"{flag} {path}: {target} belongs to uid {info.st_uid} in the sticky directory "
            f"{parent}: only its owner can replace it"
        )
    return target


def _new_file_mode(target: Path) -> int:
    """The mode the file gets: the old file's, else what open() would give (umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


class Replacement:
    """A new version of the file at `target`, written to a temporary file created
    exclusively beside it. `write` what it holds, then `commit` (fsync, rename over target)
    or `discard`; OSError on failure, the temporary file then removed."""

    def __init__(self, target: Path) -> None:
        self.target = target
        # A short fixed prefix: the temporary name stays valid whatever the target's name,
        # and never ends in .prom (node_exporter ignores it).
        self._fd: int | None
        self._fd, self._temporary = tempfile.mkstemp(
            prefix=".oversub-", suffix=".tmp", dir=target.parent
        )
        try:
            os.fchmod(self._fd, _new_file_mode(target))
        except BaseException:
            self.discard()
            raise

    def write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except BaseException:
            self.discard()
            raise

    def commit(self) -> None:
        try:
            assert self._fd is not None
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)  # a full disk may only say so here (delayed allocation)
            finally:
                os.close(fd)
            os.replace(self._temporary, self.target)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(self._temporary)


def stage(flag: str, path: Path, text: str) -> Replacement:
    """`text` (UTF-8) written beside `path` (a target from `check_report_path`), not yet
    renamed; ReportError (exit 3) says why it could not be."""
    try:
        staged = Replacement(path)
        staged.write(text.encode("utf-8"))
    except OSError as exc:
        raise ReportError(f"cannot write the {flag} report {path}: {exc.strerror or exc}") from exc
    return staged


def commit(flag: str, staged: Replacement) -> None:
    """Rename a staged report over its target; ReportError (exit 3) says why it could not."""
    try:
        staged.commit()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ReportError(f"cannot write the {flag} report {staged.target}: {reason}") from exc


def write_atomic(flag: str, path: Path, text: str) -> None:
    """Replace the file at `path` (a target from `check_report_path`) with `text` (UTF-8)
    in one rename; on any failure the old file is untouched, no temporary file is left, and
    ReportError (exit 3) says why."""
    commit(flag, stage(flag, path, text))


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
