"""Where the busy threads' CPU goes, on the real libraries of issue 41 (`probe.perfpc`,
`analysis.spin`): the PC sampler separates the teams that wait from those that work.

examples/libraries.py runs PROCS processes of one library at its default size. Once each
says its clock started, the busiest threads of each process are sampled for WINDOWS windows
of WINDOW_S, and `analysis.spin.split` gives the share of their user-space samples in wait
code. Measured here (docs/pools.md, "Where their busy threads' CPU goes"): XGBoost's,
scikit-learn's and LightGBM's OpenMP teams mostly 0.90-0.99 at their barriers, but not
always: XGBoost's rounds have phases of work (0.41-0.96 over a run's windows), and
LightGBM's oversubscribed default runs in one of two modes (docs/pools.md: 17-28 steps/s or
1.0), its share 0.99 in the slow one and 0.23 in a fast one. So the teams are asserted to
wait (WAITING_AT_LEAST, far above the 0.00-0.01 of their own fix), every waiting sample in
libgomp and none in the library's own code; faiss 0.03-0.05, tokenizers and OpenCV 0.00.
With the library's own fix (one thread per process) the teams have no barrier left to wait
at. A measurement taken while other work held more than OUTSIDE_AT_MOST CPUs is taken again.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from typing import Any

import pytest

from oversub.analysis.spin import split
from oversub.core.pcprofile import PcProfile, WaitSplit
from oversub.probe import perfpc
from oversub.probe.pcmap import PcMapper
from tests.system.real.workloads import PROCS, example, reaped

pytestmark = pytest.mark.real

WINDOWS, WINDOW_S = 5, 0.3
"""Five windows: XGBoost's rounds have phases of real work, and three windows of an idle
machine measured 0.96, 0.96, 0.90 and 0.57 in four runs."""
WAITING_AT_LEAST = 0.15
"""An oversubscribed OpenMP team waits: 0.23 at the least measured (LightGBM's fast mode),
against 0.00-0.01 with the library's own fix."""
WORKING_AT_MOST = 0.12
"""Measured 0.00-0.05 (faiss's libgomp team the highest): below any waiting team's."""
RUN_S = 15.0
"""Seconds each process works: start-up and the windows fit well inside."""
START_S = 120.0
"""Seconds the processes may take to import and build their data on a loaded machine."""
OUTSIDE_AT_MOST = 0.3
"""CPUs that other work on the machine may take during the windows before they are taken
again (at most ATTEMPTS runs): with a helper's test suite beside it, XGBoost's team measured
0.28 instead of 0.85-0.99, the share of a different machine than the one asked about."""
ATTEMPTS = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _busy_ticks() -> int:
    """Ticks every CPU of the machine spent on anything but idling (/proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return user + nice + system + irq + softirq


def _ticks_of(pids: list[int]) -> int:
    """utime + stime of these processes (all their threads), those still there."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def _cpu(pid: int, tid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def busiest(pid: int, over_s: float = 0.5) -> list[int]:
    """The threads of pid that ran a twentieth of `over_s` or more, busiest first."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    before = {t: _cpu(pid, t) for t in tids}
    time.sleep(over_s)
    ran = {t: _cpu(pid, t) - before[t] for t in tids}
    busy = [t for t in tids if ran[t] >= over_s * 1e9 / 20]
    return [int(t) for t in sorted(busy, key=lambda t: -ran[t])]


def started_workers(stderr: Any, count: int) -> list[int]:
    """The pids of the first `count` processes that said their clock started."""
    pids: list[int] = []
    deadline = time.monotonic() + START_S
    buffered = b""
    fd = stderr.fileno()
    while len(pids) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"only {len(pids)} of {count} processes started in {START_S:g} s")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            pytest.fail(f"the example ended before {count} processes started: {buffered!r}")
        buffered += chunk
        for line in buffered.decode(errors="replace").splitlines():
            if line.endswith(" started") and "pid=" in line:
                pid = int(line.split("pid=")[1].split()[0])
                if pid not in pids:
                    pids.append(pid)
    return pids[:count]


def wait_share(library: str, *args: str, env: dict[str, str] | None = None) -> WaitSplit:
    """`measure_once` until the machine was quiet enough during its windows, at most
    ATTEMPTS times; the last measurement otherwise, with the other load in its message."""
    for _ in range(ATTEMPTS):
        found, outside = measure_once(library, *args, env=env)
        if outside <= OUTSIDE_AT_MOST:
            break
    return found._replace(why=f"other load {outside:.2f} CPUs during the windows")


def measure_once(
    library: str, *args: str, env: dict[str, str] | None = None
) -> tuple[WaitSplit, float]:
    """The busy threads of every process of the run, sampled together: the samples summed,
    and the CPUs that work outside the run (and this test) took meanwhile."""
    why = perfpc.start(os.getpid(), [os.getpid()])
    if isinstance(why, PcProfile):
        pytest.skip(f"perf events not usable here: {why.why}")
    why.close()
    command = example("libraries.py", library, "--procs", str(PROCS), "--seconds", str(RUN_S))
    mapper = PcMapper()
    samples = waiting = 0
    objects: list[Any] = []
    with reaped([*command, *args], env={**os.environ, **(env or {})}) as tree:
        assert tree.proc.stderr is not None
        workers = started_workers(tree.proc.stderr, PROCS)
        ours = [*workers, tree.proc.pid, os.getpid()]
        began, busy, mine = time.monotonic(), _busy_ticks(), _ticks_of(ours)
        for _ in range(WINDOWS):
            for pid in workers:
                tids = busiest(pid)
                if not tids:
                    continue
                profile = perfpc.measure(pid, tids, WINDOW_S, mapper=mapper)
                assert profile.unmeasured is None, profile.why
                found = split(profile)
                samples += found.samples
                waiting += found.waiting
                objects += found.objects
        others = (_busy_ticks() - busy) - (_ticks_of(ours) - mine)
        outside = max(0, others) / CLK_TCK / (time.monotonic() - began)
    return WaitSplit(0, samples, waiting, tuple(objects)), outside


def describe(found: WaitSplit) -> str:
    totals: dict[str, list[int]] = {}
    for o in found.objects:
        t = totals.setdefault(os.path.basename(o.path), [0, 0])
        t[0] += o.samples
        t[1] += o.waiting
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[:5]
    return "; ".join(f"{name}: {n} samples, {w} waiting" for name, (n, w) in top) + (
        f" ({found.why})" if found.why else ""
    )


@pytest.mark.parametrize("library", ["xgboost", "sklearn-hgb", "lightgbm"])
def test_openmp_teams_at_their_default_size_wait_in_libgomp(library: str, figure: Any) -> None:
    found = wait_share(library)
    assert found.share is not None and found.samples >= 50, describe(found)
    figure(f"{library} wait share", round(found.share, 3))
    assert found.share >= WAITING_AT_LEAST, describe(found)
    # Their waiting is the runtime's: libgomp (vendored by the wheels, or Debian's), and
    # the library's own code is work, every sample of it.
    runtimes = {o.runtime for o in found.objects if o.waiting}
    assert runtimes == {"libgomp"}, describe(found)
    own = [o for o in found.objects if "libgomp" not in os.path.basename(o.path)]
    assert sum(o.waiting for o in own) <= 0.01 * found.samples, describe(found)


@pytest.mark.parametrize("library", ["faiss", "tokenizers", "opencv"])
def test_working_pools_at_their_default_size_work(library: str, figure: Any) -> None:
    found = wait_share(library)
    assert found.share is not None and found.samples >= 50, describe(found)
    figure(f"{library} wait share", round(found.share, 3))
    assert found.share <= WORKING_AT_MOST, describe(found)


@pytest.mark.parametrize("library", ["xgboost", "sklearn-hgb", "lightgbm"])
def test_the_librarys_own_fix_leaves_nothing_to_spin(library: str, figure: Any) -> None:
    found = wait_share(library, "--lib-threads", "1")
    assert found.share is not None and found.samples >= 50, describe(found)
    figure(f"{library} --lib-threads 1 wait share", round(found.share, 3))
    assert found.share <= WORKING_AT_MOST, describe(found)
