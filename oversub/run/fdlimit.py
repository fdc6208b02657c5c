"""oversub's file-descriptor limit: raised at start for the /proc files a sample holds open,
and the original given back to every command oversub starts.

A sample re-reads each thread's files through descriptors it keeps open
(`procfiles.HeldFiles`, `proctree.StatScanner`), at about half the cost of opening them
again, and holds at most what the soft RLIMIT_NOFILE leaves (`procfiles._default_max_fds`).
The common soft limit of 1,024 held 448 files: a busy tree of 1,000 threads (2,000 files)
cost 1.10 x the plain-read floor instead of 0.75 x. So `oversub.launch` raises the soft
limit to the hard one at start (at most `NOFILE_CAP`), as Go's runtime does for every
program since Go 1.19 and servers do with their own setting (nginx's
`worker_rlimit_nofile`); when it cannot, oversub runs with the limit it has. A command
oversub starts (`check -- CMD`, `tune`'s trials) gets the soft limit oversub was started
with (`restore_in_child`): a program may watch descriptors with select(), which fails above
1,023, or size a table by the limit.
"""

from __future__ import annotations

NOFILE_CAP = 1 << 20
"""The highest soft limit oversub asks for (Linux's default `fs.nr_open`): where the hard
limit is unlimited, or higher."""

_started_with: tuple[int, int] | None = None
"""(soft, hard) before `raise_soft` raised the soft limit; None while it has not."""


def raise_soft() -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, at most `NOFILE_CAP` (and
    `fs.nr_open` where the hard limit is unlimited); the soft limit it had, None when it was
    not raised (already there, or refused). Never raises."""
    global _started_with
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        infinity = resource.RLIM_INFINITY
        target = NOFILE_CAP if hard == infinity else min(hard, NOFILE_CAP)
        if hard == infinity:
            target = min(target, _nr_open())
        if soft != infinity and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            _started_with = (soft, hard)
            return soft
    except (ImportError, OSError, ValueError):
        pass
    return None


def _nr_open() -> int:
    """The kernel's ceiling on any process's descriptor limit (`fs.nr_open`)."""
    try:
        with open("/proc/sys/fs/nr_open", "rb") as f:
            return int(f.read(32))
    except (OSError, ValueError):
        return NOFILE_CAP


def restore_in_child() -> None:
    """In a child between fork and exec: the soft limit oversub was started with. Never
    raises (the child goes on with the raised one)."""
    if _started_with is None:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, _started_with)
    except (ImportError, OSError, ValueError):
        pass
