"""Sample a process tree's per-thread counters, cheaply enough to run every second.

One sample = one scan of `/proc/*/stat` (tree membership, `TreeSampler.tree`, and every
process's stat line; only the tree's own when none of it ran, `TreeSampler._quiet`), then
per process its CPU clock (`procstat.process_cpu_ns`) and, unless `TreeSampler._reusable`
says nothing can have changed since its last reading, its task list and per thread
`schedstat` and one more small file (`probe.threads`). Per-thread files stay open between
samples from a process's second reading on and are re-read with pread
(`procfiles.HeldFiles`), and so is every process's stat line (`proctree.StatScanner`): that
halves the cost of a sample. The two share one budget of descriptors
(`procfiles.descriptor_budget`, from the soft RLIMIT_NOFILE that `oversub` raises at
start): the thread files get what the scanner does not hold. The costly files (environ,
cmdline, maps, live pool sizes) are cached per process identity and read again only when
due (`probe.processcache`).

Without /proc (macOS, Windows) `psutil_sampler` gives per-thread CPU only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import TracebackType
from typing import NamedTuple

from oversub.core import errors, pools
from oversub.core.names import Signal
from oversub.core.samples import ProcessSample, TreeSample
from oversub.probe.cmdline import CMDLINE_MAX
from oversub.probe.host import read_host
from oversub.probe.memreader import service
from oversub.probe.owners import OwnerReader
from oversub.probe.pidns import check_pid_namespace
from oversub.probe.processcache import ProcessCache, maps_due, note_refused
from oversub.probe.procfiles import HELD_MAX, NO_DESCRIPTORS, descriptor_budget
from oversub.probe.procstat import (
    CLK_TCK,
    ProcStat,
    parse_stat,
    process_cpu_ns,
    start_of,
    ticks_to_ns,
)
from oversub.probe.proctree import StatScanner, ppids_of, subtree
from oversub.probe.psutil_sampler import PsutilTreeSampler
from oversub.probe.threads import ThreadReader
from oversub.probe.waits import read_wait

_Moved = tuple[int, int, int, str, str, int, int]


class _Reading(NamedTuple):
    """A process's last real reading, kept while it may be reused (`TreeSampler._reusable`)."""

    raw_stat: bytes
    moved: _Moved
    """What moves when it runs, or without: CPU clock, threads, reaped children's ticks,
    state, comm, ppid, and the start time (a pid reused by another process)."""
    sample: ProcessSample
    no_schedstat: bool
    """A thread of it had no schedstat (`Signal.SCHEDSTAT` unavailable)."""


class TreeSampler:
    """Samples `root_pid` and all its descendants, one `sample()` per tick.

    A process once seen in the tree stays tracked while it lives (same pid and start time),
    even when re-parented: orphans of a dead parent still belong to the job. With `adopter`
    (oversub's own pid when it is the child subreaper of the command it started), every
    child of the adopter is part of the tree too: orphans re-parented to oversub, including
    those no sample saw before their parent died.

    It keeps per-thread /proc files and every process's stat open between samples: call
    `close()` (or use it as a context manager) when done; garbage collection closes them too.

    `cpu_clock(pid)`: a process's CPU time in ns, None when unknown (default: the kernel's
    process clock on the real /proc, none on a fake tree, where every process is read).
    """

    def __init__(
        self,
        root_pid: int,
        *,
        root: str = "/",
        throttle_stat_path: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        adopter: int | None = None,
        cpu_clock: Callable[[int], int | None] | None = None,
    ) -> None:
        self.root_pid = root_pid
        self.adopter = adopter
        self.root = root
        self.throttle_stat_path = throttle_stat_path
        self._clock = clock
        self._proc = os.path.join(root, "proc")
        # No /proc (macOS, Windows): the psutil fallback (which imports psutil only then).
        self._fallback: PsutilTreeSampler | None = None
        if root == "/" and not os.path.exists("/proc/self/stat"):
            self._fallback = PsutilTreeSampler(root_pid, cmdline_max=CMDLINE_MAX, clock=clock)
        elif root == "/":
            check_pid_namespace()  # /proc of another namespace: pids name other processes
        self._self_pid = os.getpid() if root == "/" else -1
        self._tracked: dict[int, int] = {}
        """pid -> start_ticks of every process seen in the tree and not yet gone."""
        self._sampled = False
        self._threads = ThreadReader()
        self._scanner = StatScanner(root)
        self._budget = descriptor_budget()
        """Descriptors the scanner and the thread files hold between them (`sample` gives
        the thread files what the scanner does not hold)."""
        self._readers = service()
        """The reader process that reads the processes' memory, maps, environ and cmdline
        (`probe.memreader`): never part of a target; a process whose read it abandoned is
        quarantined. Ended (and collected) when the last sampler is closed."""
        self._readers.acquire()
        self._using_readers = True
        self._cache = ProcessCache(root, self._readers)
        """cmdline, environ, pools and live sizes per process identity (`probe.processcache`)."""
        self._hides: bool | None = None
        """Whether this /proc may hide processes from us (`probe.hidden`), read once."""
        self._owners = OwnerReader(root, readers=self._readers)
        self._cpu_clock = (
            cpu_clock if cpu_clock is not None else (process_cpu_ns if root == "/" else None)
        )
        self._last_reading: dict[int, _Reading] = {}
        """pid -> its reading as of the previous sample, where it may be reused."""
        self._next_reading: dict[int, _Reading] = {}
        self._pre: dict[int, int | None] = {}
        """pid -> CPU clock of each tracked process, read before this sample's scan."""
        self._listed_clocks: dict[int, int | None] = {}
        """The same as of the last sample (None for a process it saw first)."""
        self._ppids: dict[int, int] | None = None
        """pid -> ppid of every process `tree()` saw in this sample, where it computed them."""
        self._parents: set[int] = set()
        """The parents of the last sample's members (the pids that may have forked one)."""

    def close(self) -> None:
        """Close the /proc files held open between samples (sampling may go on after)."""
        self._threads.close()
        self._scanner.close()
        if self._using_readers:
            self._using_readers = False
            self._readers.release()

    def __enter__(self) -> TreeSampler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------------- /proc

    def sample(self) -> TreeSample:
        """Read the tree now. The first call raises NoSuchProcess / PermissionDenied when the
        root cannot be observed; later calls never raise for processes that vanish (a sample
        without `root_pid` means the target exited)."""
        if self._fallback is not None:
            return self._fallback.sample()
        t = self._clock()
        first = not self._sampled
        self._pre = self._clocks_before_scan(first)
        quiet = self._quiet(self._pre)
        stats = self._scanner.reread(self._tracked) if quiet else None
        if stats is None:
            quiet = False
            stats = self._scanner.scan()
        # The descriptors the scanner holds now are the thread files' no more: one budget.
        self._threads.held.max_fds = max(0, min(HELD_MAX, self._budget - self._scanner.holding()))
        if first:
            self._check_root(stats)
        if quiet:
            # No process joined or left, and none was re-parented (its parent's exit runs
            # the parent): the tracked processes, the same parents. Each line was read
            # through a descriptor checked, when opened, to be that process's, and a
            # descriptor pins its process (`StatScanner.reread`): the same start time.
            tree = set(self._tracked)
            parents = self._parents
        else:
            self._ppids = None
            tree = self.tree(stats, first=first)
            ppids = (
                self._ppids if self._ppids is not None else ppids_of({p: stats[p] for p in tree})
            )
            parents = set(ppids.values())
        # Who may have forked a member: its threads' start times are read (`probe.threads`).
        self._parents = parents

        unavailable: list[Signal] = []
        if self._scanner.missed:
            _not_seen(unavailable)  # a process left out of the scan may be the tree's
        processes: dict[int, ProcessSample] = {}
        for pid in sorted(tree):
            starts = pid in parents
            kept = self._unparsed(pid, stats[pid], t, unavailable, starts)
            if kept is not None:
                processes[pid] = kept
                continue
            try:
                stat = parse_stat(stats[pid])
            except ValueError:
                continue
            strict = first and pid == self.root_pid
            sample = self._read_process(pid, stat, stats[pid], t, strict, unavailable, starts)
            if sample is not None:
                processes[pid] = sample

        if self._hides is None:
            from oversub.probe.hidden import hides_processes

            self._hides = hides_processes(self._proc)
        if self._hides and Signal.PROCESSES not in unavailable:
            from oversub.probe.hidden import hidden_children

            if hidden_children(self._proc, processes, stats):
                unavailable.append(Signal.PROCESSES)

        self._sampled = True
        self._threads.end_sample()
        self._owners.end_sample()
        self._last_reading, self._next_reading = self._next_reading, {}
        tracked = {pid: p.start_ticks for pid, p in processes.items()}
        # A process first seen now has no clock from before the scan: the next sample lists.
        self._listed_clocks = {pid: self._pre.get(pid) for pid in processes}
        if tracked != self._tracked:
            self._tracked = tracked
            self._cache.keep_only(tracked)

        host = read_host(self.root, self.throttle_stat_path)
        if self._self_pid in processes:
            # oversub is the watched tree's root: its CPU is the tree's, not to be subtracted.
            host = host._replace(observer_cpu_ns=None)
        if host.psi_some_us is None:
            unavailable.append(Signal.PSI)
        return TreeSample(
            t=t,
            root_pid=self.root_pid,
            processes=processes,
            host=host,
            unavailable=tuple(unavailable),
        )

    def _clocks_before_scan(self, first: bool) -> dict[int, int | None]:
        """Each tracked process's CPU clock, read before this sample's scan (and then used
        as its clock in this sample); empty where there is no clock."""
        if first or self._cpu_clock is None:
            return {}
        clock = self._cpu_clock
        return {pid: clock(pid) for pid in self._tracked}

    def _quiet(self, pre: dict[int, int | None]) -> bool:
        """No process can have joined the tree since the last sample, so /proc need not be
        listed (`StatScanner.reread`): a process joins a tree only when one of the tree
        forks it, and forking runs the parent (as exiting runs the child: a parent gone
        leaves orphans), so the CPU clock of every tracked process, read before this scan,
        being the one read before the last scan (itself a listing, or as quiet) says none
        did. Not for a tree with an adopter (`check`, `tune`: oversub's own children are
        members), nor where /proc may hide processes, nor for the other targets' `tree`
        (a cgroup's membership changes without anything forking)."""
        if not pre or self.adopter is not None or self._hides is not False:
            return False
        if type(self).tree is not TreeSampler.tree:
            return False
        # `pre` and the last clocks have the same pids: the tracked ones, the last sample's.
        last = self._listed_clocks
        return all(c is not None and last.get(pid) == c for pid, c in pre.items())

    def _cpu_of(self, pid: int) -> int | None:
        """The process's CPU clock for this sample: the one read before the scan, if any."""
        if pid in self._pre:
            return self._pre[pid]
        return self._cpu_clock(pid) if self._cpu_clock is not None else None

    def tree(self, stats: dict[int, bytes], *, first: bool) -> set[int]:
        """Which processes form the watched tree now, from one scan of every process's stat
        line: the root (first sample), every process seen before that still lives (same
        start time: orphans stay), the adopter's children, and all their descendants.

        The one place that decides membership: a target that is not a process tree (a
        cgroup's members) replaces this method."""
        seeds = [self.root_pid] if first else []
        for pid, start in self._tracked.items():
            raw = stats.get(pid)
            if raw is not None and start_of(raw) == start:
                seeds.append(pid)
        ppids = self._ppids = ppids_of(stats)
        if self.adopter is not None:
            seeds += [pid for pid, ppid in ppids.items() if ppid == self.adopter]
        tree = subtree(seeds, ppids)
        if self._self_pid != self.root_pid:
            # `oversub watch $$` from a shell: oversub is in the tree, but must not judge its
            # own sampling (only the process itself: anything it starts is the user's).
            tree.discard(self._self_pid)
        return tree - self.own_pids()

    def own_pids(self) -> frozenset[int]:
        """oversub's reader processes (`probe.memreader`), never part of a target (its
        children, adopted or not)."""
        return self._readers.own_pids() if self._self_pid != -1 else frozenset()

    def _check_root(self, stats: dict[int, bytes]) -> None:
        if self.root_pid in stats:
            return
        if os.path.isdir(f"{self._proc}/{self.root_pid}"):
            raise errors.PermissionDenied(f"cannot read /proc/{self.root_pid}/stat")
        raise errors.NoSuchProcess(f"no process with pid {self.root_pid}")

    def _read_process(
        self,
        pid: int,
        stat: ProcStat,
        raw_stat: bytes,
        now: float,
        strict: bool,
        unavailable: list[Signal],
        starts: bool = False,
    ) -> ProcessSample | None:
        cpu = self._cpu_of(pid)
        moved = (
            None
            if cpu is None
            else (
                cpu,
                stat.threads,
                stat.children_ticks,
                stat.state,
                stat.comm,
                stat.ppid,
                stat.start_ticks,
            )
        )
        last = self._last_reading.get(pid)
        if last is not None and moved is not None and self._reusable(pid, last, moved, now):
            kept = self._keep(pid, last, unavailable, starts)
            if kept is not None:
                if raw_stat != last.raw_stat:
                    # Nothing moved, and this line is the one the next sample compares
                    # (`_unparsed`): a line of the scan, then of `StatScanner.reread`.
                    self._next_reading[pid] = last._replace(raw_stat=raw_stat)
                return kept
        sample = self._read_threads(pid, stat, raw_stat, now, strict, unavailable, cpu, starts)
        if sample is not None and moved is not None and _still(sample):
            no_schedstat = any(t.run_delay_ns is None for t in sample.threads)
            self._next_reading[pid] = _Reading(raw_stat, moved, sample, no_schedstat)
        return sample

    def _reusable(self, pid: int, last: _Reading, moved: _Moved, now: float) -> bool:
        """The one rule (for a tree, a cgroup and the node alike) that keeps a process's last
        reading instead of reading its threads again: nothing can have changed but the run
        delay of a thread that waits without running (docs/signals.md, "Reading only what
        can have changed").

        - the same process (pid and start time) and the same CPU clock (`procstat.process_cpu_ns`:
          every thread's runtime in ns): no thread ran, so none was switched in or out,
          started, ended, exec'd or mapped a library;
        - the same thread count, reaped children's time, comm and parent (re-parenting and
          a reaped child move without the process running);
        - its main thread not runnable (stat state R: woken, or waiting for a CPU) and, at
          that reading, none of its threads runnable (`_still`, checked when it was
          stored): a starved process may not run at all in an interval while its threads
          wait, and its run delay must not be lost (an oversubscribed cgroup judged
          starved, or not seen);
        - its maps not due: read again on their schedule when it ran since they were read.
        """
        if last.moved != moved or moved[3] == "R":
            return False
        known = self._cache.known.get((pid, last.sample.start_ticks))
        return known is not None and not maps_due(known, moved[0], now)

    def _keep(
        self, pid: int, last: _Reading, unavailable: list[Signal], starts: bool
    ) -> ProcessSample | None:
        """The last reading again, its held files and its threads' owners kept; None when the
        thread reader no longer has it (or it lacks a start time that `starts` asks for)."""
        start = last.sample.start_ticks
        if self._threads.keep(pid, start, starts) is None:
            return None
        self._owners.keep(pid, start)
        known = self._cache.known[(pid, start)]
        note_refused(known, unavailable)
        if last.no_schedstat and Signal.SCHEDSTAT not in unavailable:
            unavailable.append(Signal.SCHEDSTAT)
        self._next_reading[pid] = last
        return last.sample

    def _unparsed(
        self, pid: int, raw_stat: bytes, now: float, unavailable: list[Signal], starts: bool
    ) -> ProcessSample | None:
        """`_read_process`'s reuse without parsing the stat line: the same bytes (so the
        same thread count, children's time, state, comm and parent) and the same CPU clock.
        None: parse it and decide there."""
        last = self._last_reading.get(pid)
        if last is None or last.raw_stat != raw_stat or self._cpu_clock is None:
            return None
        cpu = self._cpu_of(pid)
        # The same bytes and the same clock: `last.moved` is what a parse would give (and
        # comparing it with itself is cheap); a moved clock is no reuse.
        if cpu is None or cpu != last.moved[0] or not self._reusable(pid, last, last.moved, now):
            return None
        return self._keep(pid, last, unavailable, starts)

    def _read_threads(
        self,
        pid: int,
        stat: ProcStat,
        raw_stat: bytes,
        now: float,
        strict: bool,
        unavailable: list[Signal],
        cpu: int | None,
        starts: bool = False,
    ) -> ProcessSample | None:
        """A real reading: every thread's files, the cached files when due; `starts`: every
        thread's start time too (the process has a child in the tree), as for a process
        whose owners are read."""
        base = f"{self._proc}/{pid}"
        try:
            task_fd = os.open(f"{base}/task", os.O_RDONLY | os.O_DIRECTORY)
        except PermissionError as exc:
            if strict:
                raise errors.PermissionDenied(f"cannot read {base}/task: {exc.strerror}") from exc
            _not_seen(unavailable)
            return None
        except OSError as exc:
            if exc.errno in NO_DESCRIPTORS:
                _not_seen(unavailable)
            return None  # else gone between the scan and now
        try:
            # Owners are looked for from a process's second sample on (`probe.owners`
            # groups a pool's threads by start time): the reader reads those starts
            # through its held files, where owners would open each stat again. A
            # newcomer that already burned CPU on several threads gets them at once: a
            # pool's worker that lives less than an interval is seen only once.
            owned = self._tracked.get(pid) == stat.start_ticks or busy_newcomer(stat)
            threads = self._threads.read(
                pid, stat.start_ticks, task_fd, unavailable, starts or owned
            )
        except OSError as exc:
            if exc.errno not in NO_DESCRIPTORS:
                raise
            _not_seen(unavailable)
            return None
        finally:
            os.close(task_fd)
        known = self._cache.refresh(pid, stat, raw_stat, len(threads), now, cpu)
        note_refused(known, unavailable)
        wait = None
        if (
            len(threads) == 1
            and threads[0].state == "S"
            and known.pools
            and pools.is_openmp(known.pools)
        ):
            wait = read_wait(pid, self.root)  # only candidates for the fork-after-OpenMP hang
        return ProcessSample(
            pid=pid,
            ppid=stat.ppid,
            name=stat.comm,
            cmdline=known.cmdline,
            start_ticks=stat.start_ticks,
            threads=threads,
            pools=known.pools,
            thread_env=known.thread_env,
            live_pools=known.live_pools,
            live_threads=known.live_threads,
            children_cpu_ns=ticks_to_ns(stat.children_ticks),
            wait=wait,
            owners=self._owners.read(
                pid, stat.start_ticks, threads, self._threads.names(pid, stat.start_ticks)
            )
            if owned
            else None,
        )


NEWCOMER_BUSY_S = 0.1
"""CPU seconds since its start that make a process first seen with several threads busy
enough for its owners to be read at once (`busy_newcomer`)."""
NEWCOMER_TICKS = max(1, round(NEWCOMER_BUSY_S * CLK_TCK))


def busy_newcomer(stat: ProcStat) -> bool:
    """A process with several threads that has run `NEWCOMER_BUSY_S` or more since it
    started: joblib's multiprocessing workers live less than a second, so at a sample a
    second apart most are seen once, and their busy threads would stay unattributed."""
    return stat.threads >= 2 and stat.utime_ticks + stat.stime_ticks >= NEWCOMER_TICKS


def _still(sample: ProcessSample) -> bool:
    """None of the threads of a real reading was runnable: it may be reused while nothing
    moves (`TreeSampler._reusable`)."""
    return bool(sample.threads) and all(t.state != "R" for t in sample.threads)


def _not_seen(unavailable: list[Signal]) -> None:
    """A process of the tree could not be read (refused, or no file descriptor left)."""
    if Signal.PROCESSES not in unavailable:
        unavailable.append(Signal.PROCESSES)
