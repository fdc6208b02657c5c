"""Stop signals (SIGINT, SIGTERM, SIGHUP): when they interrupt, when they wait, when they wait
in the kernel.

A CI timeout sends SIGTERM, a closed terminal or ssh session SIGHUP, a user Ctrl-C; each must
end oversub with exit 130 and no traceback whenever it arrives, and must never cut the start
of a command (a child nobody holds) or the clean-up of its tree. Three tools, from the
lightest touch:

- `interrupt()`: the first stop signal raises KeyboardInterrupt where the code is (the
  sampling loop ends and the summary is printed); later ones are recorded, not raised, so
  they cannot interrupt the clean-up the first one started.
- `deferred()`: signals are recorded and the code runs on (report files are written whole,
  a tree is stopped); the caller asks afterwards whether one came.
- `blocked()`: signals stay pending in the kernel (pthread_sigmask) until the block ends, for
  a few system calls that must not be cut in two (fork + recording the child).

`install()` sets the process-wide handler of the CLI before anything heavy is imported, and
`finish()` blocks the signals for the interpreter's exit and turns any that came into 130.
Only the standard library is imported here: `oversub.launch` imports this module first.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that end a run the way Ctrl-C does."""

INTERRUPTED = 130
"""The exit status of a run a stop signal ended (ExitStatus.INTERRUPTED, without its import)."""

Handler = Callable[[int, FrameType | None], None] | signal.Handlers


class _State:
    """Process-wide: which stop signals our handlers saw, and whether one was raised."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.raised = False


_STATE = _State()


def received() -> bool:
    """True once any stop signal reached one of this module's handlers in this process."""
    return bool(_STATE.received)


def _raise_once(signum: int, frame: FrameType | None) -> None:
    # One KeyboardInterrupt per run: a second signal while the first one's except clause or
    # clean-up runs would otherwise escape as a traceback.
    _STATE.received.append(signum)
    if not _STATE.raised:
        _STATE.raised = True
        raise KeyboardInterrupt


def install() -> None:
    """For the CLI process: the first stop signal raises KeyboardInterrupt; later ones are only
    recorded (`finish` turns them into exit 130). Main thread only."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_once)


@contextlib.contextmanager
def _handlers(handler: Handler) -> Iterator[None]:
    try:
        previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def interrupt() -> Iterator[None]:
    """While inside, the first SIGINT, SIGTERM or SIGHUP raises KeyboardInterrupt; later ones
    are recorded only (they would otherwise interrupt the clean-up the first one started).

    The previous handlers are restored on exit. Outside the main thread (where handlers
    cannot be set) this does nothing.
    """
    _STATE.raised = False
    with _handlers(_raise_once):
        yield


class Deferred:
    """What `deferred()` yields: whether a stop signal came while inside."""

    def __init__(self) -> None:
        self._before = len(_STATE.received)

    @property
    def received(self) -> bool:
        return len(_STATE.received) > self._before


def _record(signum: int, frame: FrameType | None) -> None:
    _STATE.received.append(signum)


@contextlib.contextmanager
def deferred() -> Iterator[Deferred]:
    """While inside, stop signals are recorded and nothing is interrupted: for work that must
    finish (writing reports, stopping a command's tree). Ask the yielded object afterwards."""
    seen = Deferred()
    with _handlers(_record):
        yield seen


@contextlib.contextmanager
def blocked() -> Iterator[None]:
    """While inside, stop signals stay pending in the kernel; they are handled when the block
    ends (by whatever handler is installed then). A child forked inside inherits the block:
    it must call `unblock_in_child` before it execs."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not on Linux
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def unblock_in_child(ignore: tuple[signal.Signals, ...] = ()) -> None:
    """In a child started inside `blocked()` (before exec, or a spawned worker): default
    dispositions (a signal now ends the child, not Python code of the parent's), except the
    signals in `ignore`, and the stop signals unblocked."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def finish(code: int) -> int:
    """The exit status to leave with: stop signals are blocked from here to the end of the
    process (the interpreter's own shutdown cannot be cut), and any stop signal that came
    during the run, or is pending now, makes it 130."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        if set(STOP_SIGNALS) & signal.sigpending():
            return INTERRUPTED
    return INTERRUPTED if received() else code
