"""What a cgroup path says about the workload in it: SLURM job, Kubernetes pod, container,
systemd unit; which cgroup `watch --all` reports a process under; a path bounded for labels.

Pure string work on the path as `/proc/PID/cgroup` shows it (v1: the cpu controller's path,
v2: the unified path). Nothing is read from a process's environment: a path is set by
whoever created the cgroup (slurmd, the kubelet, systemd), never by the watched program.
"""

from __future__ import annotations

import re
from typing import NamedTuple

LABEL_MAX = 256
"""The longest cgroup path a label carries; a longer one keeps its end (docs/metrics.md)."""

_JOB = re.compile(r"^job_(\d+)$")
# kubelet: "pod<uid>" (cgroupfs driver) or "kubepods-burstable-pod<uid with _>.slice" (systemd).
_POD = re.compile(
    r"(?:^|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?$"
)
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$")
_UNIT = re.compile(r"\.(?:service|scope)$")


class Workload(NamedTuple):
    """The labels a cgroup path carries; "" where the path does not say."""

    slurm_job_id: str
    pod_uid: str
    container_id: str
    systemd_unit: str


def parts(path: str) -> list[str]:
    """The components of a cgroup path ("/a/b" -> ["a", "b"])."""
    return [part for part in path.split("/") if part]


def workload_of(path: str) -> Workload:
    """SLURM job id, pod uid (with "-", as `kube_pod_info` spells it), container id and the
    innermost systemd unit named by the components of `path`."""
    job = pod = container = unit = ""
    under_pod = False
    for part in parts(path):
        if not job and (found := _JOB.match(part)):
            job = found.group(1)
        if not pod and (found := _POD.search(part)):
            pod = found.group(1).replace("_", "-")
            under_pod = True
            continue
        found = _CONTAINER.match(part)
        # A bare 64-hex component is a container only under a pod; the prefixed forms always.
        if found and (under_pod or part != found.group(1)):
            container = found.group(1)
        if _UNIT.search(part):
            unit = part
    return Workload(job, pod, container, unit)


def group_of(path: str) -> str | None:
    """The cgroup `watch --all` reports a process of cgroup `path` under, None for the root.

    A SLURM job or a Kubernetes pod is one target however its steps, tasks or containers
    are nested below it: the shallowest component that names one. Otherwise the process's
    own cgroup (a systemd unit, a container of its own, a cgroup made by hand). The root
    cgroup is no target: its processes (kernel threads, init on some hosts) count in the
    node's totals only.
    """
    job = job_group_of(path)
    if job is not None:
        return job
    names = parts(path)
    return "/" + "/".join(names) if names else None


def job_group_of(path: str) -> str | None:
    """The SLURM job or Kubernetes pod cgroup that `path` lies in (its shallowest `job_<id>`
    or `pod<uid>` component), None when it names neither."""
    names = parts(path)
    for depth, part in enumerate(names, start=1):
        if _JOB.match(part) or _POD.search(part):
            return "/" + "/".join(names[:depth])
    return None


def describe(path: str) -> str | None:
    """What the cgroup is, in words: "slurm job 12", "pod <uid>", "container <id, 12 hex>",
    "unit <name>"; None when the path names none of them. Built from the matched ids only
    (digits, hex, a unit name bounded like a label)."""
    work = workload_of(path)
    if work.slurm_job_id:
        return f"slurm job {work.slurm_job_id}"
    if work.pod_uid:
        return f"pod {work.pod_uid}"
    if work.container_id:
        return f"container {work.container_id[:12]}"
    if work.systemd_unit:
        return f"unit {bounded(work.systemd_unit)}"
    return None


def bounded(path: str) -> str:
    """`path` cut to `LABEL_MAX` characters by keeping its end (where the job id, pod uid or
    container id is) behind a leading "…"."""
    if len(path) <= LABEL_MAX:
        return path
    return "…" + path[-(LABEL_MAX - 1) :]
