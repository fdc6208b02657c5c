"""Per-thread counters of one process: `task/TID/schedstat`, then `status` or `stat`.

`schedstat` (CPU time, run delay, times scheduled in) is read first; a thread that ran since
the last sample then has its `status` read (state and both context-switch counters:
`/proc/PID/status` covers the main thread only), and a thread that did not run only its
`stat`, for its state (it was not switched out, so its counters stand; `stat` costs the
kernel less than half of `status`); a thread whose `schedstat` reads the same to the byte
and whose state did not change is carried as the very same `ThreadSample` (no parsing, no
new object: 5,000 idle threads read every sample cost 1.02-1.06 x the plain-read floor
instead of 1.24-1.27 x). Without schedstat (a kernel without
CONFIG_SCHED_INFO) CPU time comes from `stat` and run delay is unknown. From a process's
second reading on, the files stay open between samples (`procfiles.HeldFiles`); its first
reading opens, reads and closes them: most processes of a big tree are idle, read once and
then kept (below), and holding their files would only have cost the bookkeeping and, at the
end, closing them one by one (docs/signals.md has the figures).

A process that did not run at all since its last reading (`TreeSampler` tells, from its CPU
clock) is not read again: `keep` carries its threads and their held files into this sample.
The names the status files show are kept for `probe.owners`, which would otherwise open each
thread's `comm` too.

A thread's start time (`ThreadSample.start_ticks`, stat field 22) is read only where it is
used (`starts`): for the threads of a process that has a child in the tree
(`analysis.forktime` counts the threads a parent ran when it forked), and of a process whose
threads' owners are looked for (`probe.owners`, from the process's second sample on: it
groups a pool's threads by start time). Elsewhere, as for every thread of the first sample
but a parent's, it stays None and the thread's stat is not opened. A later reading carries
the start it knows (`_Ran`) and reads it for a thread without one once it is needed (a
kept reading without every start is read again when its process has a child: a fork after
that reading). `probe.owners` reads it itself for a thread whose start is still None.
"""

from __future__ import annotations

import os

from oversub.core.names import Signal
from oversub.core.samples import ThreadSample
from oversub.probe.procfiles import NO_DESCRIPTORS, HeldFiles, read_small
from oversub.probe.procstat import parse_stat, ticks_to_ns

_ProcessKey = tuple[int, int]
"""(pid, start_ticks): one process identity."""
_Ran = tuple[int, int, int | None, int | None, int | None, bytes, ThreadSample | None]
"""(cpu_ns, times scheduled in, voluntary, involuntary switches, start_ticks or None when
not read, its schedstat as read, its sample) of a thread at a reading."""

_SWITCHES = b"\nvoluntary_ctxt_switches:"
_INVOLUNTARY = b"nonvoluntary_ctxt_switches:"


def _parse_status(status: bytes) -> tuple[str, int | None, int | None, str | None]:
    """(state, voluntary, involuntary switches, name) of a thread's status file.

    The state is the letter of `State:\tS (sleeping)`, the same as stat field 3 (both come
    from the same kernel table), so reading status spares a third file per thread. The
    counters are None when absent. The name is the first line's (`Name:`), None when the
    kernel escaped it (a backslash: the name held a control character or a backslash;
    `comm` has it raw). One pass of a few slices: this runs for every thread that ran."""
    nl = status.find(b"\n")
    name = None
    if status.startswith(b"Name:"):
        raw = status[5 : nl if nl >= 0 else len(status)].strip()
        if b"\\" not in raw:
            name = raw.decode("utf-8", "replace")
    at = status.find(b"State:", max(nl, 0))
    # A short slice: stripping the rest of the file (about 1.3 kB) cost 3 us per thread.
    state = "?" if at < 0 else status[at + 6 : at + 16].lstrip()[:1].decode("ascii", "replace")
    voluntary = involuntary = None
    # "voluntary_ctxt_switches:\tN\nnonvoluntary_ctxt_switches:\tM", near the end.
    at = status.rfind(_SWITCHES)
    if at >= 0:
        at += len(_SWITCHES)
        end = status.find(b"\n", at)
        voluntary = int(status[at:end] if end >= 0 else status[at:])
        if end >= 0 and status.startswith(_INVOLUNTARY, end + 1):
            at = end + 1 + len(_INVOLUNTARY)
            end = status.find(b"\n", at)
            involuntary = int(status[at:end] if end >= 0 else status[at:])
    return state or "?", voluntary, involuntary, name


class _Process:
    """One process identity's threads at its last reading."""

    __slots__ = ("names", "ran", "started", "threads")

    def __init__(self) -> None:
        self.threads: tuple[ThreadSample, ...] = ()
        self.started = True
        """Every thread's start time is known."""
        self.ran: dict[str, _Ran] = {}
        """tid as listed -> its counters, for the threads with schedstat."""
        self.names: dict[int, str] = {}
        """tid -> name, from the status files read (`_name`)."""


class ThreadReader:
    """Reads the threads of the processes of one sampler; call `end_sample()` after each
    sample and `close()` at the end (garbage collection closes the files too)."""

    def __init__(self) -> None:
        self.held = HeldFiles()
        self._last: dict[_ProcessKey, _Process] = {}
        """Each process's last reading, as of the previous sample."""
        self._next: dict[_ProcessKey, _Process] = {}

    def end_sample(self) -> None:
        self.held.end_sample()
        self._last, self._next = self._next, {}

    def close(self) -> None:
        self.held.close()

    def keep(
        self, pid: int, start_ticks: int, starts: bool = False
    ) -> tuple[ThreadSample, ...] | None:
        """The threads of the process's last reading, carried into this sample with their
        held files; None when there is none (never read, or not in the previous sample), or
        when `starts` (every thread's start time) is asked for and that reading lacks one."""
        key = (pid, start_ticks)
        last = self._last.get(key)
        if last is None or (starts and not last.started):
            return None
        self._next[key] = last
        self.held.keep(key)
        return last.threads

    def names(self, pid: int, start_ticks: int) -> dict[int, str]:
        """tid -> name of the threads whose status this sample (or a kept reading) read."""
        last = self._next.get((pid, start_ticks))
        return last.names if last is not None else {}

    def read(
        self,
        pid: int,
        start_ticks: int,
        task_fd: int,
        unavailable: list[Signal],
        starts: bool = False,
    ) -> tuple[ThreadSample, ...]:
        """The threads of one process, through its open task directory `task_fd`; a
        thread that exits while it is read is left out. `starts`: read the start time of
        each thread whose start is not known yet (the process has a child in the tree).
        Raises OSError (errno in `NO_DESCRIPTORS`) when a file could not be opened for want
        of file descriptors: not seen is not exited."""
        threads: list[ThreadSample] = []
        group = (pid, start_ticks)
        previous = self._last.get(group)
        last_run = previous.ran if previous is not None else {}
        old_names = previous.names if previous is not None else {}
        record = _Process()
        next_run, names = record.ran, record.names
        started_all = True
        # A first reading opens, reads and closes; later ones hold the files (module doc).
        with self.held.files(group, task_fd, hold=previous is not None) as files:
            fetch = files.read
            for name in os.listdir(task_fd):
                # Any failure below means the thread exited since the listing: skip it.
                try:
                    status: bytes | None = None
                    runs: int | None
                    run_delay: int | None
                    line: bytes | None = None
                    was = last_run.get(name)
                    try:
                        raw = fetch(name + "/schedstat")
                        if was is not None and raw == was[5]:
                            # Not run, not waited since the last sample: the same file to
                            # the byte. Only its state may differ (woken, waiting for a CPU).
                            line = fetch(name + "/stat")
                            if not line:
                                continue
                            close = line.rfind(b")") + 2
                            state = line[close : close + 1].decode("ascii", "replace") or "?"
                            last = was[6]
                            if (
                                last is not None
                                and last.state == state
                                and (last.start_ticks is not None or not starts)
                            ):
                                next_run[name] = was
                                if last.start_ticks is None:
                                    started_all = False
                                if last.tid in old_names:
                                    names[last.tid] = old_names[last.tid]
                                threads.append(last)  # the very same reading
                                continue
                        sched = raw.split()
                        cpu_ns, run_delay, runs = int(sched[0]), int(sched[1]), int(sched[2])
                    except FileNotFoundError:
                        # No CONFIG_SCHED_INFO, or the thread just went: stat tells which.
                        status = fetch(name + "/status")
                        if not status:
                            continue
                        stat = parse_stat(read_small(f"{name}/stat", dir_fd=task_fd))
                        started: int | None = stat.start_ticks
                        cpu_ns = ticks_to_ns(stat.utime_ticks + stat.stime_ticks)
                        run_delay = runs = None
                        raw = b""
                        if Signal.SCHEDSTAT not in unavailable:
                            unavailable.append(Signal.SCHEDSTAT)
                    tid = int(name)
                    if status is None and was is not None and was[0] == cpu_ns and was[1] == runs:
                        # Not run since the last sample (same CPU time, same number of times
                        # scheduled in): it cannot have been switched out, so both switch
                        # counters are unchanged; only its state may differ (woken, waiting
                        # for a CPU). stat has the state and costs less than half of status.
                        if line is None:
                            line = fetch(name + "/stat")
                            if not line:
                                continue
                            close = line.rfind(b")") + 2
                            state = line[close : close + 1].decode("ascii", "replace") or "?"
                        voluntary, involuntary = was[2], was[3]
                        if tid in old_names:
                            names[tid] = old_names[tid]
                    else:
                        if status is None:
                            status = fetch(name + "/status")
                            if not status:
                                continue
                        state, voluntary, involuntary, thread_name = _parse_status(status)
                        if thread_name is not None:
                            names[tid] = thread_name
                    if runs is not None:
                        started = was[4] if was is not None else None
                        if started is None:
                            if starts:
                                if line is None:
                                    line = fetch(name + "/stat")
                                started = parse_stat(line).start_ticks
                            else:
                                started_all = False
                    # Positional (tid, state, cpu, run delay, switches, start): one per thread.
                    sample = ThreadSample(
                        tid, state, cpu_ns, run_delay, voluntary, involuntary, started
                    )
                    if runs is not None:
                        ran = (cpu_ns, runs, voluntary, involuntary, started, raw, sample)
                        next_run[name] = ran
                    threads.append(sample)
                except OSError as exc:
                    if exc.errno in NO_DESCRIPTORS:
                        raise  # not seen, which is not the same as exited: the caller says so
                    continue
                except (ValueError, IndexError):
                    continue
        record.threads = tuple(threads)
        record.started = started_all
        self._next[(pid, start_ticks)] = record
        return record.threads
