"""A real library oversub has no row for (issue 41, items 1 and 3): its pool is named by the
object its threads' code is in, and its fix is the levers that work for any runtime.

A shared object built here with the C compiler, installed as `site-packages/rowlesspool/
_pool.so` in a temporary directory, starts N threads that compute without a pause when a
process loads it with ctypes; N processes of it run under `oversub check`. Before issue 41
those threads were `unattributed` and the finding called them "the application's own
threads" with dask's, an executor's and joblib's knobs. Linux x86-64 with glibc only (the
layout `probe.startroutine` reads).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import oversub

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc",
        reason="the start routine is read for glibc on x86-64",
    ),
]

VCPUS = len(os.sched_getaffinity(0))
PROCS = max(2, min(VCPUS, 4))
SECONDS = 6.0

POOL_C = r"""
#include <pthread.h>
#include <stdlib.h>
static volatile int stop_flag;
/* A pool's thread calls its work: the return address into the start routine is what names
   the object (a start routine that never calls a function leaves none on the stack). */
__attribute__((noinline)) static void spin(void) {
    volatile unsigned long x = 0;
    while (!stop_flag) x = x * 2654435761u + 1;
}
static void *work(void *arg) {
    (void)arg;
    spin();
    return 0;
}
int start_pool(int n) {
    const char *asked = getenv("ROWLESS_NUM_THREADS");  /* the name its binary holds */
    if (asked != 0 && atoi(asked) > 0) n = atoi(asked);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, 0, work, 0)) return -1;
        pthread_detach(t);
    }
    return 0;
}
void stop_pool(void) { stop_flag = 1; }
"""

JOB = """
import ctypes, os, subprocess, sys, time
path, procs, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if len(sys.argv) == 4:  # the parent: PROCS workers at once
    argv = [sys.executable, *sys.argv]
    workers = [subprocess.Popen([*argv, str(i)]) for i in range(procs)]
    sys.exit(max(w.wait() for w in workers))
if os.environ.get("PIN"):  # the lever: each worker its own CPUs, before the pool starts
    cpus = sorted(os.sched_getaffinity(0))
    share = max(1, len(cpus) // procs)
    at = int(sys.argv[4]) * share % len(cpus)
    os.sched_setaffinity(0, cpus[at : at + share])
lib = ctypes.CDLL(path)
assert lib.start_pool(len(os.sched_getaffinity(0))) == 0  # N threads: a default-sized pool
time.sleep(seconds)
lib.stop_pool()
"""


def build(root: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the library")
    package = root / "lib" / "python3" / "site-packages" / "rowlesspool"
    package.mkdir(parents=True)
    source = root / "pool.c"
    source.write_text(POOL_C)
    target = package / "_pool.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-pthread", "-o", str(target), str(source)],
        check=True,
        capture_output=True,
    )
    return target


def test_a_library_without_a_row_is_named_with_the_levers_of_any_runtime(tmp_path: Path) -> None:
    library = build(tmp_path)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    command = [sys.executable, str(job), str(library), str(PROCS), str(SECONDS)]
    report = tmp_path / "r.json"
    flags = ["--interval", "0.5", "--warmup", "1", "--json", str(report)]
    result = oversub(["check", *flags, "--", *command], timeout=120)
    doc = json.loads(report.read_text())
    over = [f for f in doc["findings"] if f["rule"].startswith("oversubscribed-")]
    assert len(over) == 1, (result.stderr, doc["findings"])
    [finding] = over
    message, fix = finding["message"], finding["fix"]
    assert "belong to rowlesspool" in message, message
    assert "no row for rowlesspool" in message, message
    for words in ("application's own", "dask", "joblib", "ThreadPoolExecutor", "OMP_NUM_THREADS"):
        assert words not in message and words not in fix, (words, message, fix)
    assert "rowlesspool in " in fix and "taskset -c CPUS CMD" in fix, fix
    # The variable its binary names is a candidate, unverified, never the fix.
    assert "its binary names ROWLESS_NUM_THREADS" in fix and "unverified" in fix, fix
    assert "ROWLESS_NUM_THREADS=" not in fix, fix
    assert f"run at most {VCPUS} busy process" in fix, fix
    # The JSON names the library and the object its threads run in.
    workers = [p for p in doc["processes"] if p["pid"] in finding["pids"]]
    assert len(workers) >= 2, doc["processes"]
    for p in workers:
        [entry] = [o for o in p["owners"] or () if o.get("library") == "rowlesspool"]
        assert entry["object"] == str(library) and entry["busy"] >= 1, p["owners"]
        assert entry["owner"].startswith("lib:/"), entry
    # The lever works on it: each worker its own CPUs, set before the pool starts (it sizes
    # its pool from its affinity, as most runtimes do).
    result = oversub(["check", *flags, "--", *command], env={"PIN": "1"}, timeout=120)
    doc = json.loads(report.read_text())
    over = [f for f in doc["findings"] if f["rule"].startswith("oversubscribed-")]
    if PROCS <= VCPUS:
        assert not over, (result.stderr, doc["findings"])
