"""What a blocked process is waiting in, from `/proc/PID/syscall`.

Used for one question only: is a forked, single-thread OpenMP child idle (waiting for work
in a pipe read or a shared semaphore, like any pool worker) or hung? The fork-after-OpenMP
hang (pytorch#41197) sits in a *private* futex wait with no timeout: a private futex can only
be woken by a thread of the same process, and a one-thread process has no other thread, so
it waits forever. Measured here: hung workers show `202 ... 0x80 ... 0x0` (futex,
FUTEX_WAIT|FUTEX_PRIVATE_FLAG, no timeout); idle fork-Pool workers show a pipe read or a
shared FUTEX_WAIT_BITSET.

Reading the file needs ptrace access to the process (own user or root); otherwise None.
"""

from __future__ import annotations

import os

from oversub.core.names import WaitKind
from oversub.probe.procfiles import read_small

# Syscall numbers differ by architecture; unknown architectures are not classified.
_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98, "ppc64le": 221, "s390x": 238}
_READ = {"x86_64": 0, "aarch64": 63, "arm64": 63, "ppc64le": 3, "s390x": 3}

_FUTEX_PRIVATE_FLAG = 128
_FUTEX_CLOCK_REALTIME = 256
_FUTEX_WAITS = (0, 9)  # FUTEX_WAIT, FUTEX_WAIT_BITSET


def parse_syscall(text: str, machine: str) -> WaitKind | None:
    """Classify a `/proc/PID/syscall` line: "futex-private", "futex", "read", "other".

    None when the process is running or the architecture is unknown.
    """
    fields = text.split()
    futex, read = _FUTEX.get(machine), _READ.get(machine)
    if not fields or fields[0] == "running" or futex is None:
        return None
    try:
        number = int(fields[0])
        if number == futex:
            op = int(fields[2], 16)
            timeout = int(fields[4], 16)
            command = op & ~(_FUTEX_PRIVATE_FLAG | _FUTEX_CLOCK_REALTIME)
            if op & _FUTEX_PRIVATE_FLAG and command in _FUTEX_WAITS and timeout == 0:
                return WaitKind.FUTEX_PRIVATE
            return WaitKind.FUTEX
    except (ValueError, IndexError):
        return None
    return WaitKind.READ if number == read else WaitKind.OTHER


def read_wait(pid: int, root: str = "/") -> WaitKind | None:
    """What `pid` (its main thread) is blocked in; None when unreadable or running."""
    try:
        text = read_small(os.path.join(root, "proc", str(pid), "syscall"))
    except OSError:
        return None
    return parse_syscall(text.decode("ascii", "replace"), os.uname().machine)
