"""The reader process's loop: the reads of other processes that may wait on them, made where
their waiting cannot hold oversub (`probe.memreader` starts it and says why).

This module is the whole program of that process: `probe.memreader` runs it in a fresh
interpreter (`python -I -S -`, the source on its standard input), so it imports nothing but
the interpreter's own modules (`os`, `marshal` and the C half of `socket`: 9 ms of CPU to
start, against 22 ms with the Python wrappers of `socket` and `signal`), holds no
descriptor but its socket and its buffer (its standard streams are /dev/null), runs in a
session of its
own (no terminal's signal reaches it), and exits when oversub's end of the socket closes
(oversub exited, or gave up on it). It answers one request at a time, each a frame of
`marshal`-ed tuples (4-byte little-endian length first), and does nothing else:

- `("memb", session, path, ranges)`: `pread` each (address, length) of `path`, a
  `/proc/PID/mem`, opened once per `session` (a new session closes the last one's), into
  the buffer shared with oversub (a memfd, the ranges one after the other from its start);
  answers `("ok", [bytes read, ...])` (0 where a read failed) or `("err", errno)`;
- `("mem", session, path, ranges)`: the same for a batch larger than that buffer, the
  bytes in the answer (`("ok", [bytes, ...])`);
- `("file", path, limit)`: at most `limit` bytes of `path` (`/proc/PID/cmdline`, `environ`
  or `maps`); `("ok", bytes)` or `("err", errno)`;
- `("lib", routes, device, inode)`: the first of `routes` ((path, extra open flags)) that
  is the regular file `device`:`inode`, opened without waiting, without a controlling
  terminal (O_PATH first, which opens nothing, then that very inode reopened), sent back as
  a descriptor with `("ok", size)`; else `("no", [why, ...])`.

Paths are oversub's (it adds its `root=` prefix for fake trees); a path that is not one of
those files of a `/proc/PID` directory is refused (`("err", EINVAL)`).
"""

from __future__ import annotations

import _socket
import errno
import marshal
import mmap
import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FRAME_MAX = 1 << 26
"""Bytes of one frame at most, either way (requests and answers are bounded well below)."""
_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_LEAVES = ("mem", "cmdline", "environ", "maps")


def allowed(path: str, kind: str) -> bool:
    """`path` is a file the reader may open for a request of `kind`: for "mem" a
    `/proc/PID/mem`, for "file" a `/proc/PID/cmdline`, `environ` or `maps` (under any root
    directory), for "lib" a mapped object by `/proc/PID/map_files/START-END` or by a path
    under `/proc/PID/root/`."""
    if kind == "lib":
        head, _, tail = path.partition("/proc/")
        pid, _, rest = tail.partition("/")
        if not _root(head) or not _number(pid):
            return False
        if rest.startswith("root/"):
            return len(rest) > len("root/")
        name, _, span = rest.partition("/")
        lo, dash, hi = span.partition("-")
        return name == "map_files" and bool(dash) and _hex(lo) and _hex(hi)
    parts = path.rsplit("/", 3)
    if len(parts) != 4 or parts[1] != "proc" or not _root(parts[0]) or not _number(parts[2]):
        return False
    return parts[3] == "mem" if kind == "mem" else parts[3] in _LEAVES[1:]


def _root(head: str) -> bool:
    return head == "" or head.startswith("/")


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text)


def _receive(sock: _socket.socket) -> Any:
    """The next request; None at the end of the socket (oversub is gone or done)."""
    header = _exactly(sock, 4)
    if header is None:
        return None
    size = int.from_bytes(header, "little")
    if size > FRAME_MAX:
        return None
    body = _exactly(sock, size)
    return None if body is None else marshal.loads(body)


def _exactly(sock: _socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send(sock: _socket.socket, answer: tuple[Any, ...], fd: int | None = None) -> None:
    body = marshal.dumps(answer)
    header = len(body).to_bytes(4, "little")
    rights = []
    if fd is not None:
        rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))]
    sent = sock.sendmsg([header, body], rights)  # no copy of the body into one frame
    if sent < len(header):
        sock.sendall(header[sent:])
        sent = len(header)
    if sent < len(header) + len(body):
        sock.sendall(memoryview(body)[sent - len(header) :])


def _read_file(path: str, limit: int) -> tuple[Any, ...]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        chunks, total = [], 0
        while total < limit and (chunk := os.read(fd, min(65536, limit - total))):
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    return ("ok", b"".join(chunks))


def _refusal(st: os.stat_result, device: int, inode: int) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_ino != inode or st.st_dev != device:
        return "another file than the one mapped"
    return None


def _open_library(path: str, flags: int, device: int, inode: int) -> tuple[int, int] | str:
    """`path` opened for reading and its size, when it is the regular file device:inode;
    else why not. O_PATH first: no FIFO waited on, no terminal acquired, no device opened."""
    route = "map_files" if "/map_files/" in path else "path"
    try:
        handle = os.open(path, os.O_PATH | os.O_CLOEXEC | flags)
    except OSError as exc:
        return f"{route}: {os.strerror(exc.errno) if exc.errno else 'cannot open'}"
    try:
        why = _refusal(os.fstat(handle), device, inode)
        if why is not None:
            return f"{route}: {why}"
        # Reopening the O_PATH descriptor opens that very inode: no second path walk.
        fd = os.open(f"/proc/self/fd/{handle}", _OPEN)
    except OSError as exc:
        return f"{route}: {os.strerror(exc.errno) if exc.errno else 'cannot open'}"
    finally:
        os.close(handle)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return f"{route}: cannot stat"
    why = _refusal(st, device, inode)
    if why is not None:
        os.close(fd)
        return f"{route}: {why}"
    return fd, st.st_size


class _Loop:
    def __init__(self, sock: _socket.socket, shared: mmap.mmap | None) -> None:
        self.sock = sock
        self.shared = memoryview(shared if shared is not None else b"")
        self.mem: int | None = None
        self.session: int | None = None

    def answer(self, request: Any) -> None:
        if not isinstance(request, tuple) or not request:
            _send(self.sock, _BAD)
            return
        kind = request[0]
        try:
            if kind == "memb":
                _send(self.sock, self.memory_shared(*request[1:]))
            elif kind == "mem":
                _send(self.sock, self.memory(*request[1:]))
            elif kind == "file":
                path, limit = request[1:]
                ok = allowed(path, "file")
                _send(self.sock, _read_file(path, limit) if ok else _BAD)
            elif kind == "lib":
                self.library(*request[1:])
            else:
                _send(self.sock, _BAD)
        except OSError as exc:
            _send(self.sock, ("err", exc.errno or errno.EIO))

    def open_memory(self, session: int, path: str) -> int | None:
        if not allowed(path, "mem"):
            return None
        if session != self.session or self.mem is None:
            if self.mem is not None:
                os.close(self.mem)
            self.mem, self.session = None, None
            self.mem = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
            self.session = session
        return self.mem

    def memory_shared(
        self, session: int, path: str, ranges: list[tuple[int, int]]
    ) -> tuple[Any, ...]:
        fd = self.open_memory(session, path)
        if fd is None or sum(length for _, length in ranges) > len(self.shared):
            return _BAD
        out, at = [], 0
        for address, length in ranges:
            try:
                out.append(os.preadv(fd, [self.shared[at : at + length]], address))
            except (OSError, OverflowError, ValueError):
                out.append(0)
            at += length
        return ("ok", out)

    def memory(self, session: int, path: str, ranges: list[tuple[int, int]]) -> tuple[Any, ...]:
        fd = self.open_memory(session, path)
        if fd is None:
            return _BAD
        out = []
        for address, length in ranges:
            try:
                out.append(os.pread(fd, length, address))
            except (OSError, OverflowError, ValueError):
                out.append(b"")
        return ("ok", out)

    def library(self, routes: list[tuple[str, int]], device: int, inode: int) -> None:
        why = []
        for path, flags in routes:
            if not allowed(path, "lib"):
                why.append("not a mapped object's path")
                continue
            opened = _open_library(path, flags, device, inode)
            if isinstance(opened, str):
                why.append(opened)
                continue
            fd, size = opened
            try:
                _send(self.sock, ("ok", size), fd)
            finally:
                os.close(fd)
            return
        _send(self.sock, ("no", why))


_BAD = ("err", errno.EINVAL)


def main() -> None:
    try:
        fd = os.open("/proc/self/comm", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"oversub-reader")
        finally:
            os.close(fd)
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the program's pipe, read to its end: nothing of it kept
    os.close(null)
    sock = _socket.socket(fileno=int(sys.argv[1]))
    memfd = int(sys.argv[2])
    shared = None if memfd < 0 else mmap.mmap(memfd, int(sys.argv[3]))
    if memfd >= 0:
        os.close(memfd)  # the map holds a descriptor of its own
    loop = _Loop(sock, shared)
    try:
        _send(sock, ("hello", os.getpid()))
        while (request := _receive(sock)) is not None:
            loop.answer(request)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
