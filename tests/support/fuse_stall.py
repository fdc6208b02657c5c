"""A FUSE file system whose reads never return (issue 38), in pure Python.

Run as a program by the unprivileged user a test chooses:

    python3 fuse_stall.py MOUNTPOINT SIZE

It mounts MOUNTPOINT through `fusermount3` (setuid root: /dev/fuse is root's, mode 0600),
which sends back the /dev/fuse descriptor over a socket (`_FUSE_COMMFD`), and serves one
regular, executable file `stall` of SIZE bytes. It answers INIT, LOOKUP, GETATTR, OPEN,
OPENDIR, READDIR, STATFS, FLUSH and RELEASE, and never a READ: whoever faults in a page of
that file (a process touching its mapping, or a reader of the process's /proc/PID/mem)
waits for as long as this server lives, in uninterruptible sleep once the request was
read here. It prints "mounted" when the file can be opened and mapped.

Killing this process (SIGKILL is enough) closes its /dev/fuse descriptor, which aborts the
connection: every waiting request fails at once with ENOTCONN, so a test that kills it in
its clean-up can never leave a process in state D. `fusermount3 -u -z MOUNTPOINT` then
removes the mount (`unmount`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

FILE = "stall"
"""The one file of the mount."""

_IN = struct.Struct("<IIQQIIIHH")  # fuse_in_header: len, opcode, unique, nodeid, uid, ...
_OUT = struct.Struct("<IiQ")  # fuse_out_header: len, error, unique
_ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # fuse_attr: 88 bytes
_INIT_IN = struct.Struct("<IIII")  # major, minor, max_readahead, flags
_INIT_OUT = struct.Struct("<IIIIHHIIHHII24x")  # fuse_init_out: 64 bytes
_ENTRY = struct.Struct("<QQQQII")  # fuse_entry_out before its attr
_ATTR_OUT = struct.Struct("<QII")  # fuse_attr_out before its attr
_OPEN_OUT = struct.Struct("<QIi")  # fh, open_flags, backing_id

LOOKUP, FORGET, GETATTR, OPEN, READ, STATFS, RELEASE = 1, 2, 3, 14, 15, 17, 18
FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, INTERRUPT, BATCH_FORGET = 25, 26, 27, 28, 29, 36, 42
_NO_REPLY = {FORGET, BATCH_FORGET, INTERRUPT}
ENOENT, ENOSYS = 2, 38


def fusermount() -> str | None:
    """The setuid fusermount3 of Debian's fuse3 package, or None."""
    return shutil.which("fusermount3")


def unmount(mountpoint: str) -> None:
    """Lazily unmount (`fusermount3 -u -z`); nothing when it is not mounted."""
    tool = fusermount()
    if tool is not None:
        subprocess.run(
            [tool, "-u", "-z", "--", mountpoint], capture_output=True, timeout=30, check=False
        )


def _mount(mountpoint: str) -> int:
    tool = fusermount()
    if tool is None:
        raise SystemExit("no fusermount3 (Debian package fuse3)")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {**os.environ, "_FUSE_COMMFD": str(theirs.fileno())}
    done = subprocess.run(
        [tool, "-o", "rw,nosuid,nodev,fsname=stall,subtype=stall", "--", mountpoint],
        env=env,
        pass_fds=(theirs.fileno(),),
        capture_output=True,
        timeout=30,
        check=False,
    )
    theirs.close()
    if done.returncode != 0:
        raise SystemExit(f"fusermount3 failed: {done.stderr.decode(errors='replace').strip()}")
    _, fds, _, _ = socket.recv_fds(ours, 16, 1)
    ours.close()
    if not fds:
        raise SystemExit("fusermount3 sent no descriptor")
    return fds[0]


def _attr(node: int, size: int) -> bytes:
    now = int(time.time())
    uid, gid = os.getuid(), os.getgid()
    if node == 1:
        return _ATTR.pack(1, 0, 0, now, now, now, 0, 0, 0, 0o40755, 2, uid, gid, 0, 4096, 0)
    blocks = (size + 511) // 512
    return _ATTR.pack(2, size, blocks, now, now, now, 0, 0, 0, 0o100755, 1, uid, gid, 0, 4096, 0)


def serve(fd: int, size: int, then: list[str] | None = None) -> None:
    """Answer the kernel until the mount goes away; READ is never answered. Says "mounted"
    once INIT is answered (never by looking at the mount itself: this process serves it),
    and starts the command `then`, if any."""
    held: list[int] = []  # the unique ids of the reads left waiting (kept, never answered)

    def reply(unique: int, body: bytes = b"", error: int = 0) -> None:
        with contextlib.suppress(OSError):  # the request was interrupted meanwhile
            os.write(fd, _OUT.pack(_OUT.size + len(body), -error, unique) + body)

    while True:
        try:
            request = os.read(fd, 1 << 20)
        except OSError:
            return  # ENODEV: unmounted
        if not request:
            return
        _, opcode, unique, node, *_ = _IN.unpack_from(request)
        body = request[_IN.size :]
        if opcode in _NO_REPLY:
            continue
        if opcode == READ:
            held.append(unique)
        elif opcode == INIT:
            _major, minor, readahead, _flags = _INIT_IN.unpack_from(body)
            out = _INIT_OUT.pack(7, min(minor, 31), readahead, 0, 16, 12, 4096, 1, 0, 0, 0, 0)
            reply(unique, out)
            print("mounted", flush=True)
            if then:
                subprocess.Popen(then)  # reaped by nobody: it ends with this process's session
        elif opcode == LOOKUP:
            if node == 1 and body.split(b"\0", 1)[0] == FILE.encode():
                reply(unique, _ENTRY.pack(2, 0, 3600, 3600, 0, 0) + _attr(2, size))
            else:
                reply(unique, error=ENOENT)
        elif opcode == GETATTR:
            reply(unique, _ATTR_OUT.pack(3600, 0, 0) + _attr(node, size))
        elif opcode in (OPEN, OPENDIR):
            reply(unique, _OPEN_OUT.pack(0, 0, 0))
        elif opcode in (READDIR, FLUSH, RELEASE, RELEASEDIR):
            reply(unique)
        elif opcode == STATFS:
            reply(unique, struct.pack("<QQQQQIIII24x", 0, 0, 0, 0, 0, 4096, 255, 4096, 0))
        else:
            reply(unique, error=ENOSYS)


def main() -> None:
    mountpoint, size = sys.argv[1], int(sys.argv[2])
    then = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else None
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    serve(_mount(mountpoint), size, then)


if __name__ == "__main__":
    main()
