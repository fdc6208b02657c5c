"""Per-thread counters of one process: `task/TID/schedstat`, then `status` or `stat`.

`schedstat` (CPU time, run delay, times scheduled in) is read first; a thread that ran since
the last sample then has its `status` read (state and both context-switch counters:
`/proc/PID/status` covers the main thread only), and a thread that did not run only its
`stat`, for its state (it was not switched out, so its counters stand; `stat` costs the
kernel less than half of `status`). Without schedstat (a kernel without
CONFIG_SCHED_INFO) CPU time comes from `stat` and run delay is unknown. The files stay open
between samples (`proctree.HeldFiles`).
"""

from __future__ import annotations

import os

from oversub.core.names import Signal
from oversub.core.samples import ThreadSample
from oversub.probe.proctree import HeldFiles, parse_stat, read_small, ticks_to_ns

_ThreadKey = tuple[int, int, str]
"""(pid, start_ticks, tid as listed): one thread of one process identity."""
_Ran = tuple[int, int, int | None, int | None]
"""(cpu_ns, times scheduled in, voluntary, involuntary switches) of a thread at a sample."""

_VOLUNTARY = b"\nvoluntary_ctxt_switches:"
_INVOLUNTARY = b"\nnonvoluntary_ctxt_switches:"


def _status_int(status: bytes, key: bytes) -> int | None:
    start = status.find(key)
    if start < 0:
        return None
    start += len(key)
    end = status.find(b"\n", start)
    return int(status[start : end if end >= 0 else len(status)])


def _status_state(status: bytes) -> str:
    # "State:\tS (sleeping)": the same letter as stat field 3 (both come from the same
    # kernel table), so reading status spares a third file per thread.
    start = status.find(b"State:")
    if start < 0:
        return "?"
    return status[start + 6 :].lstrip()[:1].decode("ascii", "replace") or "?"


class ThreadReader:
    """Reads the threads of the processes of one sampler; call `end_sample()` after each
    sample and `close()` at the end (garbage collection closes the files too)."""

    def __init__(self) -> None:
        self.held = HeldFiles()
        self._last_run: dict[_ThreadKey, _Ran] = {}
        """What each thread had run by the previous sample."""
        self._next_run: dict[_ThreadKey, _Ran] = {}
        self._starts: dict[_ThreadKey, int] = {}
        """Each thread's start time, read once (task stat field 22: it never changes)."""
        self._next_starts: dict[_ThreadKey, int] = {}

    def end_sample(self) -> None:
        self.held.end_sample()
        self._last_run, self._next_run = self._next_run, {}
        self._starts, self._next_starts = self._next_starts, {}

    def close(self) -> None:
        self.held.close()

    def read(
        self, pid: int, start_ticks: int, task_fd: int, unavailable: list[Signal]
    ) -> tuple[ThreadSample, ...]:
        """The threads of one process, through its open task directory `task_fd`; a
        thread that exits while it is read is left out."""
        threads: list[ThreadSample] = []
        held = self.held
        last_run = self._last_run
        next_run = self._next_run
        starts = self._starts
        next_starts = self._next_starts
        for name in os.listdir(task_fd):
            key = (pid, start_ticks, name)
            # Any failure below means the thread exited since the listing: skip it.
            try:
                status: bytes | None = None
                runs: int | None
                run_delay: int | None
                try:
                    raw = held.read((*key, 1), f"{name}/schedstat", task_fd)
                    sched = raw.split()
                    cpu_ns, run_delay, runs = int(sched[0]), int(sched[1]), int(sched[2])
                except FileNotFoundError:
                    # No CONFIG_SCHED_INFO, or the thread just went: stat tells which.
                    status = held.read((*key, 0), f"{name}/status", task_fd)
                    if not status:
                        continue
                    stat = parse_stat(read_small(f"{name}/stat", dir_fd=task_fd))
                    cpu_ns = ticks_to_ns(stat.utime_ticks + stat.stime_ticks)
                    run_delay = runs = None
                    if Signal.SCHEDSTAT not in unavailable:
                        unavailable.append(Signal.SCHEDSTAT)
                prev = last_run.get(key)
                if status is None and prev is not None and prev[0] == cpu_ns and prev[1] == runs:
                    # Not run since the last sample (same CPU time, same number of times
                    # scheduled in): it cannot have been switched out, so both switch
                    # counters are unchanged; only its state may differ (woken, waiting for
                    # a CPU). stat has the state and costs less than half of status.
                    line = held.read((*key, 2), f"{name}/stat", task_fd)
                    if not line:
                        continue
                    state = line[line.rfind(b")") + 2 :][:1].decode("ascii", "replace") or "?"
                    voluntary, involuntary = prev[2], prev[3]
                else:
                    if status is None:
                        status = held.read((*key, 0), f"{name}/status", task_fd)
                        if not status:
                            continue
                    state = _status_state(status)
                    voluntary = _status_int(status, _VOLUNTARY)
                    involuntary = _status_int(status, _INVOLUNTARY)
                if runs is not None:
                    next_run[key] = (cpu_ns, runs, voluntary, involuntary)
                started = starts.get(key)
                if started is None:
                    started = parse_stat(read_small(f"{name}/stat", dir_fd=task_fd)).start_ticks
                next_starts[key] = started
                threads.append(
                    ThreadSample(
                        tid=int(name),
                        state=state,
                        cpu_ns=cpu_ns,
                        run_delay_ns=run_delay,
                        voluntary_ctx=voluntary,
                        involuntary_ctx=involuntary,
                        start_ticks=started,
                    )
                )
            except (OSError, ValueError, IndexError):
                continue
        return tuple(threads)
