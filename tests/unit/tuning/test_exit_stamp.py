"""A trial's exit is stamped through its pidfd even when that descriptor is above 1,023:
oversub raises its open-files limit (run.fdlimit) and a sample holds many /proc files, and
select() refuses such a descriptor (the exit then went unseen)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from oversub.cli.tune import trialrun

SOFT, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)


@pytest.mark.skipif(
    HARD != resource.RLIM_INFINITY and HARD < 2048, reason="no room for descriptors above 1,023"
)
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd_open")
def test_an_exit_is_seen_through_a_pidfd_above_1023() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (2048, HARD))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < 1100:  # the next descriptor is above 1,023
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
        stamp = trialrun._ExitStamp(child.pid)
        assert stamp._watch._fd is not None and stamp._watch._fd > 1023
        child.wait()
        stamp.close()
        assert stamp.exited_at is not None
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))
