"""The cgroup and node samplers on a fake /proc and a fake cgroup hierarchy: membership by
cgroup (subtrees included), a removed cgroup, one sample split per target with each target's
throttling, and node mode's reuse of an idle process's last reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from oversub.analysis.rates import counted, interval
from oversub.core.errors import NoSuchCgroup
from oversub.core.thresholds import Thresholds
from oversub.probe.cgroup import CgroupMount
from oversub.probe.cgroup_sampler import CgroupSampler, NodeSampler
from oversub.probe.cgroup_target import CgroupRef, Hierarchy, ref_of
from tests.support.fake_proc import FakeProc, FakeThread


def _world(tmp_path: Path) -> tuple[FakeProc, Hierarchy, Path]:
    fake = FakeProc(tmp_path)
    fake.write_host()
    fake.add_process(100, 1, threads=[FakeThread(100, cpu_ns=10), FakeThread(101, cpu_ns=10)])
    fake.add_process(200, 1)
    fake.add_process(300, 1)
    top = tmp_path / "cg"
    for relative, procs in (("", "300"), ("a", "100"), ("b", ""), ("b/inner", "200")):
        (top / relative).mkdir(parents=True, exist_ok=True)
        (top / relative / "cgroup.procs").write_text(procs + "\n")
    (top / "a" / "cpu.stat").write_text("nr_periods 10\nnr_throttled 4\nthrottled_time 7\n")
    mount = CgroupMount(1, "/", "/sys/fs/cgroup/cpu", frozenset({"cpu"}))
    return fake, Hierarchy(1, mount, str(top)), top


def test_cgroup_sampler_takes_the_subtree_and_notices_removal(tmp_path: Path) -> None:
    _, hierarchy, top = _world(tmp_path)
    ref = ref_of("/b", hierarchy)
    sampler = CgroupSampler(ref, root=str(tmp_path))
    first = sampler.sample()
    assert set(first.processes) == {200} and first.root_pid == 0 and not first.gone
    (top / "b" / "inner" / "cgroup.procs").unlink()
    (top / "b" / "inner").rmdir()
    (top / "b" / "cgroup.procs").unlink()
    (top / "b").rmdir()
    assert sampler.sample().gone


def test_cgroup_sampler_refuses_a_cgroup_gone_before_the_first_sample(tmp_path: Path) -> None:
    _, hierarchy, _ = _world(tmp_path)
    sampler = CgroupSampler(ref_of("/nope", hierarchy), root=str(tmp_path))
    with pytest.raises(NoSuchCgroup):
        sampler.sample()


def test_node_sample_splits_by_target_with_its_throttling(tmp_path: Path) -> None:
    _, hierarchy, top = _world(tmp_path)
    sampler = NodeSampler(CgroupRef("/", str(top), hierarchy), root=str(tmp_path))
    sample = sampler.sample()
    assert set(sample.processes) == {100, 200, 300}
    split = sampler.split(sample, {"/a": str(top / "a" / "cpu.stat"), "/b/inner": None})
    assert {k: set(s.processes) for k, s in split.items()} == {"/a": {100}, "/b/inner": {200}}
    throttle = split["/a"].host.throttle
    assert throttle is not None and (throttle.nr_periods, throttle.nr_throttled) == (10, 4)
    assert split["/b/inner"].host.throttle is None


def test_node_mode_reuses_an_idle_process_and_rereads_one_that_ran(tmp_path: Path) -> None:
    fake, hierarchy, top = _world(tmp_path)
    ticks = iter(range(100))
    sampler = NodeSampler(
        CgroupRef("/", str(top), hierarchy),
        root=str(tmp_path),
        clock=lambda: float(next(ticks)),
        cpu_clock=fake.cpu_clock,
    )
    s1 = sampler.sample()
    s2 = sampler.sample()
    assert s2.processes[100] is s1.processes[100]  # nothing moved: the same reading
    proc = fake.processes[100]
    proc.threads[1].cpu_ns += 400_000_000
    proc.threads[1].run_delay_ns += 100_000_000
    proc.threads[1].utime_ticks += 40
    fake.write(proc)
    s3 = sampler.sample()
    assert s3.processes[100] is not s2.processes[100]
    assert s3.processes[200] is s1.processes[200]
    iv = counted(interval(s2, s3, 2), Thresholds())
    busy = next(p for p in iv.processes if p.pid == 100)
    assert busy.cpu_s == pytest.approx(0.4, abs=0.01)
    assert busy.delay_s == pytest.approx(0.1, abs=0.01)
    idle = next(p for p in iv.processes if p.pid == 200)
    assert (idle.cpu_s, idle.delay_s, idle.active_threads) == (0.0, 0.0, 0)


def test_node_mode_finds_a_slurm_job_through_the_cpuset_hierarchy(tmp_path: Path) -> None:
    # slurm-wlm 22.05's task/cgroup on v1: the job's tasks are in cpuset:/slurm_vm/.../job_7
    # and at the root of the cpu controller. The job is one target; a process whose cpu
    # cgroup is itself in a job keeps that job, and other cpuset cgroups change nothing.
    _, hierarchy, top = _world(tmp_path)
    cpuset = tmp_path / "cpuset"
    for relative, procs in (
        ("", "100\n200"),
        ("slurm_vm", ""),
        ("slurm_vm/uid_0", ""),
        ("slurm_vm/uid_0/job_7", ""),
        ("slurm_vm/uid_0/job_7/step_0", "300"),
        ("slurm_vm/uid_0/job_7/step_extern", ""),
        ("other", "200"),
    ):
        (cpuset / relative).mkdir(parents=True, exist_ok=True)
        (cpuset / relative / "cgroup.procs").write_text(procs + "\n")
    mount = CgroupMount(1, "/", "/sys/fs/cgroup/cpuset", frozenset({"cpuset"}))
    jobs = CgroupRef("/", str(cpuset), Hierarchy(1, mount, str(cpuset), "cpuset"))
    sampler = NodeSampler(CgroupRef("/", str(top), hierarchy), jobs=jobs, root=str(tmp_path))
    sampler.sample()
    assert sampler.group == {100: "/a", 200: "/b/inner", 300: "/slurm_vm/uid_0/job_7"}
    assert sampler.from_jobs == {"/slurm_vm/uid_0/job_7"}


def test_node_mode_rereads_a_process_whose_threads_wait_without_a_tick(tmp_path: Path) -> None:
    """A starved process: its busy threads are runnable all the time but ran less than one
    clock tick, so nothing in its stat line moves. Reusing its reading would lose its run
    delay (the oversubscribed cgroup judged starved by --all while --cgroup saw it)."""
    fake, hierarchy, top = _world(tmp_path)
    proc = fake.processes[100]
    proc.threads[1].state = "R"
    fake.write(proc)
    ticks = iter(range(100))
    sampler = NodeSampler(
        CgroupRef("/", str(top), hierarchy),
        root=str(tmp_path),
        clock=lambda: float(next(ticks)),
        cpu_clock=fake.cpu_clock,
    )
    s1 = sampler.sample()
    proc.threads[1].cpu_ns += 5_000_000  # 5 ms: no tick
    proc.threads[1].run_delay_ns += 900_000_000
    fake.write(proc)
    s2 = sampler.sample()
    assert s2.processes[100] is not s1.processes[100]
    assert s2.processes[200] is s1.processes[200]  # asleep, nothing moved: still reused
    waiting = next(p for p in counted(interval(s1, s2, 1), Thresholds()).processes if p.pid == 100)
    assert waiting.delay_s == pytest.approx(0.9, abs=0.01)
    assert waiting.active_threads == 1
