"""The `oversub` program: stop signals handled, output streams made safe, then the CLI.

The console script and `python -m oversub` start here, not in `oversub.cli`: importing click
and the CLI takes tens of milliseconds, and a SIGTERM from a CI runner (or a Ctrl-C) in
that time used to kill oversub by the signal (exit 143/129) or print a KeyboardInterrupt
traceback. So this module imports only the standard library and `oversub.run.stopsignals`,
installs the stop-signal handler, and only then imports the CLI. From this point on, every
stop signal gives exit 130 and no traceback (`stopsignals.finish` blocks them from the end
of the run to the exit); only the interpreter's start-up before this module runs remains
uncovered.

It raises the soft limit on open files to the hard one (`run.fdlimit`: a sample holds the
/proc files it re-reads open; the commands oversub starts get the limit back), and prepares
the streams for what a CI job or a terminal may give:

- stderr carries diagnostics only: when it cannot be written (`2>/dev/full`, a closed
  pipe), what is written there is lost but the exit status stays the documented one and
  report files are still written;
- a stream whose encoding cannot show a character oversub prints (`PYTHONIOENCODING=ascii`:
  `·`, `…`, `≥`, `→`) gets an ASCII stand-in (`-`, `...`, `>=`, `->`), other characters
  are shown as Python escapes (`\\xe9`).
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import io
import os
import sys
from typing import NoReturn

from oversub.core.errors import ExitStatus, missing_dependency
from oversub.run import fdlimit, stopsignals

ASCII_STAND_INS = {
    "·": "-",
    "…": "...",
    "≥": ">=",
    "≤": "<=",
    "→": "->",
    "←": "<-",
    "◀": "<",
    "▶": ">",
    "×": "x",
    "µ": "u",
    "–": "-",
    "—": "--",
    "─": "-",
    "−": "-",
    "≈": "~",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
}
"""What a stream that cannot encode these characters shows instead."""

_ERRORS = "oversub-stand-in"

GC_THRESHOLDS = (50_000, 10, 10)
"""The cycle collector's thresholds for the program (Python's default: 700, 10, 10). A
sample makes tens of thousands of small objects that live on (two per thread at 5,000
threads), none of them in a cycle: at 700 the collector ran 50 times in a 3 s `watch` of
5,000 threads and re-walked the survivors each time, 12-19 ms of CPU; at 50,000, under
1 ms. Cyclic garbage still goes, only in larger batches."""


def _stand_in(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    shown = "".join(
        ASCII_STAND_INS.get(char) or char.encode("ascii", "backslashreplace").decode("ascii")
        for char in bad
    )
    return shown, exc.end


class _Forgiving(io.RawIOBase):
    """fd 2 for diagnostics: a write that fails is dropped, never raised into the run."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        try:
            return os.isatty(self._fd)
        except OSError:
            return False

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            return os.write(self._fd, data)
        except OSError:
            return len(data)  # lost: a diagnostic stream must not change the outcome


def _prepare_streams() -> None:
    codecs.register_error(_ERRORS, _stand_in)
    err = sys.stderr
    if err is not None:
        try:
            fd = err.fileno()
        except (AttributeError, ValueError, OSError):
            fd = -1
        if fd >= 0:
            encoding = getattr(err, "encoding", None) or "utf-8"
            sys.stderr = io.TextIOWrapper(
                io.BufferedWriter(_Forgiving(fd)),
                encoding=encoding,
                errors=_ERRORS if not _is_utf8(encoding) else "backslashreplace",
                line_buffering=True,
                write_through=True,
            )
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and not _is_utf8(out.encoding):
        out.reconfigure(errors=_ERRORS)


def _is_utf8(encoding: str) -> bool:
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def _code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def main() -> NoReturn:
    """Run the `oversub` command line and exit with its documented status."""
    try:
        try:
            # All inside the try: a stop signal is a KeyboardInterrupt from the moment its
            # handler exists (Python's own for SIGINT before), and SIGINT while raise_soft
            # imported `resource` printed a traceback.
            stopsignals.install()
            gc.set_threshold(*GC_THRESHOLDS)
            fdlimit.raise_soft()  # room for the /proc files a sample holds open (run.fdlimit)
            _prepare_streams()
            try:
                from oversub.cli.app import main as cli_main
            except ModuleNotFoundError as exc:
                # click or another dependency of the CLI itself is missing: one line, exit 3.
                missing = missing_dependency(exc)
                if missing is None:
                    raise
                _say(f"oversub: error: {missing}")
                sys.exit(int(ExitStatus.UNOBSERVABLE))
            cli_main()  # exits with the command's status: SystemExit, below
        except SystemExit as exc:
            code = _code(exc)
    except KeyboardInterrupt:
        # During imports or start-up, before the CLI could catch it. One KeyboardInterrupt
        # per process (stopsignals): another signal now is only recorded.
        _say("oversub: interrupted")
        code = stopsignals.INTERRUPTED
    code = _flush_stdout(stopsignals.finish(code))
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    # Everything is written and every file oversub wrote is closed (atomically renamed):
    # leave without the interpreter's teardown, which frees every object one by one (15-25
    # ms after `watch` at 5,000 threads). No atexit work is skipped: oversub registers none.
    os._exit(code)


def _flush_stdout(code: int) -> int:
    """Flush what stdout still holds; a failure is one error line and exit 3 (data was
    lost). Nothing flushes stdout after this: the program leaves with os._exit."""
    try:
        sys.stdout.flush()
    except (ValueError, AttributeError):
        return code
    except BrokenPipeError:
        pass  # the reader left: not an error (docs/guarantees.md, "Exit codes")
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"oversub: error: cannot write to stdout: {exc.strerror or exc}\n")
        code = code if code else int(ExitStatus.UNOBSERVABLE)
    return code
