"""Thread plans: how many threads each of M processes should use on a budget of N vCPUs.

Pure functions: no I/O, no clock. The budget comes from the probe (or from `--cpus`,
through `synthetic_budget`). The arithmetic is deliberately simple, T = floor((N - M*W) / M):
the measured cost of oversubscription (2-23x for OpenMP teams that must share CPUs) is far
larger than the cost of leaving a CPU idle, so every rounding goes down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from oversub.core.model import MAX_VCPUS, Budget, Plan
from oversub.core.plural import count, noun
from oversub.core.pools import RECOMMENDED_VARS


def threads_for(vcpus: int, procs: int, workers: int = 0) -> int:
    """Threads per main process: floor((N - M*W) / M), never below 1.

    Each of the M processes keeps W single-thread helpers, so M*W CPUs are spoken for
    before the main processes divide what is left. Floor, not round: rounding up is what
    puts M*(T+W) above N again.
    """
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    return max(1, (vcpus - procs * workers) // procs)


def synthetic_budget(vcpus: int) -> Budget:
    """A budget of `vcpus` CPUs that was given (`--cpus N`), not measured.

    CPUs 0..N-1, one physical core each, one NUMA node, no cgroup limits. `pid` is 0
    because no process was looked at.
    """
    if not 1 <= vcpus <= MAX_VCPUS:
        raise ValueError(f"vcpus must be between 1 and {MAX_VCPUS}, got {vcpus}")
    cpus = tuple(range(vcpus))
    return Budget(
        pid=0,
        vcpus=vcpus,
        logical=vcpus,
        physical=vcpus,
        affinity=cpus,
        quota=None,
        cpuset=None,
        numa={0: cpus},
        cores=tuple((cpu,) for cpu in cpus),
        limited_by="none",
        notes=("budget given with --cpus; not measured",),
    )


# --------------------------------------------------------------------------- binding


def allowed_cpus(budget: Budget) -> tuple[int, ...]:
    """CPUs a process may be pinned to: its affinity, narrowed by the cgroup cpuset."""
    allowed = set(budget.affinity)
    if budget.cpuset is not None:
        allowed &= set(budget.cpuset.cpus)
    return tuple(sorted(allowed))


class _Node:
    """Free CPUs of one NUMA node, grouped by physical core, consumed as processes are placed.

    A core is "fresh" until some process takes a CPU of it. Processes take fresh cores
    first, so SMT siblings stay with one process; the siblings a process left unused are
    handed to another process only when no fresh core is left.
    """

    def __init__(self, cores: list[list[int]]) -> None:
        self.cores = cores
        self.fresh = [bool(core) for core in cores]
        # Counters and cursors instead of rescans: a plan for thousands of processes on
        # thousands of CPUs must stay linear (tens of ms, not minutes).
        self._free = sum(len(core) for core in cores)
        self._fresh = sum(self.fresh)
        self._first_fresh = 0
        """No fresh core before this index: fresh cores are taken in index order."""
        self._first_used = 0
        """No CPU left in the cores before this index."""

    def free(self) -> int:
        return self._free

    def fresh_cores(self) -> int:
        return self._fresh

    def take(self, count: int, target_cores: int) -> list[int]:
        """Take `count` CPUs spread over at least `target_cores` fresh cores where possible."""
        picked: list[int] = []
        capacity = 0
        i = self._first_fresh
        while i < len(self.cores) and not (len(picked) >= target_cores and capacity >= count):
            if self.fresh[i]:
                picked.append(i)
                capacity += len(self.cores[i])
            i += 1
        # First thread of every picked core, then the second threads: one thread per
        # physical core before any thread shares a core with its sibling.
        taken: list[int] = []
        depth = 0
        while len(taken) < count and any(depth < len(self.cores[i]) for i in picked):
            for i in picked:
                if depth < len(self.cores[i]) and len(taken) < count:
                    taken.append(self.cores[i][depth])
            depth += 1
        for i in picked:
            self.fresh[i] = False
        self._fresh -= len(picked)
        self._first_fresh = picked[-1] + 1 if picked else self._first_fresh
        seen = set(taken)
        touched = set(picked)
        # Not enough fresh cores: fall back to siblings other processes left idle.
        i = self._first_used
        while len(taken) < count and i < len(self.cores):
            for cpu in self.cores[i]:
                if len(taken) >= count:
                    break
                if cpu not in seen:
                    taken.append(cpu)
                    seen.add(cpu)
                    touched.add(i)
            i += 1
        for i in touched:
            self.cores[i] = [cpu for cpu in self.cores[i] if cpu not in seen]
            if not self.cores[i] and self.fresh[i]:
                self.fresh[i] = False  # emptied by the fallback: no longer a core to give
                self._fresh -= 1
        self._free -= len(taken)
        while self._first_used < len(self.cores) and not self.cores[self._first_used]:
            self._first_used += 1
        return taken


def _nodes(budget: Budget, allowed: Iterable[int]) -> list[_Node]:
    """Allowed CPUs grouped by NUMA node, then by physical core (both in CPU order)."""
    allowed_set = set(allowed)
    node_of: dict[int, int] = {}
    for node_id in sorted(budget.numa):
        for cpu in budget.numa[node_id]:
            node_of.setdefault(cpu, node_id)
    # CPUs no node claims (the platform did not say) form one node of their own, last.
    unknown_node = max(budget.numa, default=-1) + 1
    core_of: dict[int, tuple[int, ...]] = {}
    for core in budget.cores:
        for cpu in core:
            core_of.setdefault(cpu, core)
    grouped: dict[int, dict[tuple[int, ...], list[int]]] = {}
    for cpu in sorted(allowed_set):
        node_id = node_of.get(cpu, unknown_node)
        core = core_of.get(cpu, (cpu,))
        grouped.setdefault(node_id, {}).setdefault(core, []).append(cpu)
    return [
        _Node(sorted(grouped[node_id].values(), key=lambda cpus: cpus[0]))
        for node_id in sorted(grouped)
    ]


def binding_plan(budget: Budget, procs: int, cpus_each: int) -> tuple[tuple[int, ...], ...]:
    """One CPU list per process, `cpus_each` CPUs each, disjoint, within the allowed CPUs.

    Placement rules, in order of priority:
    1. A process never spans NUMA nodes when it fits in one. Each goes to the node with the
       most free CPUs: every whole placement lowers the nodes' total capacity by exactly
       one process, so spreading places as many whole processes as packing would, and it
       gives each process more physical cores and memory bandwidth.
    2. Inside a node the free cores are shared out evenly, and a process takes the first
       thread of each of its cores before any SMT sibling: distinct physical cores first.
    3. A core's siblings stay with one process; leftover siblings go to another process
       only when no untouched core is left.
    Bindings come node by node. Processes that fit in no single node come last, spread
    over the nodes with the most free CPUs first.

    Returns () when M * cpus_each exceeds the allowed CPUs: no exclusive binding exists.
    Under a cgroup quota smaller than the affinity this still pins each process to
    `cpus_each` CPUs, so the bound CPUs add up to the plan, not to the affinity.
    """
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    if cpus_each < 1:
        raise ValueError(f"cpus_each must be >= 1, got {cpus_each}")
    allowed = allowed_cpus(budget)
    if procs * cpus_each > len(allowed):
        return ()
    nodes = _nodes(budget, allowed)

    # Rule 1: decide each process's node by free-CPU counts before touching any core.
    room = [node.free() for node in nodes]
    placed_in: list[int] = []
    for _ in range(procs):
        fitting = [i for i, free in enumerate(room) if free >= cpus_each]
        if not fitting:
            break
        node_index = max(fitting, key=lambda i: (room[i], -i))
        room[node_index] -= cpus_each
        placed_in.append(node_index)

    bindings: list[list[int]] = []
    for node_index, node in enumerate(nodes):
        waiting = placed_in.count(node_index)
        for _ in range(waiting):
            # Rule 2: an even share of the untouched cores, the earlier processes taking
            # the remainder; never more cores than threads.
            share = math.ceil(node.fresh_cores() / waiting) if node.fresh_cores() else 0
            bindings.append(node.take(cpus_each, min(cpus_each, share)))
            waiting -= 1

    unplaced = procs - len(placed_in)
    for remaining in range(unplaced, 0, -1):
        cpus: list[int] = []
        for node in sorted(nodes, key=lambda n: n.free(), reverse=True):
            need = cpus_each - len(cpus)
            if need == 0:
                break
            amount = min(need, node.free())
            if amount:
                share = math.ceil(node.fresh_cores() / remaining)
                cpus.extend(node.take(amount, min(amount, share)))
        bindings.append(cpus)
    return tuple(tuple(sorted(cpus)) for cpus in bindings)


# --------------------------------------------------------------------------- plan


def _ratio(needed: int, vcpus: int) -> str:
    return f"{needed / vcpus:.1f}x"


def _fewer_workers(n: int, procs: int) -> str:
    """Advice when workers overfill N: the most that still leaves one CPU per main process."""
    most = n // procs - 1
    if most < 1:
        return "run the work in the main processes (no workers), or fewer processes"
    return f"use at most {most} worker{'s' if most > 1 else ''} per process"


def _oversubscription_warnings(budget: Budget, procs: int, workers: int, threads: int) -> list[str]:
    """Warnings that the plan itself cannot fit N: the most important ones, first."""
    n = budget.vcpus
    warnings: list[str] = []
    if procs > n:
        warnings.append(
            f"{procs} processes on {count(n, 'vCPU')}: even one thread each oversubscribes "
            f"by M/N = {_ratio(procs, n)}: run at most {count(n, 'process')}"
        )
    if workers > 0 and procs * workers >= n:
        warnings.append(
            f"the {count(procs * workers, 'worker')} ({procs} x {workers}) alone fill the "
            f"{count(n, 'vCPU')}: the main {noun(procs, 'process gets', 'processes get')} "
            f"1 thread{' each' if procs > 1 else ''} and still oversubscribe; "
            + _fewer_workers(n, procs)
        )
    elif workers > 0 and procs <= n and procs * (threads + workers) > n:
        warnings.append(
            f"{procs} x (1 thread + {count(workers, 'worker')}) = "
            f"{count(procs * (1 + workers), 'thread')} on {count(n, 'vCPU')}: the workers "
            "leave less than one CPU per main process; " + _fewer_workers(n, procs)
        )
    return warnings


def _advice(budget: Budget, workers: int) -> list[str]:
    """Warnings about how to apply the plan: after the ones that say it cannot fit."""
    n = budget.vcpus
    warnings: list[str] = []
    quota = budget.quota
    # Only when N really is the rounded quota: a caller may narrow vcpus below it (a SLURM
    # task's share), and then the quota's rounding explains nothing.
    if (
        budget.limited_by == "quota"
        and quota is not None
        and quota.cpus != math.floor(quota.cpus)
        and math.floor(quota.cpus) == n
    ):
        warnings.append(
            f"the cgroup quota is {quota.cpus:g} CPUs; T was derived from the rounded-down "
            f"quota N = {n}"
        )
    if workers > 0:
        warnings.append(
            "set the same variables to 1 inside the workers (worker_init_fn): torch sets "
            "only its own pool to 1 there; NumPy's OpenBLAS keeps the size it started with "
            f"(all {count(n, 'vCPU')} by default)"
        )
    return warnings


def _thread_env(threads: int) -> Mapping[str, str]:
    return {name: str(threads) for name in RECOMMENDED_VARS}


def thread_env(threads: int) -> Mapping[str, str]:
    """The thread variables of every pool oversub knows, each set to `threads`: the table
    `recommend --format env` exports (`Plan.env`), also what each `tune` candidate sets."""
    return _thread_env(threads)


def make_plan(
    budget: Budget,
    procs: int,
    workers: int = 0,
    *,
    procs_source: str | None = None,
    launcher_procs: int | None = None,
    context: tuple[str, ...] = (),
    bind: bool = True,
) -> Plan:
    """Divide `budget` among `procs` main processes, each with `workers` single-thread helpers.

    T = threads_for(N, M, W); the plan is oversubscribed when even T = 1 needs more than N
    threads (M*(T+W) > N). Each process is bound to T + W CPUs: its workers share them. No
    binding with `bind=False` (the launcher places the processes) or for a budget given as
    a count (`Budget.given`), whose CPU ids are not this machine's. Warnings come most
    important first: the plan cannot fit, then `context` (the launcher's say on N and M),
    then no binding, then how to apply the plan.
    """
    if procs < 1:
        raise ValueError(f"procs must be >= 1, got {procs}")
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    n = budget.vcpus
    threads = threads_for(n, procs, workers)
    needed = procs * (threads + workers)
    warnings = [*_oversubscription_warnings(budget, procs, workers, threads), *context]
    if not bind or budget.given:
        binding: tuple[tuple[int, ...], ...] = ()
    else:
        binding = binding_plan(budget, procs, threads + workers)
        if not binding:
            warnings.append(
                f"no exclusive CPU binding exists: {procs} x {count(threads + workers, 'CPU')} "
                f"needed, {len(allowed_cpus(budget))} allowed"
            )
    warnings += _advice(budget, workers)
    return Plan(
        budget=budget,
        procs=procs,
        workers=workers,
        threads_per_process=threads,
        leftover=n - needed,
        oversubscribed=needed > n,
        env=_thread_env(threads),
        worker_env=_thread_env(1) if workers > 0 else {},
        binding=binding,
        warnings=tuple(warnings),
        procs_source=procs_source,
        launcher_procs=launcher_procs,
    )
