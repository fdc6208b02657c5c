"""The sampler where there is no /proc (macOS, Windows): per-thread CPU time from psutil.

Run delay, thread states, context switches, pools and PSI are unavailable there, and say so
in every sample (`PSUTIL_UNAVAILABLE`), so the verdict knows it cannot call a tree
oversubscribed from CPU time alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from oversub.core import errors
from oversub.core.names import Signal
from oversub.core.samples import HostSample, ProcessSample, ThreadSample, TreeSample
from oversub.probe.procstat import CLK_TCK

if TYPE_CHECKING:
    import psutil


PSUTIL_UNAVAILABLE = (
    Signal.SCHEDSTAT,
    Signal.THREAD_STATE,
    Signal.CONTEXT_SWITCHES,
    Signal.POOLS,
    Signal.PSI,
)
"""What the psutil fallback (no /proc) cannot provide."""


class PsutilTreeSampler:
    """Samples `root_pid` and its descendants through psutil; tracks orphans like
    `TreeSampler` (a process once seen stays tracked while it runs)."""

    def __init__(
        self, root_pid: int, *, cmdline_max: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root_pid = root_pid
        self._cmdline_max = cmdline_max
        self._clock = clock
        self._sampled = False
        self._tracked: dict[int, psutil.Process] = {}

    def sample(self) -> TreeSample:
        """Read the tree now; the first call raises when the root cannot be observed."""
        import psutil  # only here: the /proc path must not pay its import

        t = self._clock()
        tracked: dict[int, psutil.Process] = {}
        if not self._sampled:
            try:
                tracked[self.root_pid] = psutil.Process(self.root_pid)
            except psutil.NoSuchProcess as exc:
                raise errors.NoSuchProcess(f"no process with pid {self.root_pid}") from exc
            except psutil.AccessDenied as exc:
                raise errors.PermissionDenied(f"cannot read process {self.root_pid}") from exc
        for proc in self._tracked.values():
            if proc.is_running():
                tracked[proc.pid] = proc
        for proc in list(tracked.values()):
            try:
                tracked.update((child.pid, child) for child in proc.children(recursive=True))
            except psutil.Error:
                continue

        processes: dict[int, ProcessSample] = {}
        for pid, proc in sorted(tracked.items()):
            try:
                with proc.oneshot():
                    ppid, name, created = proc.ppid(), proc.name(), proc.create_time()
                    cmdline = " ".join(proc.cmdline())[: self._cmdline_max]
                    threads = tuple(
                        ThreadSample(
                            tid=th.id,
                            state="?",
                            cpu_ns=int((th.user_time + th.system_time) * 1e9),
                            run_delay_ns=None,
                            voluntary_ctx=None,
                            involuntary_ctx=None,
                        )
                        for th in proc.threads()
                    )
            except psutil.Error:
                continue
            processes[pid] = ProcessSample(
                pid=pid,
                ppid=ppid,
                name=name,
                cmdline=cmdline,
                start_ticks=int(created * CLK_TCK),  # identity only: creation time in ticks
                threads=threads,
                pools=None,
                thread_env=None,
            )
        self._sampled = True
        self._tracked = {pid: tracked[pid] for pid in processes}

        observer_ns = time.process_time_ns()  # oversub's own CPU, read beside the host's
        cpu = psutil.cpu_times()
        busy = sum(getattr(cpu, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
        steal = getattr(cpu, "steal", None)
        host = HostSample(
            busy_ns=int(busy * 1e9),
            steal_ns=None if steal is None else int(steal * 1e9),
            psi_some_us=None,
            throttle=None,
            observer_cpu_ns=observer_ns,
        )
        return TreeSample(
            t=t,
            root_pid=self.root_pid,
            processes=processes,
            host=host,
            unavailable=PSUTIL_UNAVAILABLE,
        )
