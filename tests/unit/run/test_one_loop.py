"""Every command that follows a target goes through the one attach function and the one
sampling loop: `run.sources.attach(Target)` makes the source, `run.session.follow` reads it.

Each command runs in-process with both replaced by recorders (the loop stops the run at
once, as Ctrl-C would), so the test sees which target each one attached and that the loop
read the very source attach made."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import oversub.cli.target
import oversub.run.session
import oversub.run.sources
from oversub.analysis.plans import synthetic_budget
from oversub.core.errors import ExitStatus
from oversub.core.names import TargetKind
from oversub.core.targets import Target
from oversub.probe.cgroup import CgroupMount
from oversub.probe.cgroup_target import CgroupRef, Hierarchy
from tests.support.harness import run_cli

JOB = "/slurm/uid_0/job_42"


class Recorded:
    """A source that only says it was made; the loop that gets it records it."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Target, dict[str, Any]]]:
    made: list[Recorded] = []
    followed: list[tuple[Target, dict[str, Any]]] = []

    def attach(target: Target, budget: object = None) -> Recorded:
        made.append(Recorded(target))
        return made[-1]

    def follow(source: Recorded, options: object, **kwargs: Any) -> Any:
        assert source in made  # the very source attach made, nothing else
        followed.append((source.target, kwargs))
        raise KeyboardInterrupt

    def cgroup_target(argument: str) -> tuple[CgroupRef, Any]:
        mount = CgroupMount(1, "/", "/sys/fs/cgroup/cpu", frozenset({"cpu"}))
        hierarchy = Hierarchy(1, mount, "/sys/fs/cgroup/cpu")
        return CgroupRef(argument, "/nonexistent" + argument, hierarchy), synthetic_budget(1)

    monkeypatch.setattr(oversub.run.sources, "attach", attach)
    monkeypatch.setattr(oversub.run.session, "follow", follow)
    monkeypatch.setattr(oversub.cli.target, "cgroup_target", cgroup_target)
    yield followed
    assert all(source.closed for source in made)


PID = os.getpid()
CASES = [
    (["watch", str(PID), "--format", "json"], Target.tree(PID), True),
    (["watch", "--cgroup", JOB, "--format", "json"], Target.of_cgroup(JOB), True),
    (["watch", "--all", "--format", "json"], Target.node(), True),
    (["check", "--pid", str(PID), "--duration", "1"], Target.tree(PID), True),
    (["check", "--cgroup", JOB, "--duration", "1"], Target.of_cgroup(JOB), True),
    (["serve", "--pid", str(PID), "--name", "web"], Target.tree(PID, name="web"), False),
    (["serve", "--cgroup", JOB], Target.of_cgroup(JOB), False),
    (["serve", "--all"], Target.node(), False),
]


@pytest.mark.parametrize(
    ("argv", "target", "stops_at_exit"),
    CASES,
    # Not the pid itself: every pytest-xdist worker must collect the same test ids.
    ids=[" ".join(argv).replace(str(PID), "PID") for argv, _, _ in CASES],
)
def test_each_command_attaches_its_target_and_runs_the_one_loop(
    argv: list[str],
    target: Target,
    stops_at_exit: bool,
    calls: list[tuple[Target, dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    if argv[0] == "serve":
        argv = [*argv, "--textfile", str(tmp_path)]  # no port to listen on
    code, _, err = run_cli(argv, capsys)
    assert code == ExitStatus.INTERRUPTED, err
    assert [t for t, _ in calls] == [target]
    assert calls[0][1].get("stop_at_exit", True) is stops_at_exit


def test_check_of_a_command_attaches_its_tree_as_the_child_subreaper(
    calls: list[tuple[Target, dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        ["check", "--", sys.executable, "-c", "import time; time.sleep(30)"], capsys
    )
    assert code == ExitStatus.INTERRUPTED, err
    ((target, kwargs),) = calls
    assert target.kind is TargetKind.TREE and target.pid not in (0, PID)
    assert kwargs["should_stop"] is not None  # the command's exit and --timeout
