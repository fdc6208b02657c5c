"""Start `check -- CMD` and, at the end, stop its whole process tree.

The command runs in a session of its own (start_new_session), so its tree has one process
group that a terminal's Ctrl-C does not reach: oversub decides when the command stops. A
tree can escape its process group, though: a child may call setsid() (torchrun agents,
daemonising helpers), and a grandchild whose parent exited is re-parented, where a ppid walk
from the command no longer finds it. So `check` makes oversub the child subreaper of what
it starts (`child_subreaper`, Linux >= 3.4): every orphan of the tree is re-parented to
oversub itself, even a daemon whose middle process lived for microseconds, and TreeReaper
counts every child of oversub as the command's (`adopter`), stops it with the tree, and
reaps it when it exits. TreeReaper also remembers every pid it has ever seen in the tree
(`observe`, fed by each sample), and at the end signals the process group, every remembered
pid and every descendant of those.

If oversub itself is killed by SIGKILL nothing of it runs: the kernel then sends SIGKILL to
the command (PR_SET_PDEATHSIG, set in the child before exec), and the rest of the tree is
re-parented to the next subreaper above oversub or to init.

A pid number is reused after its process is gone, so each pid is remembered with its start
time (field 22 of /proc/PID/stat, clock ticks after boot); a pid whose start time changed
is someone else's process and is never signalled.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator

from oversub.core.errors import CommandError, UsageError
from oversub.probe.memreader import service
from oversub.probe.procfiles import read_small
from oversub.probe.procstat import ProcStat, parse_stat
from oversub.probe.proctree import read_ppids, scan_stats, subtree
from oversub.run import fdlimit, stopsignals

_POLL_S = 0.05
"""How often terminate() looks whether the tree has exited."""
_KILL_WAIT_S = 2.0
"""How long terminate() waits for SIGKILL to take effect before it gives up waiting."""


PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def libc_prctl() -> Callable[..., int] | None:
    """libc's prctl(2), or None off Linux (or where libc cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only `check -- CMD` pays for it

    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


@contextlib.contextmanager
def child_subreaper() -> Iterator[bool]:
    """While inside, orphans of this process's descendants are re-parented to it, not to init
    (PR_SET_CHILD_SUBREAPER); yields whether that holds. The previous setting is restored."""
    prctl = libc_prctl()
    if prctl is None:
        yield False
        return
    import ctypes

    before = ctypes.c_int(0)
    if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
        before.value = 0
    if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        yield False
        return
    try:
        yield True
    finally:
        if not before.value:
            prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def start_command(argv: list[str]) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with stdin, stdout and stderr inherited.

    The command's output passes through untouched. In the child, before exec: the stop
    signals are unblocked and set to their defaults (the caller may start it inside
    `stopsignals.blocked()`), the soft limit on open files is the one oversub was started
    with (`fdlimit`), and on Linux the kernel is asked to SIGKILL it when oversub dies
    (PR_SET_PDEATHSIG), so that even a SIGKILL of oversub does not leave it running.
    Raises UsageError for an empty argv and CommandError when the program cannot be started
    (missing, not executable, ...).
    """
    if not argv:
        raise UsageError("no command given after --")
    parent = os.getpid()
    prctl = libc_prctl()

    def in_child() -> None:
        stopsignals.unblock_in_child()
        fdlimit.restore_in_child()  # the descriptor limit oversub was started with
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # oversub died before the line above: follow it
                os.kill(os.getpid(), signal.SIGKILL)

    try:
        return subprocess.Popen(argv, start_new_session=True, preexec_fn=in_child)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CommandError(f"cannot start {argv[0]!r}: {reason}") from exc


def _parse(data: bytes) -> ProcStat | None:
    """A raw stat line, None when it is malformed (a process caught mid-exit)."""
    try:
        return parse_stat(data)
    except ValueError:
        return None


def _read_stat(root: str, pid: int) -> ProcStat | None:
    """/proc/PID/stat of one process; None when it is gone or unreadable."""
    try:
        return _parse(read_small(os.path.join(root, "proc", str(pid), "stat")))
    except OSError:
        return None


def _scan(root: str) -> dict[int, ProcStat]:
    """Every process under `root`/proc that could be read, by pid ({} without /proc)."""
    try:
        raw = scan_stats(root)
    except OSError:
        return {}
    table = {pid: _parse(data) for pid, data in raw.items()}
    return {pid: stat for pid, stat in table.items() if stat is not None}


EXIT_POLL_S = 0.1
"""Without a pidfd, how often a wait asks `pid_gone` whether the process has exited."""


def pid_gone(pid: int, root: str = "/") -> bool:
    """True when `pid` no longer runs: missing from /proc, or a zombie (dead, not yet reaped).

    One small read, cheap enough to ask ten times a second while `watch` waits.
    """
    stat = _read_stat(root, pid)
    if stat is None:
        return True
    if stat.alive:
        return False
    # A zombie main thread: the whole process is dead, or only its leader returned
    # (pthread_exit in main) while other threads still run. Their stat says which.
    task = os.path.join(root, "proc", str(pid), "task")
    try:
        tids = [int(name) for name in os.listdir(task) if name.isdigit() and int(name) != pid]
    except OSError:
        return True
    for tid in tids:
        try:
            thread = _parse(read_small(os.path.join(task, str(tid), "stat")))
        except OSError:
            continue
        if thread is not None and thread.alive:
            return False
    return True


class ExitWatch:
    """Has `pid` ended? `wait` sleeps until it has, or for at most the time given.

    On Linux >= 5.3 a pidfd answers: it turns readable once the whole thread group has
    exited (a main thread that returned early does not count), so `watch` waits between
    samples in one poll() that returns at the exit, instead of waking to look (ten wake-ups
    a second cost 1.2 ms of CPU a second; one poll a sample, 0.15 ms). Elsewhere, or when
    the pidfd cannot be had, pid_gone, asked every `EXIT_POLL_S`. Use as a context manager
    (it holds the pidfd).
    """

    def __init__(self, pid: int, root: str = "/") -> None:
        self.pid = pid
        self.root = root
        self._fd: int | None = None
        self._poll: select.poll | None = None
        pidfd_open = getattr(os, "pidfd_open", None)
        if root == "/" and pidfd_open is not None:
            try:
                self._fd = pidfd_open(pid)
            except OSError:  # gone already, or a kernel without pidfd_open: ask /proc
                return
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)

    def gone(self) -> bool:
        if self._poll is None:
            return pid_gone(self.pid, self.root)
        return bool(self._poll.poll(0))

    def wait(self, seconds: float) -> None:
        """Sleep `seconds`, or less: return once the process has exited."""
        if self._poll is not None:
            # poll's timeout is in whole ms: rounded up, a wait never ends early for nothing.
            self._poll.poll(max(0, math.ceil(seconds * 1000)))
            return
        end = time.monotonic() + seconds
        while not pid_gone(self.pid, self.root):
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, EXIT_POLL_S))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._poll = None, None

    def __enter__(self) -> ExitWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _children(root: str, pid: int) -> set[int]:
    """Pids of the children of `pid`: from task/*/children (one small read per thread), or
    by a scan of /proc where the kernel lacks those files (CONFIG_PROC_CHILDREN)."""
    task = os.path.join(root, "proc", str(pid), "task")
    found: set[int] = set()
    try:
        for tid in os.listdir(task):
            found.update(int(c) for c in read_small(os.path.join(task, tid, "children")).split())
    except (OSError, ValueError):
        return {child for child, ppid in read_ppids(root).items() if ppid == pid}
    return found


class TreeReaper:
    """Stops every process of a started command's tree, however it wandered off.

    Feed it the pids of each sample with `observe`; call `terminate` once the run is over
    (also on errors and Ctrl-C). Linux /proc is used to find descendants; without it only
    the process group and the command itself are signalled. With `adopter` (this process's
    pid, when it is the child subreaper of the command), every child of the adopter that
    started after the command is part of the tree, and `reap_adopted` collects the exit
    status of those that ended (never the command's own: Popen keeps it).
    """

    def __init__(
        self, process: subprocess.Popen[bytes], root: str = "/", *, adopter: int | None = None
    ) -> None:
        """Watch the tree of `process`, started by `start_command` (its own session)."""
        self._process = process
        self._root = root
        self._adopter = adopter
        # pid -> start ticks of every process ever seen in the tree.
        self._known: dict[int, int] = {}
        # (pid, start ticks, signal) already sent, (0, 0, signal) for the process group: each
        # gets each signal once, so a process cleaning up after SIGTERM is not interrupted.
        self._sent: set[tuple[int, int, int]] = set()
        self._interrupted = False
        # Until it is reaped, the command's pid (even as a zombie) cannot be reused.
        own = _read_stat(self._root, process.pid) if process.returncode is None else None
        self._root_start = own.start_ticks if own is not None else 0
        if own is not None:
            self._known[process.pid] = own.start_ticks

    @property
    def interrupted(self) -> bool:
        """True when terminate() found the command itself still running and stopped it."""
        return self._interrupted

    def observe(self, pids: Iterable[int]) -> None:
        """Remember `pids` (seen in the command's tree) with their start times."""
        for pid in pids:
            if pid in self._known:
                continue
            stat = _read_stat(self._root, pid)
            if stat is not None and stat.start_ticks >= self._root_start:
                self._known[pid] = stat.start_ticks

    def terminate(self, grace: float = 3.0) -> None:
        """SIGTERM the whole tree, wait up to `grace` seconds, SIGKILL what is left, reap.

        Safe to call again, and when everything has already exited. The command itself is
        always reaped (Popen.wait), so no zombie of ours remains.
        """
        if self._process.poll() is None:
            self._interrupted = True
        deadline = time.monotonic() + grace
        # Re-scan while waiting: a process may fork between the scan and its signal.
        while self._signal_tree(signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            self._process.poll()
        deadline = time.monotonic() + _KILL_WAIT_S
        while self._signal_tree(signal.SIGKILL) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            self._process.poll()
        # After SIGKILL only an uninterruptible sleep keeps it; do not hang oversub on that.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=_KILL_WAIT_S)
        self.reap_adopted(thorough=True)

    def reap_adopted(self, *, thorough: bool = False) -> None:
        """Collect adopted orphans that have exited (zombies of the adopter), so that none
        piles up during a long run. Only children that started after the command, never the
        command itself (Popen collects its own status).

        Each interval asks the kernel, at no cost when nothing has exited, which child is
        waitable (waitid with WNOWAIT: nothing is collected by asking). `thorough` (at the
        end) looks at every child of the adopter instead.
        """
        if self._adopter is None or self._adopter != os.getpid():
            return
        if thorough:
            for pid in _children(self._root, self._adopter) - {self._process.pid}:
                self._reap(pid)
            return
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        for _ in range(10_000):  # a bound, not a count: each turn collects one
            try:
                waitable = os.waitid(os.P_ALL, 0, flags)
            except (ChildProcessError, OSError):
                return
            if waitable is None:
                return
            if waitable.si_pid == self._process.pid:
                if self._process.poll() is None:
                    return
            elif not self._reap(waitable.si_pid):
                return  # someone else's child (oversub used as a library): not ours to take

    def _reap(self, pid: int) -> bool:
        """Collect `pid` if it is an exited orphan the adopter took from the tree."""
        stat = _read_stat(self._root, pid)
        if (
            stat is None
            or stat.alive
            or stat.ppid != self._adopter
            or stat.start_ticks < self._root_start
        ):
            return False
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return True

    def _members(self) -> tuple[dict[int, int], bool]:
        """Live processes of the tree now (pid -> start ticks), and whether its group has any.

        Remembers the processes it finds for the next call.
        """
        table = _scan(self._root)
        pgid = self._process.pid  # start_new_session: pid = process group id = session id
        for pid in list(self._known):
            stat = table.get(pid)
            if stat is None or stat.start_ticks != self._known[pid]:
                del self._known[pid]  # gone, or the number now belongs to someone else
        in_session = {pid for pid, s in table.items() if pgid in (s.pgrp, s.session)}
        ppids = {pid: stat.ppid for pid, stat in table.items()}
        seeds = set(self._known)
        if self._adopter is not None:
            # Orphans re-parented to oversub (the subreaper): the tree's, even if never seen;
            # not oversub's own reader processes (`probe.memreader`).
            seeds |= {pid for pid, stat in table.items() if stat.ppid == self._adopter}
            seeds.discard(self._adopter)
            seeds -= service().own_pids()
        for pid in subtree(seeds, ppids) | in_session:
            stat = table[pid]
            # Anything older than the command cannot be part of its tree.
            if stat.start_ticks >= self._root_start:
                self._known.setdefault(pid, stat.start_ticks)
        members = {pid: start for pid, start in self._known.items() if table[pid].alive}
        group_alive = any(table[pid].pgrp == pgid for pid in members)
        return members, group_alive

    def _signal_tree(self, sig: signal.Signals) -> bool:
        """Send `sig` to the tree (each process at most once); True while any is alive."""
        members, group_alive = self._members()
        # The group id cannot be reused while our unreaped child or a live member holds it.
        if (self._process.returncode is None or group_alive) and (0, 0, sig) not in self._sent:
            self._sent.add((0, 0, sig))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, sig)
        for pid, start in members.items():
            if (pid, start, sig) in self._sent:
                continue
            self._sent.add((pid, start, sig))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return bool(members) or self._process.poll() is None
