"""Thread plans: how many threads each of M processes should use on a budget of N vCPUs.

Pure functions: no I/O, no clock. The budget comes from the probe (or `--cpus`).
"""

from __future__ import annotations


def threads_for(vcpus: int, procs: int, workers: int = 0) -> int:
    """Threads per main process: floor((N - M*W) / M), never below 1.

    Each of the M processes keeps W single-thread helpers, so M*W CPUs are spoken for
    before the main processes divide what is left. Floor, not round: rounding up is what
    puts M*(T+W) above N again.
    """
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    return max(1, (vcpus - procs * workers) // procs)
