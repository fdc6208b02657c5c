"""One child of `oversub doctor`: `probe.poolstart` run by the interpreter under test, under
a budget, and the two pipes it stops and goes by.

The child is started in a session of its own (its group is killed at the end, with
anything it left), in an empty working directory of its own (`python -c` puts the working
directory first on `sys.path`: nothing there may shadow a module), with the stop signals
unblocked and, where libc allows, SIGKILL when doctor dies (PR_SET_PDEATHSIG). Its
messages are one JSON line each, at most `LINE_MAX` bytes; its stderr is drained as it
comes and only its end is kept (where a crash says why). Everything the child writes is
its own to choose: bounded here, escaped where it is shown.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from oversub.probe import poolstart
from oversub.probe.census import process_start
from oversub.run import stopsignals
from oversub.run.confine import Cell
from oversub.run.runner import PR_SET_PDEATHSIG, libc_prctl

LINE_MAX = 1 << 16
"""Bytes of one message of a child read at most (a longer one is a broken child)."""
STDERR_KEPT = 4096
"""Bytes of a child's stderr kept (its end)."""
EXIT_WAIT_S = 2.0
"""How long a child may take to exit once told to (then it is killed)."""
SOURCE = Path(poolstart.__file__).read_text("utf-8")
"""What the child runs (`python -c SOURCE SPEC`): it may not have oversub installed."""


class PoolChild:
    """A child running `probe.poolstart` with `spec` under `cell`'s budget."""

    def __init__(
        self, python: str, spec: Mapping[str, object], env: Mapping[str, str], cell: Cell
    ) -> None:
        report_r, report_w = os.pipe()
        go_r, go_w = os.pipe()
        argument = json.dumps({**spec, "report": report_w, "go": go_r})
        self._stderr = b""
        self._buffer = b""
        self._cwd = tempfile.mkdtemp(prefix="oversub-doctor-")
        prctl = libc_prctl()  # loaded before any fork (never in the child)

        def in_child() -> None:
            stopsignals.unblock_in_child()
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            cell.preexec()

        try:
            with stopsignals.blocked():
                self.proc = subprocess.Popen(
                    [python, "-c", SOURCE, argument],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    pass_fds=(report_w, go_r),
                    cwd=self._cwd,
                    env=dict(env),
                    start_new_session=True,
                    preexec_fn=in_child,  # doctor runs no thread of its own
                )
        except BaseException:
            for fd in (report_r, go_w):
                os.close(fd)
            shutil.rmtree(self._cwd, ignore_errors=True)
            raise
        finally:
            os.close(report_w)
            os.close(go_r)
        self._report = report_r
        self._go = go_w
        self.pid = self.proc.pid
        self.start = process_start(self.pid)

    def message(self, deadline: float) -> dict[str, object] | None:
        """The child's next stop; None at end of file or on a broken message. Raises
        TimeoutError at `deadline` (time.monotonic)."""
        assert self.proc.stderr is not None
        err = self.proc.stderr.fileno()
        # poll, not select: oversub raises its descriptor limit (run.fdlimit), and select
        # refuses a descriptor above 1,023.
        poller = select.poll()
        for fd in (self._report, err):
            poller.register(fd, select.POLLIN)
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready = {fd for fd, _event in poller.poll(max(1, int(left * 1000)))}
            if err in ready:
                chunk = os.read(err, 65536)
                self._stderr = (self._stderr + chunk)[-STDERR_KEPT:]
            if self._report in ready:
                chunk = os.read(self._report, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
                if len(self._buffer) > LINE_MAX:
                    return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            found = json.loads(line)
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def go(self) -> None:
        """Let the child go on from its stop."""
        with contextlib.suppress(OSError):
            os.write(self._go, b"go\n")

    def end(self) -> str | None:
        """Tell the child to exit, give it `EXIT_WAIT_S`, kill its group (with anything it
        left behind) before reaping it, so the group id cannot name another process yet;
        how it ended when it died of a signal or exited non-zero (None: exit 0)."""
        with contextlib.suppress(OSError):
            os.close(self._go)
        deadline = time.monotonic() + EXIT_WAIT_S
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
            time.sleep(0.01)
        self.kill()
        status = self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self._report)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self._cwd, ignore_errors=True)  # and whatever the runtime wrote there
        if status < 0:
            try:
                name = signal.Signals(-status).name
            except ValueError:
                name = f"signal {-status}"
            return f"killed by {name}" + self._last_words()
        if status > 0:
            return f"exited with status {status}" + self._last_words()
        return None

    def kill(self) -> None:
        """SIGKILL to the child's session (its process group); the leader is not reaped."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def _last_words(self) -> str:
        text = self._stderr.decode("utf-8", "replace")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return f": {lines[-1][:300]}" if lines else ""
