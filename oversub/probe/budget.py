"""The CPU budget of a process: how many vCPUs it may really use, and what sets that.

`os.cpu_count()` counts the host. A process may be held to fewer CPUs by its affinity mask
(taskset, a launcher's binding), by a cgroup CPU quota (docker --cpus, Kubernetes limits,
systemd CPUQuota) anywhere on its cgroup path, or by a cgroup cpuset. `read_budget` reads
all of them and keeps the tightest as the effective N.

Paths are `root` joined with the system path, so tests build fake trees; `root="/"` is the
real system. Only `detail=True` touches py-cpuinfo (slow), see `oversub.probe.cpudetail`.
"""

from __future__ import annotations

import math
import os
import sys

from oversub.core.cpulist import format_cpulist, parse_cpulist
from oversub.core.errors import NoSuchProcess, PermissionDenied, UnsupportedPlatform
from oversub.core.model import Budget, LimitSource
from oversub.probe.cgroup import read_cgroup_limits
from oversub.probe.pidns import check_pid_namespace
from oversub.probe.topology import describe_error, read_topology, rooted

QUOTA_TOLERANCE = 1e-6
"""A quota within this many CPUs of an integer counts as that integer (float error)."""

_NO_CGROUP_NOTE = "cgroup limits are unavailable on this platform: CPU quota and cpuset unknown"


def effective_vcpus(
    logical: int, affinity: int | None, quota: float | None, cpuset: int | None
) -> tuple[int, LimitSource]:
    """Effective N and its source, from the host size and each limit (None = no limit).

    N is the smallest of: the affinity size, the quota rounded DOWN, the cpuset size, and is
    at least 1. A fractional quota rounds down because a thread cannot run part-time: with
    1.5 CPUs of bandwidth, a second always-busy thread only gets throttled, so 1.5 gives
    N = 1, and 0.5 gives N = 1 too (there is always at least one thread). A quota within
    `QUOTA_TOLERANCE` of an integer counts as that integer (1.9999999 -> 2).

    The source is "none" unless the minimum is below `logical`. On a tie the cpuset wins,
    then the quota, then the affinity: a cpuset also narrows the affinity to match it, so the
    cpuset is the cause in that case.
    """
    candidates: list[tuple[int, LimitSource]] = []
    if cpuset is not None:
        candidates.append((cpuset, "cpuset"))
    if quota is not None:
        candidates.append((max(1, math.floor(quota + QUOTA_TOLERANCE)), "quota"))
    if affinity is not None:
        candidates.append((affinity, "affinity"))
    if not candidates:
        return max(1, logical), "none"
    smallest, source = min(candidates, key=lambda candidate: candidate[0])  # first on a tie
    vcpus = max(1, smallest)
    return vcpus, source if smallest < logical else "none"


def _check_exists(pid: int, root: str) -> None:
    """Raise NoSuchProcess / PermissionDenied when `pid` cannot be looked at."""
    if pid <= 0:
        raise NoSuchProcess(f"no process with pid {pid}")
    if os.path.isdir(rooted(root, f"/proc/{pid}")):
        _refuse_a_thread(pid, root)
        return
    if root == "/" and os.name == "posix":
        # /proc mounted with hidepid hides other users' processes: tell that from "gone".
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pass
        except PermissionError:
            raise PermissionDenied(f"cannot read process {pid}: permission denied") from None
        else:
            raise PermissionDenied(f"cannot read process {pid}: permission denied")
    raise NoSuchProcess(f"no process with pid {pid}")


def _refuse_a_thread(pid: int, root: str) -> None:
    """NoSuchProcess naming the process when `pid` is a thread id (/proc lists every thread
    id as a directory, though `ls /proc` does not show them): its Tgid is another pid."""
    try:
        with open(rooted(root, f"/proc/{pid}/status"), encoding="ascii", errors="replace") as fh:
            status = fh.read()
    except OSError:
        return  # gone or refused: the reads that follow say so
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "Tgid":
            tgid = value.strip()
            if tgid.isdigit() and int(tgid) != pid:
                raise NoSuchProcess(
                    f"{pid} is a thread of process {tgid}, not a process: use pid {tgid}"
                )
            return


def _affinity_from_status(pid: int, root: str, notes: list[str]) -> tuple[int, ...] | None:
    path = rooted(root, f"/proc/{pid}/status")
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            status = handle.read()
    except FileNotFoundError:
        raise NoSuchProcess(f"no process with pid {pid}") from None
    except PermissionError:
        raise PermissionDenied(f"cannot read process {pid}: permission denied") from None
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "Cpus_allowed_list":
            try:
                return parse_cpulist(value)
            except ValueError as error:
                notes.append(f"cannot parse Cpus_allowed_list in {path}: {error}")
                return None
    notes.append(f"no Cpus_allowed_list in {path}: CPU affinity unknown")
    return None


def _read_affinity(pid: int, root: str, notes: list[str]) -> tuple[int, ...] | None:
    if root == "/" and hasattr(os, "sched_getaffinity"):
        try:
            return tuple(sorted(os.sched_getaffinity(pid)))
        except ProcessLookupError:
            raise NoSuchProcess(f"no process with pid {pid}") from None
        except PermissionError:
            raise PermissionDenied(f"cannot read process {pid}: permission denied") from None
        except OSError as error:  # e.g. a seccomp filter refusing the syscall
            notes.append(f"sched_getaffinity failed ({describe_error(error)}): read /proc instead")
    return _affinity_from_status(pid, root, notes)


def _read_from_procfs(pid: int, root: str) -> Budget:
    _check_exists(pid, root)
    notes: list[str] = []
    affinity = _read_affinity(pid, root, notes)
    topology = read_topology(root)
    notes.extend(topology.notes)
    limits = read_cgroup_limits(pid, root)
    notes.extend(limits.notes)
    # A process that exits while we read leaves half the files unreadable: call it gone
    # rather than report a budget built from notes.
    if not os.path.isdir(rooted(root, f"/proc/{pid}")):
        raise NoSuchProcess(f"no process with pid {pid}")

    logical = len(topology.online)
    if not logical:
        logical = (os.cpu_count() if root == "/" else None) or len(affinity or ()) or 1
        notes.append(f"online CPUs unknown: assuming {logical} logical CPUs")
    if affinity is None:
        affinity = topology.online or tuple(range(logical))
        notes.append(f"assuming the process may run on CPUs {format_cpulist(affinity)}")
    cpuset = limits.cpuset
    if cpuset is not None and topology.online and set(topology.online) <= set(cpuset.cpus):
        cpuset = None  # a cpuset that allows every online CPU limits nothing
    vcpus, limited_by = effective_vcpus(
        logical,
        len(affinity),
        limits.quota.cpus if limits.quota else None,
        len(cpuset.cpus) if cpuset else None,
    )
    return Budget(
        pid=pid,
        vcpus=vcpus,
        logical=logical,
        physical=topology.physical,
        affinity=affinity,
        quota=limits.quota,
        cpuset=cpuset,
        numa=dict(topology.numa),
        cores=topology.cores,
        limited_by=limited_by,
        notes=tuple(notes),
    )


def _read_without_procfs(pid: int) -> Budget:
    """Budget on a platform without /proc (macOS, Windows, BSD): psutil if present."""
    notes = [_NO_CGROUP_NOTE]
    logical = os.cpu_count() or 1
    physical: int | None = None
    affinity: tuple[int, ...] | None = None
    try:
        import psutil  # only here: /proc answers everything on Linux
    except ImportError:
        notes.append("psutil is not installed: physical cores and affinity unknown")
        if pid != os.getpid():
            raise UnsupportedPlatform(
                f"cannot look at process {pid} on this platform without psutil"
            ) from None
    else:
        logical = psutil.cpu_count(logical=True) or logical
        physical = psutil.cpu_count(logical=False)
        try:
            process = psutil.Process(pid)
            get_affinity = getattr(process, "cpu_affinity", None)  # absent on macOS
            if get_affinity is not None:
                affinity = tuple(sorted(get_affinity()))
        except psutil.NoSuchProcess:
            raise NoSuchProcess(f"no process with pid {pid}") from None
        except psutil.AccessDenied:
            raise PermissionDenied(f"cannot read process {pid}: permission denied") from None
    if affinity is None:
        affinity = tuple(range(logical))
        notes.append("CPU affinity is unavailable on this platform: assuming all logical CPUs")
    vcpus, limited_by = effective_vcpus(logical, len(affinity), None, None)
    return Budget(
        pid=pid,
        vcpus=vcpus,
        logical=logical,
        physical=physical,
        affinity=affinity,
        quota=None,
        cpuset=None,
        numa={},
        cores=(),
        limited_by=limited_by,
        notes=tuple(notes),
    )


def read_budget(pid: int | None = None, *, root: str = "/", detail: bool = False) -> Budget:
    """How many vCPUs process `pid` (None = this process) may really use, and why.

    Reads the affinity mask, online CPUs, SMT siblings and NUMA nodes, and every cgroup
    CPU quota and cpuset on the process's path (v1, v2 or both); `vcpus` is the tightest
    (see `effective_vcpus` for the rounding of fractional quotas). Files that cannot be read
    become `notes`. With `detail=True` the CPU model and flags are filled too, which is slow
    (py-cpuinfo, ~1.2 s): never ask for it while sampling.

    Raises NoSuchProcess when `pid` does not exist, PermissionDenied when it may not be read.
    """
    target = os.getpid() if pid is None else pid
    if root == "/" and not sys.platform.startswith("linux"):
        budget = _read_without_procfs(target)
    else:
        if root == "/":
            check_pid_namespace()  # /proc of another namespace: pids name other processes
        budget = _read_from_procfs(target, root)
    if not detail:
        return budget
    from oversub.probe.cpudetail import read_cpu_detail  # only --detail pays for it

    cpu = read_cpu_detail(root)
    return budget._replace(cpu_model=cpu.model, cpu_flags=cpu.flags, notes=budget.notes + cpu.notes)
