"""Is /proc the /proc of oversub's own PID namespace?

Inside a new PID namespace without a /proc of its own (`unshare --fork --pid CMD`, no
`--mount-proc`), pids that oversub gets (its own, its children's, a user's `PID`) are
numbers of the new namespace, while /proc still lists the host's processes by the host's
numbers: /proc/2 is then kthreadd, not the command oversub started, and every verdict
would be about someone else. The kernel says which namespace /proc belongs to:
`/proc/self` names this process by its pid *in /proc's namespace*, and the `NSpid` line of
`/proc/self/status` lists its pid in each namespace from /proc's down to its own (one entry
exactly when they are the same). oversub refuses to read pids through a foreign /proc
rather than translate every number it reads.
"""

from __future__ import annotations

import os

from oversub.core.errors import TargetError


class ForeignProcError(TargetError):
    """/proc belongs to another PID namespace: no pid can be looked up in it (exit 3)."""


_CHECKED: set[str] = set()
"""Roots found to match (a process cannot change its own PID namespace)."""


def foreign_proc_reason(root: str = "/") -> str | None:
    """Why `root`/proc is not this process's PID namespace's /proc; None when it is."""
    proc = os.path.join(root, "proc")
    me = os.getpid()
    try:
        shown = os.readlink(os.path.join(proc, "self"))
    except OSError:
        return f"{proc}/self does not exist: {proc} is not this PID namespace's /proc"
    if shown != str(me):
        return f"oversub is pid {me} here but pid {shown} in {proc}"
    try:
        with open(os.path.join(proc, "self", "status"), "rb") as fh:
            status = fh.read()
    except OSError:
        return None  # the pids agree; without status (very old kernels) that must do
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            ids = line.split()[1:]
            if len(ids) > 1:
                return f"oversub is pid {me} here but {proc} sees it as pid {ids[0].decode()}"
    return None


def check_pid_namespace(root: str = "/") -> None:
    """Raise ForeignProcError when `root`/proc belongs to another PID namespace."""
    if root in _CHECKED:
        return
    reason = foreign_proc_reason(root)
    if reason is not None:
        raise ForeignProcError(
            f"/proc belongs to another PID namespace ({reason}), so pids would name other "
            "processes: mount this namespace's /proc (unshare --fork --pid --mount-proc) or "
            "run oversub outside the namespace"
        )
    _CHECKED.add(root)
