"""Find a process tree with one pass over `/proc/*/stat`.

psutil's `children(recursive=True)` walks the tree one process at a time (4.1 ms for 51
processes, docs/signals.md); one scan of every `/proc/PID/stat` costs 1.8 ms and also hands
the sampler each process's stat line, which it would otherwise read again. A sampler that
scans every second holds those files open between scans (`StatScanner`, within the budget
of `procfiles.descriptor_budget`); the tree is the roots and their descendants, walked from
each process's parent (`ppids_of`, `subtree`).

Everything takes `root` (default "/") prefixed to `/proc`, so tests can build fake trees.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping

from oversub.probe.procfiles import NO_DESCRIPTORS, descriptor_budget, pread_all, read_small
from oversub.probe.procstat import start_of


def scan_stats(root: str = "/") -> dict[int, bytes]:
    """pid -> raw `/proc/PID/stat` line for every process that could be read.

    Processes that vanish or deny access during the scan are left out silently.
    """
    proc = os.path.join(root, "proc")
    stats: dict[int, bytes] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            data = read_small(f"{proc}/{name}/stat")
        except OSError:
            continue
        if data:
            stats[int(name)] = data
    return stats


def _close_held(box: list[dict[str, int]], main: dict[int, int]) -> None:
    for fd in [*box[0].values(), *main.values()]:
        os.close(fd)
    box[0] = {}
    main.clear()


class StatScanner:
    """`scan_stats` for a sampler that scans every second: each `/proc/PID/stat` stays open
    between scans and is re-read with pread (procfs regenerates it on each read), which
    spares the open and the close of every process on the node at every sample (about 1.9
    against 0.9 ms for 250 processes, measured).

    A descriptor pins its process: once that process is reaped it reads ESRCH (or nothing),
    and the path is opened again, since the pid may now name another process. Descriptors
    of pids that left the listing are closed at each scan. At most `max_fds` are held
    (default: a fifth of `descriptor_budget`); beyond that the files are opened for each
    scan. `close()` (or garbage collection) closes them all.
    `reread` holds descriptors of its own, within the same `max_fds`.
    """

    def __init__(self, root: str = "/", max_fds: int | None = None) -> None:
        self._proc = os.path.join(root, "proc")
        self.max_fds = descriptor_budget() // 5 if max_fds is None else max_fds
        self.missed = False
        """The last scan left a process out: no descriptor to open its stat with."""
        self._box: list[dict[str, int]] = [{}]
        """[pid as listed -> held descriptor], a box the finalizer shares."""
        self._main: dict[int, int] = {}
        """pid -> held descriptor of its main thread's stat line (`reread`)."""
        self._finalizer = weakref.finalize(self, _close_held, self._box, self._main)

    def __len__(self) -> int:
        return len(self._box[0])

    def holding(self) -> int:
        """Descriptors held now: the scan's and `reread`'s."""
        return len(self._box[0]) + len(self._main)

    def scan(self) -> dict[int, bytes]:
        """pid -> raw stat line for every process that could be read (`scan_stats`);
        `missed` tells whether one was left out for want of file descriptors."""
        self.missed = False
        old = self._box[0]
        names = os.listdir(self._proc)
        held: dict[str, int] = {}
        stats: dict[int, bytes] = {}
        try:
            self._scan(names, old, held, stats)
        except BaseException:  # interrupted: every descriptor stays closable
            old.update(held)
            raise
        for fd in old.values():
            os.close(fd)  # processes that left the listing
        self._box[0] = held
        for pid in self._main.keys() - stats.keys():
            os.close(self._main.pop(pid))  # and their main threads' (`reread`)
        return stats

    def reread(self, tracked: Mapping[int, int]) -> dict[int, bytes] | None:
        """pid -> the stat line of the main thread of each `tracked` process (pid -> start
        time), without listing /proc (`TreeSampler`: when no process of the tree can have
        started one); None when one is gone, is no longer the process tracked, or cannot
        be held: then `scan`.

        The main thread's line (`/proc/PID/task/PID/stat`) shows what the process's shows
        but for the CPU and fault counters, which are that thread's own: the state (a
        process's is its main thread's), comm, parent, thread count, reaped children's
        time, start time and argv bounds. The kernel does not add up every thread's
        counters for it: 7.8 against 12.1 µs for a process of 20 threads (measured). Each
        descriptor is opened once and checked to be the tracked process (the pid may have
        been reused since the scan); from then on it pins that process, as `scan`'s do."""
        main = self._main
        for pid in main.keys() - tracked.keys():
            os.close(main.pop(pid))  # no longer tracked
        stats: dict[int, bytes] = {}
        for pid, start in tracked.items():
            fd = main.get(pid)
            try:
                if fd is None:
                    if len(self._box[0]) + len(main) >= self.max_fds:
                        return None
                    fd = main[pid] = os.open(f"{self._proc}/{pid}/task/{pid}/stat", os.O_RDONLY)
                    data = os.pread(fd, 4096, 0)
                    if start_of(data) != start:
                        os.close(main.pop(pid))
                        return None  # another process now
                else:
                    data = os.pread(fd, 4096, 0)
            except OSError:
                return None
            if not data or len(data) >= 4096:
                return None
            stats[pid] = data
        self.missed = False
        return stats

    def _scan(
        self, names: list[str], old: dict[str, int], held: dict[str, int], stats: dict[int, bytes]
    ) -> None:
        # Runs for every process on the node at every sample: keep it lean.
        proc, room = self._proc, self.max_fds
        pread, close, pop = os.pread, os.close, old.pop
        for name in names:
            fd = pop(name, None)
            if fd is not None:
                try:
                    data = pread(fd, 4096, 0)
                except OSError:
                    data = b""
                if data and len(data) < 4096:
                    held[name] = fd
                    stats[int(name)] = data
                    continue
                close(fd)  # reaped (the pid may name another process now), or a long line
            elif not name.isdigit():
                continue
            try:
                fd = os.open(f"{proc}/{name}/stat", os.O_RDONLY)
            except OSError as exc:
                if exc.errno in NO_DESCRIPTORS:
                    self.missed = True
                continue
            try:
                data = pread_all(fd, 4096)
            except OSError:
                close(fd)
                continue
            except BaseException:
                close(fd)
                raise
            if data and len(data) < 4096 and len(held) < room:
                held[name] = fd
            else:
                close(fd)
            if data:
                stats[int(name)] = data

    def close(self) -> None:
        """Close every held descriptor (a later `scan` opens them again)."""
        _close_held(self._box, self._main)


def ppids_of(stats: Mapping[int, bytes]) -> dict[int, int]:
    """pid -> ppid from raw stat lines (malformed lines are left out)."""
    ppids: dict[int, int] = {}
    for pid, data in stats.items():
        close = data.rfind(b")")  # after comm, which may hold ')' (`procstat.parse_stat`)
        if close < 0:
            continue
        try:
            ppids[pid] = int(data[close + 2 :].split(None, 2)[1])  # field 4, split no further
        except (ValueError, IndexError):
            continue
    return ppids


def read_ppids(root: str = "/") -> dict[int, int]:
    """pid -> ppid for every process on the system, from one scan of `/proc/*/stat`."""
    return ppids_of(scan_stats(root))


def _walk(seeds: Iterable[int], ppids: Mapping[int, int]) -> set[int]:
    """`seeds` and everything below them in the parent -> child graph of `ppids`."""
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(seeds)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue  # a pid reached from two seeds (sticky orphans) is walked once
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def subtree(roots: Iterable[int], ppids: Mapping[int, int]) -> set[int]:
    """The pids of `roots` that exist in `ppids`, plus all their descendants."""
    return _walk((pid for pid in roots if pid in ppids), ppids)


def descendants(root_pid: int, ppids: Mapping[int, int]) -> set[int]:
    """Children, grandchildren, ... of `root_pid` (not `root_pid` itself)."""
    found = _walk([root_pid], ppids)
    found.discard(root_pid)
    return found
