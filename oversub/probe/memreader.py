"""The reader process: reads of another process's memory, made where a read that never
returns cannot hold oversub.

A read of `/proc/PID/mem` faults in the pages it touches, and `probe.backing` allows only
bytes backed by anonymous memory or a local file system. But it judges the maps it read a
moment before: a process that keeps swapping a readable page for a page of a file of its own
FUSE mount (mmap MAP_FIXED in a loop) makes one read in a few fault that page in and wait for
a server that never answers, in a sleep SIGKILL does not end (measured: 1 to 67 reads into
the swapped pages, within seconds). Nothing checked before a read can close that: the
process's mmap lock is not held between the reading of its maps and the read. And a read
waiting so holds that process's mmap lock: any later reader of its `cmdline`, `environ`,
`mem` (and of its `maps`, on kernels before 6.17) waits too, killably only, which a
process can also cause by itself (a thread of it reading its own FUSE page through
`/proc/self/mem` while another maps something).

So every such read is made by a separate process, `oversub-reader`, which oversub can
abandon (`probe.readerloop` is its whole program): a fresh interpreter (`python -I -S`, the
standard library only) in its own session, holding no descriptor but its end of a socket
and a buffer shared with oversub (`BUFFER`: the bytes it reads land there), that exits when
oversub's end closes: when the last sampler is closed (`release`, which collects it, so that
its CPU time is counted as oversub's), when oversub exits, or when oversub gives up on it.
Oversub sends it one request at a time (a batch of reads of one process: its stack tops
together, then each check; one file; one library open) and waits at most `DEADLINE_S` for
the answer, longer only while the reader is running (a large file under load), up to
`HARD_DEADLINE_S`. Past that the reader is killed
(it stays where it waits until the file system answers, then exits), the process it was
reading is quarantined for the rest of the run (none of its memory, `cmdline`, `environ` or
`maps` is read again: `quarantined`), and the next request starts a new reader. After
`ABANDONED_MAX` abandoned readers no other process's memory is read for the rest of the run
(`stopped`): a node where so many processes hold their readers is one whose memory oversub
cannot read safely, and it says so in `unavailable` of every sample.

The readers are oversub's own machinery, never part of a watched tree, cgroup or node:
`own_pids` names them (live and abandoned) for the samplers to leave out.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import marshal
import os
import signal
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from oversub.probe.backing import OverBudget

if TYPE_CHECKING:
    import mmap
    import socket
    import subprocess

DEADLINE_S = 0.5
"""How long oversub waits for one answer before it abandons a reader that is not running."""
HARD_DEADLINE_S = 3.0
"""How long it waits for a reader that is running (a large maps file on a loaded machine)."""
START_DEADLINE_S = 5.0
"""How long a new reader may take to start (a fresh interpreter: 10-30 ms here), three
times that while it is running."""
ABANDONED_MAX = 4
"""Readers abandoned in one run at most; past them no process's memory is read any more."""
BUFFER = 1 << 20
"""Bytes of memory shared with each reader (a memfd): the reads of one request land there,
not in the socket (a batch of 32 stack tops is 256 KiB); a larger request goes through the
socket."""
_HEADER = struct.Struct("<I")
_FRAME_MAX = 1 << 26


class Unreachable(OverBudget):
    """This process's memory is not read: its reader was abandoned (now or earlier in the
    run), or memory reads stopped for the run (`Readers.stopped`)."""


class Readers:
    """The reader process of one oversub process (`service()`), started at the first request
    and replaced when abandoned. Thread-safe: one request at a time."""

    def __init__(
        self,
        deadline: float = DEADLINE_S,
        hard_deadline: float = HARD_DEADLINE_S,
        cap: int = ABANDONED_MAX,
        python: str | None = None,
    ) -> None:
        self.deadline = deadline
        self.hard_deadline = hard_deadline
        self.cap = cap
        self._python = python or sys.executable
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._shared: mmap.mmap | None = None
        """The current reader's buffer: its reads of memory land there (`BUFFER`)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._abandoned: list[subprocess.Popen[bytes]] = []
        self._quarantine: dict[str, int | None] = {}
        """/proc/PID directory -> the start time of the process quarantined there."""
        self._session = 0
        self._users = 0
        self.abandoned = 0
        """Readers abandoned so far in this run."""
        self.stopped = False
        """No process's memory is read any more in this run (`ABANDONED_MAX` reached, or no
        reader could be started)."""

    # ------------------------------------------------------------------ what callers ask

    def quarantined(self, proc_dir: str, start: int | None = None) -> bool:
        """No memory of the process at `proc_dir` ("/proc/PID") may be read: reads stopped,
        or its reader was abandoned (the same process: its start time, where both are
        known)."""
        if self.stopped:
            return True
        if proc_dir not in self._quarantine:
            return False
        held = self._quarantine[proc_dir]
        return held is None or start is None or held == start

    def own_pids(self) -> frozenset[int]:
        """The readers alive now (the current one and those abandoned and not yet ended)."""
        with self._lock:
            self._reap()
            pids = [p.pid for p in self._abandoned]
            if self._proc is not None:
                pids.append(self._proc.pid)
        return frozenset(pids)

    def session(self) -> int:
        """A new session number: the reader opens a process's memory once per session."""
        self._session += 1
        return self._session

    def read_memory(
        self, proc_dir: str, session: int, ranges: list[tuple[int, int]], start: int | None = None
    ) -> list[bytes]:
        """The bytes at each (address, length) of the process's memory (b"" where a read
        failed), in `session`. Raises PermissionError (refused), OSError (gone) and
        `Unreachable`."""
        path = f"{proc_dir}/mem"
        with self._lock:
            if self._shared is None or sum(length for _, length in ranges) > BUFFER:
                answer = self._ask(("mem", session, path, ranges), proc_dir, start)
                if answer[0] != "ok" or not isinstance(answer[1], list):
                    raise _error(answer)
                return [b if isinstance(b, bytes) else b"" for b in answer[1]]
            answer = self._ask(("memb", session, path, ranges), proc_dir, start)
            shared = self._shared
            if answer[0] != "ok" or not isinstance(answer[1], list) or shared is None:
                raise _error(answer)
            out, at = [], 0
            for (_, length), n in zip(ranges, answer[1], strict=False):
                ok = isinstance(n, int) and 0 <= n <= length
                out.append(shared[at : at + n] if ok else b"")
                at += length
            return out

    def read_file(self, proc_dir: str, leaf: str, limit: int, start: int | None = None) -> bytes:
        """At most `limit` bytes of `proc_dir`/`leaf` (cmdline, environ, maps). Raises
        PermissionError (refused), OSError (gone) and `Unreachable`."""
        answer = self._ask(("file", f"{proc_dir}/{leaf}", limit), proc_dir, start)
        if answer[0] != "ok" or not isinstance(answer[1], bytes):
            raise _error(answer)
        return answer[1]

    def open_library(
        self, proc_dir: str, routes: list[tuple[str, int]], device: int, inode: int
    ) -> tuple[int, int] | str:
        """The first of `routes` ((path, extra open flags)) that is the regular file
        `device`:`inode`, open for reading, and its size; or why none is. Raises
        `Unreachable`."""
        answer, fds = self._ask_with_fds(("lib", routes, device, inode), proc_dir, None)
        if answer[0] == "ok" and fds and isinstance(answer[1], int):
            for extra in fds[1:]:
                os.close(extra)
            return fds[0], answer[1]
        for fd in fds:
            os.close(fd)
        if answer[0] == "no" and isinstance(answer[1], list):
            return "; ".join(str(w) for w in answer[1]) or "cannot open"
        return os.strerror(answer[1]) if isinstance(answer[1], int) else "cannot open"

    def acquire(self) -> None:
        """A sampler uses the readers from now on (`release` when it is closed)."""
        with self._lock:
            self._users += 1

    def release(self) -> None:
        """A sampler is done: the last one done ends the current reader (and collects it, so
        that its CPU time is oversub's, as `wait4` reports it); a later request starts
        another."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0:
                self._drop(kill=False)

    def close(self) -> None:
        """End the current reader (its end of the socket closes: it exits, and is collected);
        abandoned ones are left to end when their file system answers, and to whoever
        inherits them (they are never waited for)."""
        with self._lock:
            self._drop(kill=False)

    # ----------------------------------------------------------------------- the reader

    def _ask(self, request: tuple[Any, ...], proc_dir: str, start: int | None) -> tuple[Any, ...]:
        answer, fds = self._ask_with_fds(request, proc_dir, start)
        for fd in fds:
            os.close(fd)
        return answer

    def _ask_with_fds(
        self, request: tuple[Any, ...], proc_dir: str, start: int | None
    ) -> tuple[tuple[Any, ...], list[int]]:
        body = marshal.dumps(request)
        with self._lock:
            if self.quarantined(proc_dir, start):
                raise Unreachable(proc_dir)
            sock = self._sock if self._sock is not None else self._start()
            if sock is None:
                raise Unreachable(proc_dir)
            try:
                sock.settimeout(self.deadline)
                sock.sendall(_HEADER.pack(len(body)) + body)
                answer, fds = self._receive(sock, self.deadline)
            except (OSError, EOFError, ValueError, TypeError):
                answer, fds = None, []
            except BaseException:
                # Interrupted (^C) between a request and its answer: that answer would be
                # taken for the next request's. This reader is done (no process to blame).
                self._drop(kill=True)
                raise
            if answer is None or not isinstance(answer, tuple) or not answer:
                self._abandon(proc_dir, start)
                raise Unreachable(proc_dir) from None
        return answer, fds

    def _receive(
        self, sock: socket.socket, wait: float, hard_wait: float | None = None
    ) -> tuple[Any, list[int]]:
        """One answer frame, and the descriptors sent with it, within `wait` seconds (more,
        up to `hard_wait`, `hard_deadline` by default, while the reader is running); None
        past that."""
        import socket as sockets

        now = time.monotonic()
        hard_wait = self.hard_deadline if hard_wait is None else hard_wait
        due, hard = now + wait, now + max(wait, hard_wait)
        fds: list[int] = []
        space = sockets.CMSG_SPACE(4 * 4)
        frame = bytearray(65536)
        got, need = 0, _HEADER.size
        while got < need:
            left = due - time.monotonic()
            if left <= 0:
                if not self._running() or time.monotonic() >= hard:
                    return None, fds
                due = min(hard, time.monotonic() + self.deadline)  # running: give it time
                continue
            sock.settimeout(left)
            try:
                n, ancillary, _, _ = sock.recvmsg_into(
                    [memoryview(frame)[got:]], space, sockets.MSG_CMSG_CLOEXEC
                )
            except TimeoutError:
                continue
            for level, kind, data in ancillary:
                if level == sockets.SOL_SOCKET and kind == sockets.SCM_RIGHTS:
                    usable = len(data) - len(data) % 4
                    fds.extend(struct.unpack(f"{usable // 4}i", data[:usable]))
            if n == 0:
                raise EOFError
            got += n
            if need == _HEADER.size and got >= need:
                (size,) = _HEADER.unpack_from(frame)
                if size > _FRAME_MAX:
                    return None, fds
                need += size
                if need > len(frame):
                    frame.extend(bytes(need - len(frame)))
        return marshal.loads(memoryview(frame)[_HEADER.size : need]), fds

    def _running(self) -> bool:
        """The reader is running or runnable (state R): slow, not waiting."""
        if self._proc is None:
            return False
        try:
            with open(f"/proc/{self._proc.pid}/stat", "rb") as f:
                line = f.read(512)
        except OSError:
            return False
        return line[line.rfind(b")") + 2 :][:1] == b"R"

    def _start(self) -> socket.socket | None:
        """A new reader, ready; None when reads stopped or it could not be started."""
        import socket as sockets
        import subprocess as processes

        from oversub.probe import readerloop

        if self.stopped:
            return None
        self._reap()
        loader = readerloop.__loader__
        source = loader.get_source(readerloop.__name__) if loader is not None else None  # type: ignore[attr-defined]
        if source is None:
            self.stopped = True
            return None
        memfd, shared = _shared_buffer()
        ours, theirs = sockets.socketpair(sockets.AF_UNIX, sockets.SOCK_STREAM)
        argv = [self._python, "-I", "-S", "-", str(theirs.fileno()), str(memfd), str(BUFFER)]
        try:
            proc = processes.Popen(
                argv,
                stdin=processes.PIPE,
                stdout=processes.DEVNULL,
                stderr=processes.DEVNULL,
                pass_fds=(theirs.fileno(), memfd) if memfd >= 0 else (theirs.fileno(),),
                close_fds=True,
                start_new_session=True,
                cwd="/",
            )
        except (OSError, ValueError):  # no interpreter to run it: no reader, no reads
            ours.close()
            if shared is not None:
                shared.close()
            self.stopped = True
            return None
        finally:
            if memfd >= 0:
                os.close(memfd)  # both maps of it stay
            theirs.close()
        self._proc, self._sock, self._shared = proc, ours, shared
        try:
            assert proc.stdin is not None
            proc.stdin.write(source.encode())
            proc.stdin.close()
            hello, _ = self._receive(ours, START_DEADLINE_S, 3 * START_DEADLINE_S)
        except (OSError, EOFError, ValueError, TypeError):
            hello = None
        if not (isinstance(hello, tuple) and hello[:1] == ("hello",)):
            # Not started in time (a machine too loaded to run it?): abandoned like one
            # that waits, and the cap holds; no process is to blame.
            self._drop(kill=True)
            self.abandoned += 1
            self.stopped = self.abandoned >= self.cap
            return None
        return ours

    def _abandon(self, proc_dir: str, start: int | None) -> None:
        """Give up on the current reader (waiting for a read of `proc_dir`): kill it, leave
        it to end when its read returns, quarantine that process."""
        if start is None:
            start = _start_of(proc_dir)
        self._quarantine[proc_dir] = start
        self._drop(kill=True)
        self.abandoned += 1
        if self.abandoned >= self.cap:
            self.stopped = True

    def _drop(self, *, kill: bool) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._shared is not None:
            # An abandoned reader whose read returns at last writes into its own map of
            # this buffer, which no one reads any more.
            self._shared.close()
        proc, self._proc, self._sock, self._shared = self._proc, None, None, None
        if proc is None:
            return
        if kill:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGKILL)
            self._abandoned.append(proc)
        else:
            # An idle reader exits at once at the end of its socket; one still reading is
            # left like an abandoned one.
            try:
                proc.wait(timeout=0.5)
            except Exception:
                with contextlib.suppress(OSError):
                    proc.send_signal(signal.SIGKILL)
                self._abandoned.append(proc)

    def _reap(self) -> None:
        """Collect the abandoned readers that ended (their read returned at last), and the
        current one if it died (the next request starts another): a zombie child would
        stop `check`'s reaper from collecting the orphans it adopts."""
        self._abandoned = [p for p in self._abandoned if p.poll() is None]
        if self._proc is not None and self._proc.poll() is not None:
            self._drop(kill=False)


def _error(answer: tuple[Any, ...]) -> OSError:
    code = answer[1] if len(answer) > 1 and isinstance(answer[1], int) else errnos.EIO
    if code in (errnos.EACCES, errnos.EPERM):
        return PermissionError(code, os.strerror(code))
    return OSError(code, os.strerror(code))


def _shared_buffer() -> tuple[int, mmap.mmap | None]:
    """A memfd of `BUFFER` bytes and this process's map of it; (-1, None) where there is no
    memfd (Linux before 3.17): every answer then comes through the socket."""
    import mmap as maps

    try:
        memfd = os.memfd_create("oversub-reader", os.MFD_CLOEXEC)
    except (OSError, AttributeError):
        return -1, None
    try:
        os.ftruncate(memfd, BUFFER)
        return memfd, maps.mmap(memfd, BUFFER)
    except (OSError, ValueError):
        os.close(memfd)
        return -1, None


def _start_of(proc_dir: str) -> int | None:
    """The start time of the process at `proc_dir` (its stat line never waits on it)."""
    try:
        with open(f"{proc_dir}/stat", "rb") as f:
            line = f.read(4096)
        return int(line[line.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_SERVICE: Readers | None = None


def service() -> Readers:
    """The readers of this oversub process (one per process: every sampler shares them, so
    a quarantine and the cap hold for the whole run). A reader left running when oversub
    exits (a probe used without a sampler) ends at the end of its socket."""
    global _SERVICE
    if _SERVICE is None:
        _SERVICE = Readers()
    return _SERVICE
