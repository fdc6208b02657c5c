"""Which sampled PCs are a runtime's wait or spin code, and which are real work (pure).

A thread runtime that spins while it waits (an OpenMP team at its barrier) turns every CPU
it is given into waiting when it shares CPUs; one whose threads work loses only its share.
`split` reads a `PcProfile` (`probe.perfpc`) and counts, per object, the samples that lie in
wait code: the functions of `SPIN_CODE`, every PC of an object that holds nothing but a
runtime (`whole`: an OpenMP runtime, whose names a stripped file may hide), and any PC in a
spin-wait loop (`PcBucket.spin_hint`: after an x86 PAUSE, whatever library it is in).
Everything else is work. The table is what was measured on the real libraries (docs/pools.md,
"Where their busy threads' CPU goes") or, where marked, read from a runtime's source.
"""

from __future__ import annotations

from typing import NamedTuple

from oversub.core.pcprofile import (
    MIN_SAMPLES,
    ObjectWait,
    PcBucket,
    PcProfile,
    WaitShare,
    WaitSplit,
)

SPIN_HINT = "spin-hint"
"""`ObjectWait.runtime` of a spin loop that no entry of the table names."""


class SpinCode(NamedTuple):
    """Where one runtime's threads wait."""

    key: str
    label: str
    objects: tuple[str, ...]
    """Basename prefixes of the objects that hold its code; empty: any object (a runtime
    linked into each library that uses it, as Rust's rayon is)."""
    whole: bool
    """Every PC of those objects is the runtime's own code, never the user's work."""
    functions: tuple[tuple[str, ...], ...]
    """Wait functions: a name that contains every part of one of these (mangled C++ and
    Rust names hold their path's words)."""
    measured: str
    """Where the entry comes from (docs/pools.md)."""


SPIN_CODE: tuple[SpinCode, ...] = (
    SpinCode(
        "libgomp",
        "GNU OpenMP",
        ("libgomp.", "libgomp-"),
        True,
        (
            ("gomp_barrier_wait",),
            ("gomp_team_barrier_wait",),
            ("gomp_sem_wait",),
            ("gomp_mutex_lock_slow",),
            ("gomp_ptrlock_get_slow",),
            ("do_spin",),
            ("do_wait",),
        ),
        "measured: XGBoost, scikit-learn HGB, faiss and LightGBM teams",
    ),
    SpinCode(
        "libomp",
        "LLVM/Intel OpenMP",
        ("libomp.", "libomp-", "libiomp5"),
        True,
        (
            ("__kmp_wait",),
            ("__kmp_yield",),
            ("__kmp_suspend",),
            ("_barrier",),
            ("__kmp_execute_tasks",),
            ("kmp_flag",),
        ),
        "LLVM's source (kmp_wait_release.h, kmp_barrier.cpp); not installed here",
    ),
    SpinCode(
        "openblas",
        "OpenBLAS",
        ("libopenblas", "libscipy_openblas"),
        False,
        (("blas_thread_server",), ("exec_blas_async_wait",)),
        "measured: NumPy's OpenBLAS server threads",
    ),
    SpinCode(
        "rayon",
        "rayon",
        (),
        False,
        (
            ("10rayon_core5sleep",),
            ("12WorkerThread15wait_until",),
            ("15crossbeam_deque", "5steal"),
        ),
        "rayon-core's source (sleep, wait_until_cold, steal); none sampled in tokenizers",
    ),
    SpinCode(
        "yield",
        "sched_yield loop",
        ("libc.so", "libc-", "libc.musl", "ld-musl"),
        False,
        (("sched_yield",), ("thrd_yield",), ("pthread_yield",), ("pthread_spin_lock",)),
        "the C library's yield and spin-lock entry points",
    ),
)
"""Every runtime whose wait code `split` recognises."""


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _entries_for(path: str) -> list[SpinCode]:
    base = _base(path)
    return [e for e in SPIN_CODE if not e.objects or base.startswith(e.objects)]


def waiting_runtime(path: str, bucket: PcBucket) -> str | None:
    """The runtime whose wait code a bucket of `path`'s samples lies in (`SpinCode.key`, or
    SPIN_HINT), None when it is work."""
    entries = _entries_for(path)
    name = bucket.function
    for entry in entries:
        if entry.whole:
            return entry.key
        if name and any(all(part in name for part in parts) for parts in entry.functions):
            return entry.key
    return SPIN_HINT if bucket.spin_hint else None


def split(profile: PcProfile) -> WaitSplit:
    """The profile's samples by object, each split into waiting and working."""
    if profile.unmeasured is not None:
        return WaitSplit(profile.pid, 0, 0, (), profile.unmeasured, profile.why)
    objects = []
    for obj in profile.objects:
        waiting: dict[str, int] = {}
        for bucket in obj.buckets:
            key = waiting_runtime(obj.path, bucket)
            if key is not None:
                waiting[key] = waiting.get(key, 0) + bucket.samples
        most = max(waiting, key=waiting.__getitem__) if waiting else None
        objects.append(ObjectWait(obj.path, obj.samples, sum(waiting.values()), most))
    objects.sort(key=lambda o: -o.samples)
    total = sum(o.samples for o in objects)
    return WaitSplit(
        profile.pid, total, sum(o.waiting for o in objects), tuple(objects), None, profile.why
    )


UNMAPPED = "[unmapped]"
NOT_READ = ("quarantined", "unmapped", "few-samples")
"""`WaitShare.unmeasured` beside the `NotMeasured` values: the process's reads were abandoned
(`probe.memreader`), its maps named no object, too few samples were taken."""


def wait_share(profile: PcProfile, at: float) -> WaitShare:
    """One window's profile as a process's `WaitShare` (ended at `at`): not measured when
    perf refused, when too few samples were taken, or when most samples lie where no object
    could be named (maps unreadable): those would count as work that nothing showed."""
    found = split(profile)
    if found.unmeasured is not None:
        return WaitShare(0, 0, None, at, 1, found.unmeasured.value, found.why)
    unknown = sum(o.samples for o in found.objects if o.path == UNMAPPED)
    if found.samples and 2 * unknown > found.samples:
        why = "its maps could not be read: the samples name no object"
        return WaitShare(found.samples, found.waiting, None, at, 1, "unmapped", why)
    if found.samples < MIN_SAMPLES:
        why = f"{found.samples} user-space samples, fewer than {MIN_SAMPLES}"
        return WaitShare(found.samples, found.waiting, None, at, 1, "few-samples", why)
    by_runtime: dict[str, int] = {}
    for o in found.objects:
        if o.runtime is not None:
            by_runtime[o.runtime] = by_runtime.get(o.runtime, 0) + o.waiting
    runtime = max(by_runtime, key=by_runtime.__getitem__) if by_runtime else None
    return WaitShare(found.samples, found.waiting, runtime, at)
