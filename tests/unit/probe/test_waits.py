"""Classifying what a blocked process waits in (/proc/PID/syscall), as measured here."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from oversub.probe.waits import parse_syscall, read_wait

# Lines read on x86_64 from a hung fork-after-OpenMP worker and from idle fork-Pool workers.
HUNG = "202 0x5560f17b5ba4 0x80 0x10 0x0 0x1 0x40000 0x7fffa22692a0 0x7f6fc0e1e073"
POOL_SEMAPHORE = "202 0x7f84596a0000 0x109 0x0 0x0 0x0 0xffffffff 0x7ffdbfbd3e10 0x7f8458ea3e96"
POOL_PIPE = "0 0x3 0x7f84588244d0 0x4 0x55cf4d515ec0 0x0 0x0 0x7ffdbfbd40e8 0x7f8458f162ad"


@pytest.mark.parametrize(
    ("line", "machine", "kind"),
    [
        (HUNG, "x86_64", "futex-private"),
        (POOL_SEMAPHORE, "x86_64", "futex"),
        (POOL_PIPE, "x86_64", "read"),
        # a private wait with a timeout can end by itself: not "forever"
        ("202 0x55 0x80 0x10 0x7ffd 0x0 0x0 0x0 0x0", "x86_64", "futex"),
        ("98 0x55 0x80 0x10 0x0 0x0 0x0 0x0 0x0", "aarch64", "futex-private"),
        ("7 0x1 0x2 0x3 0x0 0x0 0x0 0x0 0x0", "x86_64", "other"),
        ("running", "x86_64", None),
        ("", "x86_64", None),
        (HUNG, "sparc64", None),  # unknown syscall table: do not guess
        ("202 garbage", "x86_64", None),
    ],
)
def test_parse_syscall(line: str, machine: str, kind: str | None) -> None:
    assert parse_syscall(line, machine) == kind


def test_read_wait_of_missing_process_is_none(tmp_path: object) -> None:
    assert read_wait(2**22 + 12345, root=str(tmp_path)) is None


@pytest.mark.integration
def test_real_process_blocked_in_read() -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("syscall numbers known for x86_64 and aarch64 only")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        deadline = time.monotonic() + 10  # it prints just before it blocks: give it a moment
        while read_wait(child.pid) != "read" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_wait(child.pid) == "read"
    finally:
        child.kill()
        child.wait()
