"""What a cgroup path says (SLURM job, pod, container, unit), which target `--all` reports a
process under, and the bound on label length."""

from __future__ import annotations

import pytest

from oversub.core.workload import (
    LABEL_MAX,
    Workload,
    bounded,
    describe,
    group_of,
    job_group_of,
    workload_of,
)

POD = "8a3c1f5e-2b7d-4c1e-9f00-1234567890ab"
CID = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0",
            Workload("4711", "", "", "slurmstepd.scope"),
        ),
        ("/slurm/uid_1000/job_42/step_batch", Workload("42", "", "", "")),
        (f"/kubepods/burstable/pod{POD}/{CID}", Workload("", POD, CID, "")),
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            + POD.replace("-", "_")
            + f".slice/cri-containerd-{CID}.scope",
            Workload("", POD, CID, f"cri-containerd-{CID}.scope"),
        ),
        (f"/system.slice/docker-{CID}.scope", Workload("", "", CID, f"docker-{CID}.scope")),
        ("/system.slice/nginx.service", Workload("", "", "", "nginx.service")),
        # A bare 64-hex directory outside a pod is not taken for a container.
        (f"/mine/{CID}", Workload("", "", "", "")),
        ("/", Workload("", "", "", "")),
        ("/user.slice/job_x", Workload("", "", "", "")),
    ],
)
def test_workload_of(path: str, expected: Workload) -> None:
    assert workload_of(path) == expected


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("/", None),
        ("/system.slice/nginx.service", "/system.slice/nginx.service"),
        ("/slurm/uid_0/job_42/step_0/task_1", "/slurm/uid_0/job_42"),
        (f"/kubepods/burstable/pod{POD}/{CID}", f"/kubepods/burstable/pod{POD}"),
        ("/oversub-test/a", "/oversub-test/a"),
    ],
)
def test_group_of(path: str, group: str | None) -> None:
    assert group_of(path) == group


def test_bounded_keeps_the_end() -> None:
    long = "/a" * 200 + "/job_7"
    cut = bounded(long)
    assert len(cut) == LABEL_MAX
    assert cut.startswith("…") and cut.endswith("/job_7")
    assert bounded("/short") == "/short"


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/slurm_vm/uid_0/job_12", "slurm job 12"),
        ("/system.slice/slurmstepd.scope/job_4711/step_0", "slurm job 4711"),
        (f"/kubepods/burstable/pod{POD}", f"pod {POD}"),
        (f"/system.slice/docker-{CID}.scope", f"container {CID[:12]}"),
        ("/system.slice/nginx.service", "unit nginx.service"),
        ("/mine", None),
        ("/", None),
    ],
)
def test_describe(path: str, words: str | None) -> None:
    assert describe(path) == words


def test_job_group_of() -> None:
    assert job_group_of("/slurm_vm/uid_0/job_7/step_0/task_1") == "/slurm_vm/uid_0/job_7"
    assert job_group_of(f"/kubepods/pod{POD}/{CID}") == f"/kubepods/pod{POD}"
    assert job_group_of("/system.slice/nginx.service") is None
    assert job_group_of("") is None
