"""The names oversub writes into its JSON and accepts as flag values: string enums.

Each member's value is the exact string of the public interface (JSON values, flag values,
`[tool.oversub]` values), so it may never change; the member name is what code uses. A
member is a `str` (it compares equal to its value, and `json` writes the value), and
`str()` and f-strings give the value on every supported Python (3.10 has no `StrEnum`).

Rule ids live in `oversub.core.rules` with their catalogue; output formats in `oversub.render`.
Imports nothing of oversub: everything else may import it.
"""

from __future__ import annotations

import enum


class Name(str, enum.Enum):
    """A public string: `str(member)` and `f"{member}"` are its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Verdict(Name):
    """Overall verdict, ordered from worst to best by `rank`."""

    OVERSUBSCRIBED = "oversubscribed"
    STARVED = "starved"
    AT_RISK = "at-risk"
    OK = "ok"

    @property
    def rank(self) -> int:
        """Higher is worse: ok 0, at-risk 1, starved 2, oversubscribed 3."""
        return _RANK[self.value]


_RANK = {"ok": 0, "at-risk": 1, "starved": 2, "oversubscribed": 3}


class FailOn(Name):
    """What fails `check` and `merge` (`--fail-on`): decided in `analysis.policy`
    (docs/cli.md, `--fail-on`)."""

    COSTLY = "costly"
    """A judged run with a finding of severity critical: what costs multiples (spinning
    pools that share CPUs, a certain fork-after-OpenMP hang, a plan of multi-thread teams
    that share CPUs). The default."""
    OVERSUBSCRIBED = "oversubscribed"
    """The verdict oversubscribed: any oversubscription, cheap or not."""
    STARVED = "starved"
    """The verdict starved or worse."""
    AT_RISK = "at-risk"
    """Any verdict but ok."""

    @property
    def verdict(self) -> Verdict | None:
        """The verdict at or above which the run fails; None for `costly`, which fails on
        severity instead."""
        return None if self is FailOn.COSTLY else Verdict(self.value)


class Severity(Name):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is worse: info 0, warning 1, critical 2."""
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


class Signal(Name):
    """A signal that was not measured: the values of `unavailable` in every JSON output.

    Two spellings, both public and kept: a kernel facility that is missing is named with a
    hyphen ("thread-state"), and a field of the process objects whose value is unknown is
    named by its JSON key, with an underscore ("thread_env", "live_pools")."""

    SCHEDSTAT = "schedstat"
    """Run delay: no /proc/PID/task/TID/schedstat (kernel without CONFIG_SCHED_INFO)."""
    PSI = "psi"
    """CPU pressure: no /proc/pressure/cpu (kernel without PSI, or booted with psi=0)."""
    THREAD_STATE = "thread-state"
    """Thread states (R, S, ...): no /proc (the psutil fallback)."""
    CONTEXT_SWITCHES = "context-switches"
    """Context switches: no /proc (the psutil fallback)."""
    POOLS = "pools"
    """Mapped pool libraries: /proc/PID/maps refused (another user's process) or no /proc."""
    THREAD_ENV = "thread_env"
    """Thread variables: /proc/PID/environ refused (another user's process)."""
    LIVE_POOLS = "live_pools"
    """Live pool sizes: the process's memory may not be read (not root, not its ancestor), or
    a pool library it maps could not be read safely (docs/security.md)."""
    PROCESSES = "processes"
    """Processes of the tree that could not be read at all: hidden by a /proc mounted with
    `hidepid` (another user's, e.g. a setuid child), or their task directory refused. The
    tree was not seen whole: the run cannot be judged ok (`analysis.summary`)."""


DENIED: tuple[Signal, ...] = (Signal.POOLS, Signal.THREAD_ENV)
"""What a refused maps or environ (another user's process) leaves unknown: named together,
so that renderers can say why rather than only "unknown"."""


class WaitKind(Name):
    """What a single-thread sleeping process with OpenMP mapped is blocked in
    (`oversub.probe.waits`)."""

    FUTEX_PRIVATE = "futex-private"
    """A private futex wait without timeout: nothing in a one-thread process can wake it."""
    FUTEX = "futex"
    READ = "read"
    OTHER = "other"


class CheckMode(Name):
    """`oversub check`'s three ways to run."""

    COMMAND = "command"
    """`check -- CMD ARGS...`: start CMD and sample its whole tree."""
    PID = "pid"
    """`check --pid PID`: attach to a running tree."""
    STATIC = "static"
    """`check --procs M --threads T`: judge a plan, sample nothing."""


class TargetKind(Name):
    """What a command follows (`targets.Target`); the `kind` of a target in node mode."""

    TREE = "tree"
    """A process tree: a pid and its descendants (`watch PID`, `check`, `serve --pid`)."""
    CGROUP = "cgroup"
    """Every process of a cgroup and of the cgroups below it (`--cgroup`, `--all`'s rows)."""
    NODE = "node"
    """The whole node (`--all`): every cgroup that holds load, and the node's totals."""


class Shell(Name):
    """Shells `oversub completion` writes a script for."""

    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


class WorkerRole:
    """What kind of worker a process is (`worker_role`): an episode's `role` in JSON
    (`analysis.nesting`) and a process's label in every table (`render.phrases`). Plain
    strings, not a `Name`: they are read back from recordings and compared as such."""

    XDIST = "pytest-xdist worker"
    EXECNET = "execnet worker"
    LOKY = "loky worker"
    SPAWN = "spawn worker"
    FORKSERVER = "forkserver worker"
    FORKED = "forked worker"
    DATALOADER = "DataLoader worker"


_EXECNET_BOOT = "import sys;exec(eval(sys.stdin.readline()))"
"""What execnet's popen gateway runs (`python -u -c ...`): pytest-xdist's workers without
setproctitle."""
_XDIST_TITLE = ("[pytest-xdist", "pytest-xdist [")
"""The process titles pytest-xdist sets when setproctitle is installed."""
_HELPERS = ("resource_tracker", "multiprocessing.forkserver", "semaphore_tracker")
"""multiprocessing's and loky's helpers: processes of a pool, but no workers."""


def worker_role(name: str, cmdline: str, parent_cmdline: str | None) -> str | None:
    """What kind of worker a process is, from its name (comm), its command line and its
    parent's: one of `WorkerRole` ("pytest-xdist worker", "loky worker", "spawn worker",
    "forkserver worker", "DataLoader worker", "forked worker": a plain fork, the parent's
    command line), or None (not a worker oversub knows, or a pool's helper such as a
    resource tracker). It only chooses among fixed words: what a process shows is never
    returned."""
    forked = bool(cmdline) and cmdline == parent_cmdline
    if forked and "multiprocessing.forkserver" in cmdline:
        return WorkerRole.FORKSERVER  # forked by the forkserver, whose command line it keeps
    if name == "pt_data_worker":  # torch names a DataLoader worker's main thread so
        return WorkerRole.DATALOADER
    if forked:  # a plain fork keeps its parent's command line, whatever that says
        return WorkerRole.FORKED
    if cmdline.startswith(_XDIST_TITLE):
        return WorkerRole.XDIST
    if any(helper in cmdline for helper in _HELPERS):
        return None
    if _EXECNET_BOOT in cmdline:
        pytest = parent_cmdline is not None and ("pytest" in parent_cmdline)
        return WorkerRole.XDIST if pytest else WorkerRole.EXECNET
    if "popen_loky" in cmdline:
        return WorkerRole.LOKY
    if "multiprocessing.spawn" in cmdline or "--multiprocessing-fork" in cmdline:
        return WorkerRole.SPAWN
    return None


def values(enum_type: type[Name]) -> list[str]:
    """The public strings of an enum, in definition order (click choices, messages)."""
    return [member.value for member in enum_type]
