"""`watch --all` / `serve --all` on a node whose load sits in the root cgroup: said, with the
command that judges it, in every format; never a target (the metric contract's `/` is the
node's)."""

from __future__ import annotations

import io
import json

from rich.console import Console, RenderableType

from oversub.cli.nodewatch import RootHint
from oversub.core.names import TargetKind
from oversub.core.results import Assessment
from oversub.core.targets import Exported, Round, TargetResult
from oversub.render.nodeview import (
    node_summary_record,
    node_summary_renderable,
    round_record,
    round_renderable,
    round_root_load,
    summary_root_load,
)
from oversub.render.serialize import to_json
from tests.support.builders import (
    make_budget,
    make_interval,
    make_process_rates,
    make_process_summary,
    make_summary,
    make_totals,
)

# make_interval: workers 2001 and 2002 (busy, demand 2.0 and 1.97) under launcher 1234 (idle).
NODE_DEMAND = 4.2


def render(renderable: RenderableType) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(renderable)
    return buffer.getvalue()


def node_result(**interval: object) -> TargetResult:
    iv = make_interval(totals=make_totals(demand=NODE_DEMAND), **interval)
    budget = make_budget(vcpus=2)
    return TargetResult("/", TargetKind.NODE, "/", budget, iv, Assessment(None, ()), "")


def cgroup_result(path: str, *pids: int) -> TargetResult:
    iv = make_interval(processes=tuple(make_process_rates(pid=p) for p in pids))
    return TargetResult(
        path, TargetKind.CGROUP, path, make_budget(vcpus=2), iv, Assessment(None, ()), "ok"
    )


def a_round(*targets: TargetResult, node: TargetResult | None = None) -> Round:
    node = node_result() if node is None else node
    return Round(targets, node, len(targets), True, 1.0, 1, 0.01)


def test_busy_processes_in_no_child_cgroup_are_the_root_cgroups_load() -> None:
    load = round_root_load(a_round())
    assert load is not None
    assert load.pids == (2001, 2002) and round(load.demand, 2) == 3.97
    # Two busy workers share a parent: their tree is the one to watch.
    assert (load.watch, load.name) == (1234, "launcher")
    # The same workers in a cgroup of their own: the root cgroup holds nothing.
    assert round_root_load(a_round(cgroup_result("/job", 2001, 2002))) is None
    # One busy process alone under init: itself, never init (nor the kernel, pid 0).
    lone = node_result(processes=(make_process_rates(pid=77, ppid=1, name="solo"),))
    assert round_root_load(a_round(node=lone))[2:] == (77, "solo")  # type: ignore[index]
    # An idle process in the root cgroup is no load; nor is a node without its totals.
    idle = node_result(processes=(make_process_rates(pid=77, active_threads=0),))
    assert round_root_load(a_round(node=idle)) is None


def test_a_process_seen_for_part_of_the_interval_counts_for_that_part() -> None:
    half = node_result(processes=(make_process_rates(pid=5, ppid=1, demand=2.0, seconds=0.5),))
    load = round_root_load(a_round(node=half))
    assert load is not None and load.demand == 1.0


def test_the_live_frame_and_the_summary_say_where_the_load_is_and_what_judges_it() -> None:
    frame = render(round_renderable(a_round(), make_summary().thresholds))
    assert (
        "no child cgroup held runnable load: the root cgroup did (demand 3.97 of the node's "
        "4.20, 2 processes), and --all judges child cgroups only"
    ) in frame, frame
    assert "judge its processes as a tree: oversub watch 1234 (launcher), or serve --pid 1234" in (
        frame
    )
    # With a loaded cgroup beside it: "too".
    other = render(
        round_renderable(a_round(cgroup_result("/job", 3001)), make_summary().thresholds)
    )
    assert "the root cgroup held runnable load too (demand 3.97" in other, other

    node = make_summary(
        processes=(
            make_process_summary(pid=2001, ppid=1234, demand=2.0),
            make_process_summary(pid=1234, ppid=1, name="launcher", active_threads_peak=0),
        ),
        totals=make_totals(demand=2.1),
    )
    text = render(node_summary_renderable({}, node))
    assert (
        "no child cgroup held runnable load: the root cgroup did (demand 2.00 of the node's "
        in (text)
    )
    assert "oversub watch 2001 (python)" in text, text  # one busy child: itself
    quiet = node._replace(processes=(make_process_summary(active_threads_peak=0),))
    assert "no cgroup held runnable load" in render(node_summary_renderable({}, quiet))
    # A cgroup that held the worker: nothing in the root cgroup.
    shown = {"/job": make_summary(processes=(make_process_summary(pid=2001),))}
    assert summary_root_load(shown, node) is None


def test_json_records_carry_the_root_cgroups_load() -> None:
    record = json.loads(to_json(round_record(a_round(), "t"), indent=None))
    assert record["node"]["root_cgroup"] == {"demand": 3.97, "pids": [2001, 2002], "watch": 1234}
    assert record["targets"] == []
    loaded = round_record(a_round(cgroup_result("/job", 2001, 2002)), "t")
    assert loaded["node"]["root_cgroup"] is None
    node = make_summary(processes=(make_process_summary(pid=9, ppid=1),))
    summary = node_summary_record({}, node, "t")
    assert summary["node"]["root_cgroup"]["watch"] == 9


def test_a_hostile_process_name_is_escaped() -> None:
    node = node_result(processes=(make_process_rates(pid=7, ppid=1, name="\x1b[2Jx"),))
    frame = render(round_renderable(a_round(node=node), make_summary().thresholds))
    assert "\x1b" not in frame and "oversub watch 7 (\\x1b[2Jx)" in frame, frame


def test_serve_says_once_that_the_root_cgroup_holds_load_and_passes_every_state_on() -> None:
    seen: list[Exported] = []
    err = io.StringIO()
    hint = RootHint(then=seen.append, err=err)
    state = Exported(a_round(), {}, True, 0.0, 1.0, 20, "v", "3")
    hint(state)
    hint(state)
    assert seen == [state, state]
    assert err.getvalue().splitlines() == [
        "oversub serve: the root cgroup holds runnable load (demand 3.97 of the node's 4.20, "
        "2 processes), which --all exports in the node's totals only: serve --pid 1234 "
        "(launcher) judges its processes as a tree"
    ]
    quiet = io.StringIO()
    RootHint(err=quiet)(state._replace(round=a_round(cgroup_result("/job", 2001, 2002))))
    assert quiet.getvalue() == ""
