"""Exit statuses and the exceptions that map to them.

Findings never share a code with tool errors: CI must be able to tell "your job
oversubscribes" (1) from "oversub could not look" (3).
"""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """Documented exit codes of every `oversub` command (docs/guarantees.md)."""

    OK = 0
    """Success; for `check`, the run passes `--fail-on` (`analysis.policy.fails`)."""
    FOUND = 1
    """A finding: for `check` and `merge`, the run fails `--fail-on` (a critical finding
    under `costly`, else a verdict at or above it)."""
    USAGE = 2
    """Bad flag value, bad configuration, missing launcher variable."""
    UNOBSERVABLE = 3
    """No such pid, permission denied, unsupported platform, CMD failed to start or failed."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP."""


class OversubError(Exception):
    """Base class: an error the CLI turns into one line on stderr and an exit status."""

    status: ExitStatus = ExitStatus.UNOBSERVABLE


class UsageError(OversubError):
    """The user asked for something that cannot be done as asked."""

    status = ExitStatus.USAGE


class TargetError(OversubError):
    """The target process cannot be observed (missing, foreign, or platform lacks the data)."""

    status = ExitStatus.UNOBSERVABLE


class NoSuchProcess(TargetError):
    """The pid does not exist (or exited before we could look)."""


class PermissionDenied(TargetError):
    """The pid exists but we may not read what we need."""


class NoSuchCgroup(TargetError):
    """`--cgroup PATH` names no cgroup of the hierarchy that holds the cpu controller."""


class UnsupportedPlatform(TargetError):
    """The platform does not expose what the command needs."""


class CommandError(OversubError):
    """`check -- CMD`: the command could not be started, or it failed."""

    status = ExitStatus.UNOBSERVABLE


class ReportError(OversubError):
    """`check`: a requested report file could not be written (the verdict was printed)."""

    status = ExitStatus.UNOBSERVABLE


class OutputClosed(OversubError):
    """The reader of stdout went away (`oversub watch PID | head`): stop quietly.

    Not a failure: the reader got what it wanted, so the exit status is 0.
    """

    status = ExitStatus.OK


class OutputFailed(OversubError):
    """stdout cannot be written (a full disk, an I/O error): the data is lost, say so (exit 3).

    A reader that left is OutputClosed instead; a failing stderr is never an error (see
    `oversub.launch`): only diagnostics are lost there.
    """

    status = ExitStatus.UNOBSERVABLE


class NotARecording(UsageError):
    """`report`/`diff`: the file is not an oversub recording, is corrupt, or has a version
    this oversub does not read (exit 2: the input is wrong, not the system)."""


class UnreadableFile(OversubError):
    """`report`/`diff`: the file cannot be read at all (missing, no permission, an I/O
    error): exit 3, like any target oversub cannot look at."""

    status = ExitStatus.UNOBSERVABLE


DEPENDENCIES = {
    "psutil": "psutil",
    "click": "click",
    "rich": "rich",
    "cpuinfo": "py-cpuinfo",
    "threadpoolctl": "threadpoolctl",
    "plotext": "plotext",
    "prometheus_client": "prometheus-client",
    "tomli": "tomli",
}
"""oversub's runtime dependencies: the module a command imports -> the package that has it."""


def missing_dependency(exc: BaseException) -> str | None:
    """The one-line error for an import of a runtime dependency that is not installed for
    this interpreter (`python3 -m oversub` outside the venv that has oversub), else None."""
    if not isinstance(exc, ModuleNotFoundError) or exc.name is None:
        return None
    package = DEPENDENCIES.get(exc.name.partition(".")[0])
    if package is None:
        return None
    import sys

    return (
        f"the package {package!r}, which oversub needs, is not installed for {sys.executable}: "
        f"activate the venv that has oversub (source .venv/bin/activate in a clone) "
        f"or install it there (python -m pip install oversub)"
    )
