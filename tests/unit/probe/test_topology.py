"""CPU list syntax and sysfs topology (fake trees, then this machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oversub.core.cpulist import format_cpulist, parse_cpulist
from oversub.probe.topology import read_topology
from tests.support.fake_budget_tree import FakeBudgetTree


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11,15", (0, 1, 2, 3, 8, 9, 10, 11, 15)),
        ("5\n", (5,)),
        ("", ()),
        ("  \n", ()),
        ("3,1,2-2,1", (1, 2, 3)),
        ("0-7:2/4", (0, 1, 4, 5)),
        ("2-9:1/3", (2, 5, 8)),
    ],
)
def test_parse_cpulist(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "1,,2", "-1", "0-7:5/4", "0-7:1/0"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ((0, 1, 2, 3, 8), "0-3,8"),
        ((8, 3, 1, 2, 3, 0), "0-3,8"),
        ((), ""),
        ((7,), "7"),
        ((0, 2, 4), "0,2,4"),
        ((0, 1, 3, 4, 5, 10, 11), "0-1,3-5,10-11"),
    ],
)
def test_format_cpulist(cpus: tuple[int, ...], text: str) -> None:
    assert format_cpulist(cpus) == text
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(set(cpus)))


def test_smt_pairs_and_numa(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    # Sibling numbering as on most x86 servers: CPU n and n+4 share a core.
    siblings = {0: "0,4", 1: "1,5", 2: "2,6", 3: "3,7", 4: "0,4", 5: "1,5", 6: "2,6", 7: "3,7"}
    tree.host(online="0-7", siblings=siblings, numa={0: "0-1,4-5", 1: "2-3,6-7"})
    topology = read_topology(tree.root)
    assert topology.online == tuple(range(8))
    assert topology.cores == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert topology.physical == 4
    assert dict(topology.numa) == {0: (0, 1, 4, 5), 1: (2, 3, 6, 7)}
    assert topology.notes == ()


def test_core_cpus_list_is_read_too(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    siblings = {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"}
    tree.host(online="0-3", siblings=siblings, sibling_file="core_cpus_list")
    topology = read_topology(tree.root)
    assert topology.cores == ((0, 1), (2, 3))
    assert topology.physical == 2


def test_offline_cpus_are_not_counted(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-1,3")
    tree.write("/sys/devices/system/cpu/cpu2/online", "0\n")  # offline: no topology dir
    topology = read_topology(tree.root)
    assert topology.online == (0, 1, 3)
    assert topology.physical == 3


def test_missing_siblings_make_physical_unknown(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-3")
    (tree.path("/sys/devices/system/cpu/cpu2/topology/thread_siblings_list")).unlink()
    topology = read_topology(tree.root)
    assert topology.physical is None
    assert topology.cores == ((0,), (1,), (3,))
    assert any("SMT siblings of CPU 2" in note for note in topology.notes)


def test_missing_online_falls_back_to_cpu_directories(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-2")
    tree.path("/sys/devices/system/cpu/online").unlink()
    topology = read_topology(tree.root)
    assert topology.online == (0, 1, 2)
    assert any("online CPUs" in note for note in topology.notes)


def test_no_numa_directory_is_silent_but_unreadable_node_is_noted(tmp_path: Path) -> None:
    tree = FakeBudgetTree(tmp_path)
    tree.host(online="0-3")
    assert dict(read_topology(tree.root).numa) == {}
    assert read_topology(tree.root).notes == ()

    tree.host(online="0-3", numa={0: "0-1", 1: "2-3"})
    tree.make_unreadable("/sys/devices/system/node/node1/cpulist")
    topology = read_topology(tree.root)
    assert dict(topology.numa) == {0: (0, 1)}
    assert any("NUMA node 1" in note for note in topology.notes)


def test_this_machine() -> None:
    topology = read_topology()
    assert len(topology.online) == os.cpu_count()
    assert set(os.sched_getaffinity(0)) <= set(topology.online)
    grouped = [cpu for core in topology.cores for cpu in core]
    assert len(grouped) == len(set(grouped)), "a CPU is in two SMT groups"
    assert set(grouped) <= set(topology.online)
    if topology.physical is not None:
        assert 1 <= topology.physical <= len(topology.online)
        assert set(grouped) == set(topology.online)
    if topology.numa:
        assert set().union(*topology.numa.values()) == set(topology.online)
