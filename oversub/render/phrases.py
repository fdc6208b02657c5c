"""Plain-text phrases shared by every human-readable format (rich, plain, Markdown).

No rich here: the plain stderr report and the Markdown report use these too, and they must
not pay for importing rich. Unknown values print as "-" everywhere, so a missing signal is
never mistaken for zero.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from oversub.core.cpulist import format_cpulist
from oversub.core.model import Budget
from oversub.core.names import DENIED, Signal, Verdict, WorkerRole, worker_role
from oversub.core.plural import count, noun
from oversub.core.pools import (
    POOL_KINDS,
    POOLS_BY_KEY,
    RECOMMENDED_VARS,
    controlling_value,
    first_level,
)
from oversub.core.results import Finding, HostRates, ProcessSummary, Summary, Totals
from oversub.core.rules import Rule
from oversub.core.thresholds import Thresholds
from oversub.core.workload import bounded


def target_name(root_pid: int, budget: Budget) -> str:
    """What was watched: "pid 1234", or "cgroup /slurm/uid_0/job_42" for a cgroup target."""
    if budget.cgroup is not None:
        return "node" if budget.cgroup == "/" else f"cgroup {bounded(budget.cgroup)}"
    return f"pid {root_pid}"


UNKNOWN = "-"
"""Shown for a value the platform did not provide."""

VERDICT_MEANING: Mapping[Verdict, str] = {
    Verdict.OK: "the tree's runnable threads fit in its vCPUs",
    Verdict.AT_RISK: "fits for now, but a hazard can oversubscribe it",
    Verdict.STARVED: "threads wait for CPUs while the tree asks for no more than it has",
    Verdict.OVERSUBSCRIBED: "the tree keeps more threads runnable than it has vCPUs",
}
"""One clause per verdict, for banners and report headings."""

PLAN_MEANING: Mapping[Verdict, str] = {
    Verdict.OK: "the planned threads fit in the vCPUs",
    Verdict.AT_RISK: "the plan fits, but a hazard can oversubscribe it",
    Verdict.STARVED: "the plan's threads would wait for CPUs taken outside it",
    Verdict.OVERSUBSCRIBED: "the plan needs more threads than there are vCPUs",
}
"""The same for a static preflight, which judges a plan: no tree exists yet."""

NOT_JUDGED = "not judged"
"""The headline word of a run without a verdict."""


def headline(s: Summary) -> tuple[str, str]:
    """The verdict word and its clause ("oversubscribed", "the tree keeps ..."), or
    ("not judged", why) for a run without a verdict.

    The clause says what the findings under it measured: a verdict that the run's episodes
    make says so ("... in 4 episodes, 13.0 s (19% of the time measured)"), and a starved
    one names what took the CPUs (`starved_clause`), never a load it measured as smaller
    than the wait."""
    if s.verdict is None:
        return NOT_JUDGED, s.not_judged or "nothing was measured"
    if s.preflight:
        return s.verdict.value, PLAN_MEANING[s.verdict]
    first = next((f for f in s.findings if f.verdict is s.verdict), None)
    episodes = None
    if first is not None and "episodes" in first.evidence:
        episodes = next((t for t in s.episode_totals if t.verdict is s.verdict), None)
    when = (
        ""
        if episodes is None
        else f" in {count(episodes.episodes, 'episode')}, {episodes.seconds:.1f} s "
        f"({episodes.share:.0%} of the time measured)"
    )
    if s.verdict is Verdict.STARVED and first is not None:
        return s.verdict.value, starved_clause(first) + when
    if s.verdict is Verdict.OVERSUBSCRIBED and episodes is not None:
        return s.verdict.value, "the tree kept more threads runnable than it has vCPUs" + when
    return s.verdict.value, VERDICT_MEANING[s.verdict]


def starved_clause(f: Finding) -> str:
    """What a starved finding measured took the CPUs, in a clause: the quota; other
    processes or the hypervisor ("taken outside the tree" only when they used at least
    what the tree waited, else both figures); or, when no outside load explains the wait,
    the tree's own oversubscribed episodes (when most of the waiting fell in them) or
    "cause not seen"."""
    e = f.evidence
    if f.rule is Rule.STARVED_QUOTA:
        ratio = e.get("throttled_ratio")
        share = f" in {percent(ratio)} of its periods" if isinstance(ratio, float) else ""
        return f"threads wait: the cgroup CPU quota throttled the tree{share}"
    outside, steal = e.get("outside_cpus"), e.get("steal_cpus")
    if f.rule is Rule.STARVED_OUTSIDE:
        # The larger of the two explains the waiting (the rule fired on one of them); it
        # is said to take the CPUs only when it is at least what the tree waited.
        o = outside if isinstance(outside, int | float) else -1.0
        st = steal if isinstance(steal, int | float) else -1.0
        waited = e.get("waited_cpus")
        w = waited if isinstance(waited, int | float) else 0.0
        top, who = (o, "other processes used") if o >= st else (st, "the hypervisor stole")
        if top >= w:
            return f"threads wait for CPUs taken outside the tree ({who} {top:.2f} CPUs)"
        return (
            f"threads wait for CPUs: {who} {top:.2f} CPUs, of the {w:.2f} CPU-seconds per "
            "second the tree waited"
        )
    known = isinstance(outside, int | float) and isinstance(steal, int | float)
    why = (
        "outside load and steal were less than the wait"
        if known
        else "outside load or steal could not be read"
    )
    own = e.get("episode_waited_share")
    if isinstance(own, int | float) and own >= 0.5:
        return (
            f"threads waited, {percent(own)} of it in the tree's own oversubscribed episodes; {why}"
        )
    return f"threads wait for CPUs, cause not seen: {why}"


def cpus_phrase(cpus: tuple[int, ...]) -> str:
    """ "2 CPUs: 0-1" (count, then the kernel cpu-list syntax); "none" when empty."""
    if not cpus:
        return "none"
    return f"{count(len(cpus), 'CPU')}: {format_cpulist(cpus)}"


def budget_limit_line(b: Budget) -> str:
    """One sentence for N: "N = 1 usable vCPU (limited by quota: 1.5 CPUs rounded down)"."""
    head = f"N = {b.vcpus} usable {noun(b.vcpus, 'vCPU')}"
    if b.limited_by == "quota" and b.quota is not None:
        exact = b.quota.cpus
        if exact < 1:
            why = f"quota: {exact:g} CPUs, raised to the minimum of 1"
        elif exact != int(exact):
            why = f"quota: {exact:g} CPUs rounded down"
        else:
            why = f"quota: {exact:g} {noun(exact, 'CPU')}"
    elif b.limited_by == "affinity":
        why = f"affinity: {count(len(b.affinity), 'CPU')}"
    elif b.limited_by == "cpuset" and b.cpuset is not None:
        why = f"cpuset: {count(len(b.cpuset.cpus), 'CPU')}"
    elif b.limited_by == "launcher" and b.launcher is not None:
        why = f"launcher: {b.launcher} per task"
    elif b.limited_by == "none" and b.given:
        return f"{head} (given, not measured)"
    elif b.limited_by == "none":
        return f"{head} (no limit: all {b.logical} logical CPUs)"
    else:
        why = b.limited_by
    return f"{head} (limited by {why})"


def number(value: float | None, digits: int = 2) -> str:
    """A measured float with `digits` decimals, or "-" when unknown."""
    return UNKNOWN if value is None else f"{value:.{digits}f}"


def percent(ratio: float | None) -> str:
    """A ratio (0.5) as "50%", or "-" when unknown."""
    return UNKNOWN if ratio is None else f"{ratio * 100:.0f}%"


def rate(per_second: float | None) -> str:
    """Events per second without decimals ("260"), or "-" when unknown."""
    return UNKNOWN if per_second is None else f"{per_second:.0f}"


def pools_text(pools: tuple[str, ...] | None, live: Mapping[str, int] | None = None) -> str:
    """ "libgomp, openblas=1 (live), torch": with the live size of each pool read from the
    process's memory; "none" when no pool is mapped; "?" when maps were unreadable."""
    if pools is None:
        return "?"
    if not pools:
        return "none"
    live = live or {}
    return ", ".join(f"{k}={live[k]} (live)" if k in live else k for k in pools)


def sizing_vars_text(pools: tuple[str, ...] | None, env: Mapping[str, str] | None) -> str:
    """The variables that size each mapped pool, set or unset, e.g. "OMP_NUM_THREADS=1,
    OPENBLAS_NUM_THREADS unset": what decides how many threads the pools start; then any
    other sizing variable that is set (it sizes a pool loaded later). Tuning variables
    (OPENBLAS_CORETYPE, KMP_BLOCKTIME, ...) are left out. "?" when the environment is
    unknown; "-" when there is nothing to show."""
    if env is None:
        return "?"
    shown: dict[str, str] = {}
    for key in pools or ():
        kind = POOLS_BY_KEY.get(key)
        if kind is None or not kind.variables:
            continue
        ctl = controlling_value(key, env)
        if ctl is not None:
            shown.setdefault(ctl[0], f"{ctl[0]}={ctl[1]}")
        else:
            shown.setdefault(kind.variables[0], f"{kind.variables[0]} unset")
    for name in SIZING_VARS:
        if env.get(name, "").strip():
            shown.setdefault(name, f"{name}={env[name]}")
    return ", ".join(shown.values()) if shown else UNKNOWN


SIZING_VARS: tuple[str, ...] = tuple(
    dict.fromkeys([*RECOMMENDED_VARS, *(v for kind in POOL_KINDS for v in kind.variables)])
)
"""Variables that set how many threads a pool starts (the rest only tune it)."""

_LABELS = (
    ("multiprocessing.resource_tracker", "resource tracker"),
    ("multiprocessing.forkserver", "forkserver"),
    ("multiprocessing.spawn", WorkerRole.SPAWN),
)
"""Command lines multiprocessing gives its helpers (`python -c "from multiprocessing..."`),
and what to call them: all of them are "python", and their code is not what tells them apart."""

LABEL_WIDTH = 40
"""Characters of a process label: room for a short command line in an 80-column table."""


_INTERPRETER = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*[a-z]?)?(?:-dbg)?")
"""The program names of a Python interpreter: python, python3, python3.11, python3.13t, pypy3."""

_SOURCE_SUFFIXES = (".py", ".pyc", ".pyw", ".pyz")
"""A script run as `python train.py` keeps the interpreter in its label."""


def process_label(
    name: str, cmdline: str, parent_cmdline: str | None, ppid: int, width: int = LABEL_WIDTH
) -> str:
    """What a process is, in at most `width` characters: "resource tracker", "spawn worker",
    "pytest-xdist worker", "execnet worker", "loky worker" (`core.names.worker_role`),
    "fork of 1234" (a plain fork keeps its parent's command line), else the command line
    with the directories of its program and script dropped ("python train.py --epochs 1");
    a console script, which the kernel runs as its interpreter and its path
    ("/venv/bin/python /venv/bin/oversub stress"), reads as the program the user ran
    ("oversub stress"). Cut with "…"; the name (comm) when the command line is empty (a
    zombie, a kernel thread). Every watch, check and report table names processes here."""
    for marker, label in _LABELS:
        if marker in cmdline:
            return label
    # pytest-xdist's and execnet's workers run a bootstrap line, loky's a module's main.
    kind = worker_role(name, cmdline, parent_cmdline)
    if kind in (WorkerRole.XDIST, WorkerRole.EXECNET, WorkerRole.LOKY):
        return kind
    if cmdline and cmdline == parent_cmdline:
        return f"fork of {ppid}"
    if not cmdline.strip():
        return name
    words = cmdline.split(" ", 2)
    program = words[0].rsplit("/", 1)[-1]
    if _INTERPRETER.fullmatch(program) and len(words) > 1 and "/" in words[1]:
        script = words[1].rsplit("/", 1)[-1]
        if words[1].startswith("-") or not script:
            pass
        elif script.endswith(_SOURCE_SUFFIXES):
            words[1] = script
        else:  # a console script (no suffix): its name is the program the user ran
            words = words[1:]
            words[0] = script
            program = script
    text = " ".join([program, *words[1:]]).strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def delay_text(ratio: float | None, demand: float, th: Thresholds) -> str:
    """A delay ratio for a table cell: "low" when it would look alarming (above
    `delay-ratio`) but the waiting behind it is below `min-wait` (an idle tree's few
    wake-ups can wait 90% of almost nothing), else the percentage."""
    if ratio is not None and ratio > th.delay_ratio and demand * ratio < th.min_wait:
        return "low"
    return percent(ratio)


def env_text(env: Mapping[str, str] | None) -> str:
    """Thread variables as "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1" (recommended order first);
    "default" when none is set; "?" when the environment was unreadable."""
    if env is None:
        return "?"
    if not env:
        return "default"
    order = {name: i for i, name in enumerate(RECOMMENDED_VARS)}
    names = sorted(env, key=lambda n: (order.get(n, len(order)), n))
    return " ".join(f"{name}={env[name]}" for name in names)


# Why a signal is missing, for the names `unavailable` carries (see serialize's schema).
_UNAVAILABLE_WHY: Mapping[str, str] = {
    Signal.SCHEDSTAT: "run delay (no schedstat in this kernel)",
    Signal.PSI: "CPU pressure (no PSI in this kernel)",
    Signal.THREAD_STATE: "thread states",
    Signal.CONTEXT_SWITCHES: "context switches",
    Signal.POOLS: "pools",
    Signal.THREAD_ENV: "thread variables",
    Signal.PROCESSES: "processes of the tree (hidden by /proc's hidepid, or refused)",
    # Three causes leave it unknown (`probe.processcache`), and the name does not say which: each
    # is stated, since "needs root" is false of a process whose reads oversub abandoned.
    Signal.LIVE_POOLS: "live pool sizes (thread variables stand in): a process's memory was "
    "refused (reading it needs root or being its ancestor, as `oversub check -- CMD` is), or a "
    "read of its memory or files did not return and oversub reads nothing of it any more (nor "
    "of any process once several have not), or a library file it maps could not be read safely "
    "(replaced, not a regular file, malformed, over a bound, or on FUSE or a network file "
    "system)",
}
_DENIED_WHY = (
    " (another user's process: run as that user or root; or one never read before oversub "
    "abandoned a read of it)"
)


def unavailable_text(names: tuple[str, ...]) -> str:
    """ "run delay (no schedstat in this kernel), pools and thread variables (another user's
    process: run as that user or root)": what is missing and why, so "?" in a table is not
    a mystery."""
    # The sampler names both when refused; "pools" alone is the no-/proc fallback's.
    refused = set(DENIED) <= set(names)
    parts = [_UNAVAILABLE_WHY.get(n, n) for n in names if not (refused and n in DENIED)]
    if refused:
        denied = " and ".join(_UNAVAILABLE_WHY[n] for n in DENIED)
        parts.append(denied + _DENIED_WHY)
    return ", ".join(parts)


def finding_line(f: Finding) -> str:
    """ "[critical] oversubscribed-pools: message" (one line, no fix)."""
    return f"[{f.severity.value}] {f.rule}: {f.message}"


def host_phrases(h: HostRates) -> list[str]:
    """The host context that is known, one phrase each; unknown signals are left out rather
    than printed as "-", since most hosts lack one or two of them."""
    out = []
    if h.outside_cpus is not None:
        out.append(f"outside the tree {h.outside_cpus:.2f} CPUs")
    if h.steal_cpus is not None:
        out.append(f"steal {h.steal_cpus:.2f} CPUs")
    if h.psi_some is not None:
        out.append(f"PSI some {percent(h.psi_some)}")
    if h.throttled_ratio is not None:
        seconds = "" if h.throttled_s is None else f" ({h.throttled_s:.2f} s)"
        out.append(f"throttled {percent(h.throttled_ratio)} of periods{seconds}")
    return out


def totals_line(t: Totals, vcpus: int, th: Thresholds | None = None) -> str:
    """The tree in one line: processes, threads, CPU, demand against N, delay, switches.

    A delay ratio below the `min-wait` floor of `th` is called low, with the waiting behind
    it, rather than shown as an alarming percentage of almost nothing."""
    th = th if th is not None else Thresholds()
    delay = f"run delay {percent(t.run_delay_ratio)}"
    if delay_text(t.run_delay_ratio, t.demand, th) == "low":
        waited = t.demand * (t.run_delay_ratio or 0.0)
        delay = f"run delay low ({waited:.2f} CPU-s/s waited, below --min-wait {th.min_wait:g})"
    per_cpu = (
        ""
        if t.involuntary_ctx_per_cpu_s is None
        else f", {t.involuntary_ctx_per_cpu_s:.0f} involuntary switches per CPU-second"
    )
    return (
        f"{count(t.processes, 'process')}, "
        f"{count(t.threads, 'thread')} ({t.active_threads} active), "
        f"{pool_threads_phrase(t)}, "
        f"CPU {t.cpu_percent:.0f}%, demand {t.demand:.2f} runnable threads on N = {vcpus}, "
        f"{delay}{per_cpu}"
    )


def live_pools_line(processes: Iterable[ProcessSummary], vcpus: int) -> str | None:
    """ "OpenBLAS 1 thread in pids 11, 12 (set in code)": live pool sizes read from memory,
    grouped; "set in code" where the size differs from what the process's environment asks
    for (its variable, else all N CPUs). None when none was read."""
    groups: dict[tuple[str, int, bool], list[int]] = {}
    for p in processes:
        for key, value in (p.live_pools or {}).items():
            ctl = controlling_value(key, p.thread_env or {})
            asked = (first_level(ctl[1]) if ctl else None) or vcpus
            in_code = p.thread_env is not None and value != asked
            groups.setdefault((key, value, in_code), []).append(p.pid)
    if not groups:
        return None
    parts = []
    for (key, value, in_code), pids in sorted(groups.items()):
        noun = "thread" if value == 1 else "threads"
        who = ("pid " if len(pids) == 1 else "pids ") + ", ".join(str(p) for p in sorted(pids))
        how = " (set in code)" if in_code else ""
        parts.append(f"{POOLS_BY_KEY[key].label} {value} {noun} in {who}{how}")
    return "; ".join(parts)


def pool_threads_phrase(t: Totals) -> str:
    """ "multi-thread native pools of 4 threads in 2 processes" (or "none")."""
    if not t.pool_processes:
        return "no multi-thread native pool"
    procs = "process" if t.pool_processes == 1 else "processes"
    return f"multi-thread native pools of {t.pool_threads} threads in {t.pool_processes} {procs}"
