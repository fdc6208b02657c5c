"""Where busy threads spend their CPU: their sampled user-space program counters by the object
and function their code lies in (`probe.perfpc`, `probe.pcmap`), and the split of those
samples into a runtime's wait code and real work (`analysis.spin`). Standard library only.

A runtime whose waiting threads spin (an OpenMP team at its barrier) burns the CPU that its
oversubscribed neighbours want; one whose threads work (faiss's distance kernels) only shares
it. What a thread's CPU time went to tells the two apart in this run, without a table of
costs (docs/signals.md, "Where a busy thread's CPU goes").
"""

from __future__ import annotations

from typing import NamedTuple

from oversub.core.names import Name


class NotMeasured(Name):
    """Why a process's program counters could not be sampled (each degrades to "not
    measured", never to an error)."""

    PARANOID = "perf-paranoid"
    """`kernel.perf_event_paranoid` forbids perf events to this user (3: only CAP_PERFMON or
    root; 2: a user's own processes, user space only)."""
    DENIED = "denied"
    """EACCES or EPERM for root, or for a process the user may read: a seccomp profile (a
    container runtime's default) or a security module refuses `perf_event_open`; or the
    ring buffer's locked memory was refused."""
    NO_PERF = "no-perf-events"
    """ENOSYS: a kernel without perf events, or a seccomp profile that answers ENOSYS."""
    NO_EVENT = "no-cpu-clock"
    """ENOENT, EOPNOTSUPP or EINVAL for the software cpu-clock event."""
    NO_THREADS = "no-threads"
    """No thread to sample: none given, or every one ended before it could be opened."""
    LIMIT = "limit"
    """Out of descriptors or memory (EMFILE, ENFILE, ENOMEM)."""
    UNSUPPORTED = "unsupported"
    """No `perf_event_open` system call number is known for this machine, or no ctypes."""


class PcBucket(NamedTuple):
    """Samples of one object whose PCs share a function and a spin hint."""

    function: str | None
    """The function (a symbol of the object's file, mangled as stored) whose code holds the
    PCs; None when no symbol covers them (a hidden function of a stripped file, or names
    not read). Chosen by the watched process: escape it before printing."""
    spin_hint: bool
    """The PCs follow closely a spin-wait instruction (x86 PAUSE or a run of NOPs, AArch64
    YIELD, WFE or ISB), or head the short loop of one that this measurement sampled: the
    thread was spinning, whatever runtime's code it is (`probe.pcmap`)."""
    samples: int


class ObjectSamples(NamedTuple):
    """Samples whose PC lies in one object's code."""

    path: str
    """The object as the process maps it (its path in the process's mount namespace), or
    "[vdso]", "[anonymous]" (code in no file: a JIT), "[unmapped]" (gone since). Chosen by
    the watched process: escape it before printing."""
    samples: int
    buckets: tuple[PcBucket, ...]
    """By function and hint, most samples first; at most `MAX_BUCKETS` (the rest, summed,
    in a last bucket named "...")."""
    names: str = ""
    """Where function names came from (".symtab", ".dynsym", "+.gnu_debugdata" added), or
    why none were read (a FUSE file system, not an ELF shared object, ...)."""


MAX_BUCKETS = 32
"""Buckets kept per object."""


class ThreadSamples(NamedTuple):
    """One sampled thread."""

    tid: int
    samples: int
    """User-space samples taken of it."""
    cpu_ns: int | None
    """CPU time it ran during the window (schedstat), user and kernel; None when unknown.
    At the sampling frequency, samples / (cpu_ns x hz) is its share of time in user space."""


class PcProfile(NamedTuple):
    """The sampled user-space PCs of some threads of one process over one short window."""

    pid: int
    seconds: float
    """Length of the window (0 when not measured)."""
    hz: int
    """Samples per second of a thread's CPU time."""
    threads: tuple[ThreadSamples, ...] = ()
    objects: tuple[ObjectSamples, ...] = ()
    """By object, most samples first."""
    lost: int = 0
    """Samples the kernel dropped (a ring buffer full)."""
    unmeasured: NotMeasured | None = None
    """Why nothing was measured; None when it was."""
    why: str = ""
    """One line saying why it was not measured, or what was left out (a thread that ended,
    a thread past the bound)."""

    @property
    def samples(self) -> int:
        return sum(o.samples for o in self.objects)


class ObjectWait(NamedTuple):
    """One object's samples split into waiting and working (`analysis.spin`)."""

    path: str
    samples: int
    waiting: int
    """Samples in wait or spin code."""
    runtime: str | None
    """The runtime whose wait code it is (a key of `analysis.spin.SPIN_CODE`, or "spin-hint"
    for a spin loop no entry names); None when none of its samples wait."""


class WaitSplit(NamedTuple):
    """Where one process's sampled busy threads spent their user-space CPU."""

    pid: int
    samples: int
    waiting: int
    objects: tuple[ObjectWait, ...]
    """By object, most samples first."""
    unmeasured: NotMeasured | None = None
    why: str = ""

    @property
    def share(self) -> float | None:
        """Share of the samples in wait or spin code; None when nothing was sampled."""
        return self.waiting / self.samples if self.samples else None


SPIN_SHARE = 0.5
"""A process's busy threads that spend at least this share of their sampled CPU in wait or
spin code oversubscribe costly: their waiting takes the CPUs from the work (measured, 2
processes on 2 CPUs: OpenMP teams 0.85-0.99 and 3-5x slower; pools that work 0.00-0.05 and
1.02-1.18x; docs/rules.md, "What oversubscription costs")."""

MIN_SAMPLES = 50
"""Fewer samples than this (a tenth of a second of CPU at 499 Hz) measure nothing."""


class WaitShare(NamedTuple):
    """What one process's busy threads did with their CPU over the windows measured so far
    (`run.waitcost`): the share of their user-space samples in wait code. Carried by
    samples, rates and recordings; a process never measured has none (None)."""

    samples: int
    waiting: int
    runtime: str | None = None
    """The runtime whose wait code holds most of the waiting (`analysis.spin.SPIN_CODE`
    key, or "spin-hint"); None when nothing waited."""
    at: float = 0.0
    """When the last window ended (the sampler's clock): a new window, a new value."""
    windows: int = 1
    """Windows summed."""
    unmeasured: str | None = None
    """Why it could not be measured (a `NotMeasured` value, or "quarantined",
    "unmapped", "few-samples"); None when it was."""
    why: str = ""
    """One line saying why, when not measured."""

    @property
    def share(self) -> float | None:
        """Share of the samples in wait or spin code; None when not measured."""
        if self.unmeasured is not None or self.samples < MIN_SAMPLES:
            return None
        return self.waiting / self.samples

    @property
    def spins(self) -> bool | None:
        """Its busy threads mostly wait in spin code (costly); None when not measured."""
        share = self.share
        return None if share is None else share >= SPIN_SHARE
