"""The cost windows of the one loop (`run.waitcost`) with a scripted kernel: opened only on
an oversubscribed target's busy threads, at most once per cadence, ended at the next reading,
carried by every later sample of the process; refused perf events, a quarantined process and
a fake /proc tree give "not measured", never an error."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Any

from oversub.core.names import Verdict
from oversub.core.pcprofile import ObjectSamples, PcBucket
from oversub.core.results import Assessment
from oversub.core.samples import ProcessSample, TreeSample
from oversub.run.waitcost import WaitCosts, busy_threads
from tests.support.builders import make_finding, make_interval, make_process_rates

PID, TID = 2001, 2101
GOMP = "/venv/lib/python3.11/site-packages/xgboost.libs/libgomp-a34b3233.so.1.0.0"


def _ring(n: int, pid: int, tid: int) -> bytes:
    page = os.sysconf("SC_PAGE_SIZE")
    head = bytearray(page)
    data = b"".join(struct.pack("=IHHQII", 9, 2, 24, 0x1000 + i % 7, pid, tid) for i in range(n))
    struct.pack_into("=Q", head, 1024, len(data))
    struct.pack_into("=QQ", head, 1040, page, 8 * page)
    return bytes(head) + data.ljust(8 * page, b"\0")


class Kernel:
    """perf_event_open answering `answer` (an errno) or a ring of `n` samples per thread."""

    def __init__(self, answer: int = 0, n: int = 200) -> None:
        self.answer, self.n = answer, n
        self.opened: list[int] = []

    def __call__(self, attr: bytes, tid: int, cpu: int, group: int, flags: int) -> int:
        if self.answer:
            return -self.answer
        fd = os.memfd_create("ring")
        os.write(fd, _ring(self.n, PID, tid))
        self.opened.append(tid)
        return fd


class Mapper:
    """Every PC in `path`'s wait code (`waiting`) or its work."""

    def __init__(self, path: str = GOMP, waiting: bool = True) -> None:
        self.path, self.waiting = path, waiting

    def objects(self, pid: int, pcs: dict[int, int]) -> tuple[tuple[ObjectSamples, ...], str]:
        n = sum(pcs.values())
        name = "gomp_team_barrier_wait_end" if self.waiting else "work"
        return (ObjectSamples(self.path, n, (PcBucket(name, self.waiting, n),)),), ""


class Readers:
    def __init__(self, quarantined: bool = False) -> None:
        self.held, self.q = 0, quarantined

    def acquire(self) -> None:
        self.held += 1

    def release(self) -> None:
        self.held -= 1

    def quarantined(self, proc_dir: str, start: int | None = None) -> bool:
        return self.q


def costs(tmp_path: Path, kernel: Kernel, **kw: Any) -> tuple[WaitCosts, list[float]]:
    now = [100.0]
    made = WaitCosts(
        str(tmp_path),
        syscall=kernel,
        clock=lambda: now[0],
        readers=kw.pop("readers", Readers()),  # type: ignore[arg-type]
        mapper=kw.pop("mapper", Mapper()),  # type: ignore[arg-type]
        **kw,
    )
    return made, now


def interval():  # type: ignore[no-untyped-def]
    busy = make_process_rates(
        pid=PID,
        start_ticks=5,
        thread_ids=(PID, TID, TID + 1),
        thread_runnable_s=(0.9, 0.8, 0.01),
    )
    return make_interval(processes=(busy,))


OVER = Assessment(Verdict.OVERSUBSCRIBED, (make_finding(pids=(PID,)),))


def sample_of(iv: Any) -> TreeSample:
    p = ProcessSample(PID, 1, "python", "python -m xgb", 5, (), None, None)
    return TreeSample(1.0, PID, {PID: p}, None)  # type: ignore[arg-type]


def test_busy_threads_are_those_runnable_a_quarter_of_the_interval() -> None:
    p = make_process_rates(thread_ids=(1, 2, 3), thread_runnable_s=(0.2, 0.9, 0.3))
    assert busy_threads(p, 1.0) == [2, 3]
    assert busy_threads(p._replace(thread_ids=()), 1.0) == []


def test_an_oversubscribed_targets_busy_threads_are_measured_as_the_cadence_allows(
    tmp_path: Path,
) -> None:
    kernel = Kernel()
    made, now = costs(tmp_path, kernel)
    made.request(interval(), Assessment(Verdict.OK, ()))
    assert kernel.opened == []  # not oversubscribed: nothing asked of the kernel
    made.request(interval(), OVER)
    assert kernel.opened == [PID, TID]  # the busy threads only, busiest first
    now[0] = 101.0
    made.collect()
    carried = made.attach(sample_of(None))
    share = carried.processes[PID].wait_share
    assert share is not None and share.share == 1.0 and share.runtime == "libgomp"
    assert (share.samples, share.at) == (400, 101.0)
    now[0] = 100.5
    made.request(interval(), OVER)  # within the cadence (1 s after the first): no window
    assert kernel.opened == [PID, TID]
    now[0] = 101.0
    made.request(interval(), OVER)
    assert kernel.opened == [PID, TID, PID, TID]
    made.collect()
    now[0] = 102.0
    made.request(interval(), OVER)  # the next gap is 2 s
    assert len(kernel.opened) == 4
    now[0] = 103.0
    made.request(interval(), OVER)
    assert len(kernel.opened) == 6
    made.close()


def test_a_refusal_is_carried_as_not_measured(tmp_path: Path) -> None:
    made, _ = costs(tmp_path, Kernel(errno.EPERM))
    made.request(interval(), OVER)
    share = made.attach(sample_of(None)).processes[PID].wait_share
    assert share is not None and share.share is None and share.unmeasured == "denied"
    assert "seccomp" in share.why
    made.close()


def test_a_quarantined_process_is_not_measured(tmp_path: Path) -> None:
    kernel = Kernel()
    made, _ = costs(tmp_path, kernel, readers=Readers(quarantined=True))
    made.request(interval(), OVER)
    assert kernel.opened == []
    share = made.attach(sample_of(None)).processes[PID].wait_share
    assert share is not None and share.unmeasured == "quarantined"
    made.close()


def test_a_fake_tree_without_a_kernel_is_never_measured(tmp_path: Path) -> None:
    readers = Readers()
    made = WaitCosts(str(tmp_path), readers=readers)  # type: ignore[arg-type]
    made.request(interval(), OVER)
    made.collect()
    assert made.attach(sample_of(None)).processes[PID].wait_share is None
    made.close()
    made.close()
    assert readers.held == 0


def test_a_process_gone_is_forgotten(tmp_path: Path) -> None:
    made, _ = costs(tmp_path, Kernel())
    made.request(interval(), OVER)
    made.collect()
    empty = TreeSample(2.0, PID, {}, None)  # type: ignore[arg-type]
    assert made.attach(empty) is empty
    assert made.attach(sample_of(None)).processes[PID].wait_share is None
    made.close()


class TreeKernel(Kernel):
    """Rings for the builders' threads (tid = pid, or pid x 100 + i)."""

    def __call__(self, attr: bytes, tid: int, cpu: int, group: int, flags: int) -> int:
        fd = os.memfd_create("ring")
        os.write(fd, _ring(self.n, tid if tid < 1000 else tid // 100, tid))
        self.opened.append(tid)
        return fd


class Samples:
    """A sampler that hands out samples given in advance."""

    def __init__(self, samples: list[TreeSample]) -> None:
        self.samples, self.throttle_stat_path = samples, None

    def sample(self) -> TreeSample:
        return self.samples.pop(0)

    def close(self) -> None:
        pass


def test_the_loop_measures_an_oversubscribed_tree_and_its_verdict_follows(
    tmp_path: Path,
) -> None:
    """The one loop with a source whose costs have a scripted kernel: the first interval is
    judged unmeasured, a window opens on its busy threads, and the next reading carries the
    measured share into the next interval's finding."""
    from oversub.core.targets import Target
    from oversub.run.session import SessionOptions, follow
    from oversub.run.sources import OneSource
    from tests.support.builders import ROOT, budget, busy_workers, tree_pair

    procs = busy_workers(2, 2, delay=0.5, pools=("libgomp",))
    first, second = tree_pair(procs, dt=1.0)
    third = tree_pair(procs, dt=2.0)[1]
    kernel = TreeKernel()
    clock = [0.0]
    waits = WaitCosts(
        str(tmp_path),
        syscall=kernel,
        clock=lambda: clock[0],
        readers=Readers(),  # type: ignore[arg-type]
        mapper=Mapper(),  # type: ignore[arg-type]
    )
    source = OneSource(
        Target.tree(ROOT), Samples([first, second, third]), budget(2), "", costs=waits
    )  # type: ignore[arg-type]
    seen = []

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    follow(
        source,
        SessionOptions(max_intervals=2),
        on_round=lambda r: seen.extend(t.assessment for t in r.targets),
        stop_at_exit=False,
        keep_summaries=False,
        sleep=sleep,
        clock=lambda: clock[0],
    )
    source.close()
    assert sorted(set(kernel.opened)) == [201, 202, 20101, 20201]
    costs = [a.findings[0].evidence.get("cost") for a in seen]
    assert costs == ["unmeasured", "spin"]
