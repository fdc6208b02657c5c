"""Host counters: /proc/stat, PSI, cgroup v1/v2 cpu.stat."""

from __future__ import annotations

from pathlib import Path

from oversub.core.samples import ThrottleStat
from oversub.probe import host
from oversub.probe.procstat import CLK_TCK
from tests.support.fake_proc import FakeProc

NS = 1_000_000_000


def test_busy_excludes_idle_iowait_steal_and_guest(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    #        user nice system idle iowait irq softirq steal guest guest_nice
    fake.write_host(cpu=(100, 5, 50, 1000, 20, 3, 2, 7, 40, 9))
    sample = host.read_host(root=str(tmp_path))
    assert sample.busy_ns == (100 + 5 + 50 + 3 + 2) * NS // CLK_TCK
    assert sample.steal_ns == 7 * NS // CLK_TCK
    assert sample.psi_some_us == 123456
    assert sample.throttle is None


def test_old_kernel_cpu_line_without_steal() -> None:
    assert host.parse_cpu_line(b"cpu  10 0 5 100 0 0 0\n") == (15 * NS // CLK_TCK, 0)


def test_absent_psi_and_absent_proc_stat(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    fake.write_host(psi_total_us=None)
    sample = host.read_host(root=str(tmp_path))
    assert sample.psi_some_us is None
    assert sample.busy_ns is not None

    empty = tmp_path / "empty"
    empty.mkdir()
    bare = host.read_host(root=str(empty))
    assert (bare.busy_ns, bare.steal_ns, bare.psi_some_us) == (None, None, None)


def test_cgroup_v2_cpu_stat_converts_usec(tmp_path: Path) -> None:
    path = tmp_path / "cpu.stat"
    path.write_text(
        "usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\n"
        "nr_periods 120\nnr_throttled 30\nthrottled_usec 2500000\n"
        "nr_bursts 0\nburst_usec 0\n"
    )
    sample = host.read_host(root=str(tmp_path), throttle_stat_path=str(path))
    assert sample.throttle == ThrottleStat(
        nr_periods=120, nr_throttled=30, throttled_ns=2_500_000_000
    )


def test_cgroup_v1_cpu_stat_keeps_ns(tmp_path: Path) -> None:
    path = tmp_path / "cpu.stat"
    path.write_text("nr_periods 50\nnr_throttled 4\nthrottled_time 123456789\n")
    sample = host.read_host(root=str(tmp_path), throttle_stat_path=str(path))
    assert sample.throttle == ThrottleStat(nr_periods=50, nr_throttled=4, throttled_ns=123456789)


def test_cpu_stat_without_bandwidth_counters_or_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "cpu.stat"
    path.write_text("usage_usec 10\nuser_usec 5\nsystem_usec 5\n")
    assert host.read_host(str(tmp_path), str(path)).throttle is None
    assert host.read_host(str(tmp_path), str(tmp_path / "missing")).throttle is None


def test_real_host_counters_are_cumulative() -> None:
    first = host.read_host()
    total = 0
    for i in range(300_000):  # burn a little CPU so busy time can move
        total += i * i
    second = host.read_host()
    assert total > 0
    assert first.busy_ns is not None and second.busy_ns is not None
    assert second.busy_ns >= first.busy_ns
