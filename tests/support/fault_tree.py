"""Helpers for tests/system/test_faults.py: a pid that vanishes in the middle of a sample, and
small readers of what `oversub watch` is doing.

`VanishingPid` wraps the os functions the probes read /proc with (os.open, os.read,
os.pread, os.listdir, os.path.isdir) so that, once armed, the first access to one kind of
file of one pid fails the way the kernel fails for a process that has just exited: ENOENT
on open, ESRCH on a read through an open descriptor (the test chooses which exception),
an empty listing of an open task directory.
From then on the pid is gone everywhere: every file under /proc/PID fails, /proc no longer
lists it and /proc/PID is no directory, although the real process keeps running.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from oversub.probe.procstat import process_cpu_ns

__all__ = ["KINDS", "VanishingPid", "ndjson", "sampling"]

KINDS = ("stat", "task", "status", "schedstat", "cmdline", "environ", "maps", "syscall")
"""Per-process files the sampler reads, by name: `task` is the task directory (open, and
its listing as the "read"), `status` and `schedstat` the per-thread files under it."""

_PER_PID = re.compile(r"/proc/(\d+)(?:/(.*))?")
_PER_TASK = re.compile(r"task/\d+/(status|schedstat|stat)")


def classify(path: str) -> tuple[int, str] | None:
    """(pid, kind) of an absolute /proc path, kind "" for /proc/PID itself; None otherwise."""
    m = _PER_PID.fullmatch(path)
    if m is None:
        return None
    rest = m.group(2) or ""
    task = _PER_TASK.fullmatch(rest)
    if task is not None:
        leaf = task.group(1)
        return int(m.group(1)), "task-stat" if leaf == "stat" else leaf
    return int(m.group(1)), rest


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class VanishingPid:
    """Makes `pid` vanish at its first `kind` access (`phase` "open", "read" or "any")
    after `arm()`. `fired` lists the paths that failed first (empty: never triggered)."""

    def __init__(self, pid: int, kind: str, phase: str, exc: type[OSError]) -> None:
        self.pid = pid
        self.kind = kind
        self.phase = phase
        self.exc = exc
        self.armed = False
        self.gone = False
        self.fired: list[str] = []
        self._open = os.open
        self._read = os.read
        self._pread = os.pread
        self._listdir = os.listdir
        self._isdir = os.path.isdir

    def arm(self) -> None:
        self.armed = True

    def cpu_clock(self, pid: int) -> int | None:
        """A sampler's process CPU clock (`TreeSampler(cpu_clock=...)`): none for the pid
        once armed, as for a process that has gone; otherwise the real one. Without it an
        idle victim's reading is kept and its files are not read again after the first
        sample."""
        if self.armed and pid == self.pid:
            return None
        return process_cpu_ns(pid)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> VanishingPid:
        monkeypatch.setattr(os, "open", self.open)
        monkeypatch.setattr(os, "read", self.read)
        monkeypatch.setattr(os, "pread", self.pread)
        monkeypatch.setattr(os, "listdir", self.listdir)
        monkeypatch.setattr(os.path, "isdir", self.isdir)
        self._install_reader(monkeypatch)
        return self

    def _install_reader(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The same for the files the reader process reads (`probe.memreader`: cmdline,
        environ, maps, mem), which this process's os functions do not see."""
        from oversub.probe import memreader

        readers = memreader.service()
        real_file, real_memory = readers.read_file, readers.read_memory

        def read_file(proc_dir: str, leaf: str, *args: Any, **kwargs: Any) -> bytes:
            self._check(f"{proc_dir}/{leaf}", self.phase)  # its open and read in one
            return real_file(proc_dir, leaf, *args, **kwargs)

        def read_memory(proc_dir: str, *args: Any, **kwargs: Any) -> list[bytes]:
            self._check(f"{proc_dir}/mem", self.phase)
            return real_memory(proc_dir, *args, **kwargs)

        monkeypatch.setattr(readers, "read_file", read_file)
        monkeypatch.setattr(readers, "read_memory", read_memory)

    def _error(self, path: str) -> OSError:
        code = errno.ENOENT if issubclass(self.exc, FileNotFoundError) else errno.ESRCH
        return self.exc(code, os.strerror(code), path)

    def _check(self, path: str, phase: str) -> None:
        """Raise when `path` belongs to the vanished pid, or when it is the trigger."""
        hit = classify(path)
        if hit is None or hit[0] != self.pid:
            return
        if not self.gone and self.armed and hit[1] == self.kind and self.phase in (phase, "any"):
            self.gone = True
            self.fired.append(path)
        if self.gone:
            raise self._error(path)

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        full = os.fspath(path)
        if dir_fd is not None and not full.startswith("/"):
            full = f"{_fd_path(dir_fd)}/{full}"
        self._check(full, "open")
        return self._open(path, flags, mode, dir_fd=dir_fd)

    def read(self, fd: int, n: int) -> bytes:
        self._check(_fd_path(fd), "read")
        return self._read(fd, n)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        self._check(_fd_path(fd), "read")
        return self._pread(fd, n, offset)

    def listdir(self, path: Any = ".") -> list[str]:
        full = _fd_path(path) if isinstance(path, int) else os.fspath(path)
        if isinstance(path, int) and full.endswith("/task"):
            # Listing an open task directory of a gone process: the kernel's getdents fails
            # with ENOENT, which glibc and musl readdir() report as the end of the directory
            # (POSIX: a removed directory reads as empty), so os.listdir returns [].
            try:
                self._check(full, "read")
            except OSError:
                return []
        else:
            self._check(full, "read")
        names = self._listdir(path)
        if self.gone and full.rstrip("/") == "/proc":
            names = [n for n in names if n != str(self.pid)]
        return names

    def isdir(self, path: Any) -> bool:
        hit = classify(os.fspath(path))
        if self.gone and hit is not None and hit[0] == self.pid:
            return False
        return self._isdir(path)


def sampling(watcher: int, root: int) -> bool:
    """True once process `watcher` holds a file of `root`'s tasks open: it has sampled the
    tree (the sampler keeps per-thread files open between samples)."""
    try:
        fds = os.listdir(f"/proc/{watcher}/fd")
    except OSError:
        return False
    return any(_fd_path_of(watcher, fd).startswith(f"/proc/{root}/task/") for fd in fds)


def _fd_path_of(pid: int, fd: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""


def ndjson(path: Path) -> list[dict[str, Any]]:
    """The complete lines of an ndjson file, each parsed (a partial last line is left out);
    a line that is not JSON fails the test with the line in the message."""
    text = path.read_text()
    records = []
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise AssertionError(f"not JSON: {line!r}") from exc
    return records
