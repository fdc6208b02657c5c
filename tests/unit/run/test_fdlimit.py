"""oversub raises its soft limit on open files at start (room for the /proc files a sample
holds), and the commands it starts get the limit it was started with."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from oversub.run.fdlimit import NOFILE_CAP
from tests.support.harness import OVERSUB

SOFT, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
STARTED = min(1024, HARD)


def _soft(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, HARD))


@pytest.mark.skipif(HARD <= 1024, reason="the hard limit leaves nothing to raise")
def test_oversub_raises_its_soft_limit_and_its_command_gets_the_one_it_was_started_with() -> None:
    """`check -- CMD` under `ulimit -Sn 1024`: oversub runs with the hard limit, CMD with
    1,024 (a program may use select(), which fails above descriptor 1,023)."""
    script = "grep 'Max open files' /proc/$PPID/limits; ulimit -Sn; sleep 0.6"
    out = subprocess.run(
        [*OVERSUB, "check", "--interval", "0.2", "--warmup", "0.1", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: _soft(STARTED),
    )
    assert out.returncode in (0, 1), out.stderr
    limits, child = out.stdout.split("\n")[:2]
    parent_soft = int(limits.split()[3])
    if HARD == resource.RLIM_INFINITY:
        assert parent_soft > STARTED, limits
    else:
        assert parent_soft == min(HARD, NOFILE_CAP), limits
    assert child == str(STARTED), out.stdout


def test_raising_never_fails_and_says_what_it_was() -> None:
    code = (
        "import resource\n"
        "from oversub.run import fdlimit\n"
        "first = fdlimit.raise_soft()\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "again = fdlimit.raise_soft()\n"  # already at the hard limit: nothing to do
        "print(first, soft == min(hard, fdlimit.NOFILE_CAP), again)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: _soft(STARTED),
    )
    expected = "None" if STARTED == HARD else str(STARTED)
    assert out.stdout.split() == [expected, "True", "None"], out.stderr


def test_a_limit_that_cannot_be_raised_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from oversub.run import fdlimit

    def refuse(*_args: object) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(fdlimit, "_started_with", None)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert fdlimit.raise_soft() is None
    fdlimit.restore_in_child()  # nothing raised: nothing to give back, and no error
