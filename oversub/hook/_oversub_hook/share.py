"""The hook's state in one process: its role, its share of the tree's CPUs, the managed
variables set to it, and what it did: its record in the run's directory, which `oversub run`
reads back at the end (`analysis.cured.parse_record`), and its one-line faults on stderr.

A process's share (docs/run.md, "The plan"): the plan's T (`--procs M`), or in the tree's
own count (`--procs auto` without a launcher) the root gets N and any other process its
parent's share divided among the processes the parent runs at once; a forked child and a
DataLoader worker get the worker plan (1 thread), and a process that starts workers gives
up one thread per live worker. It is decided once (`Hook.resolve`), at the first import of
a library, at a fork, or when a multiprocessing child's target starts, whichever comes first.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from . import procfs
from .planenv import PLAN_ENV

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

LOCK = threading.RLock()
"""Held while the share is decided and while the hook is installed."""
MAX_GENERATIONS = 64
"""Undecided ancestors followed at most between a process and its plan's writer."""
MAX_FAULTS = 20
"""Fault lines kept in a record (the last ones)."""
MAX_LINE = 300
"""Characters of a fault line at most (an exception's text is the library's)."""


class Hook:
    """The plan applied to this process: its role, its share and what it did."""

    def __init__(self, plan: dict[str, Any], source: str) -> None:
        self.plan = plan
        self.source = source
        self.n: int = plan["n"]
        self.cap: int | None = plan.get("t")
        self.workers: int = plan["w"]
        self.set_by_parent: dict[str, str] = dict(plan["set"])
        """The managed variables and the value oversub's plan put in them above this process."""
        self.expected: dict[str, str] = dict(self.set_by_parent)
        """The same, updated with what this process set itself."""
        self.dir: str | None = plan.get("dir")
        self.pid = os.getpid()
        self.role = "root" if os.getppid() == plan["top"] else "rank"
        if plan.get("role") == "worker":
            self.role = "worker"
        if procfs.is_helper(procfs.cmdline(self.pid)):
            self.role = "helper"
        self.budget: int | None = None
        self.threads: int | None = None
        self.siblings: int | None = None
        self.user: dict[str, str] = {}
        """Managed variables whose value is not the one oversub's plan set: the user's."""
        self.records: dict[str, dict[str, Any]] = {}
        self.faults: list[str] = []
        self.worker_pids: set[int] = set()
        self.forkserved = False
        """A child multiprocessing's forkserver forked: a copy of no computing process."""

    # ----------------------------------------------------------------- the share

    def resolve(self) -> int:
        """This process's threads, decided once (at the first library import, a fork or
        the start of a child), and the managed variables set to it."""
        if self.threads is not None:
            return self.threads
        with LOCK:  # two threads importing two libraries at once decide it once
            return self._decide()

    def _decide(self) -> int:
        if self.threads is not None:
            return self.threads
        if self.role in ("worker", "helper"):
            self.budget = 1
        elif self.cap is not None:
            self.budget = self.cap + self.workers
        elif self.role == "root":
            self.budget = self.n
        elif self.forkserved:
            self.budget = self._forkserver_budget()
        else:
            parent = os.getppid()
            self.siblings = self._sharing(self.pid, parent)
            self.budget = max(1, self._share_of(parent) // self.siblings)
        self.threads = self.own()
        self.export()
        self.record_variables()
        return self.threads

    def own(self) -> int:
        """This process's threads: its budget less its live workers, at most the plan's T
        for a main process."""
        assert self.budget is not None
        cap = self.cap if self.cap is not None and self.role in ("root", "rank") else self.budget
        return max(1, min(cap, self.budget - self._live_workers()))

    def _share_of(self, parent: int) -> int:
        """The share of `parent`, which this process divides with its siblings: the budget
        the plan's writer gave its children (`pb`, or N for the tree's root), divided at
        each generation between the writer and `parent` among the processes that share it,
        as each of those would have divided it had it decided its own share: a shell, a
        launcher or a Python process that imported no library decides none, and its
        children must not take its parent's whole share each.

        When the writer is not among the ancestors (an exec'd process inherits its own
        plan; a process whose parent died), the writer's budget, as it is."""
        top = self.plan["top"]
        writer = self.plan.get("pp") or top
        budget: int = self.plan.get("pb") or self.n
        chain: list[int] = []
        pid: int | None = parent
        while pid != writer:
            if pid is None or pid <= 1 or pid == top or len(chain) >= MAX_GENERATIONS:
                return budget
            chain.append(pid)
            pid = procfs.parent(pid)
        for link in reversed(chain):  # the tree's root gets all of N
            budget = self.n if writer == top else max(1, budget // self._sharing(link, writer))
            writer = link
        return budget

    def _sharing(self, pid: int, parent: int) -> int:
        """The processes `pid` shares its parent's share with: itself and every live child
        of `parent` that is neither a helper nor a forked copy of `parent` (a worker)."""
        mine = procfs.cmdline(parent)
        count = 1
        for other in procfs.children(parent):
            if other == pid:
                continue
            line = procfs.cmdline(other)
            if not line or procfs.is_helper(line) or line == mine or self._registered_worker(other):
                continue
            count += 1
        return count

    def _forkserver_budget(self) -> int:
        """The budget of a child multiprocessing's forkserver forked for the process that
        started the forkserver: that process's share, divided among the forkserver's live
        children that are not workers (forked copies of the forkserver all: no command line
        tells them apart)."""
        server = os.getppid()
        requester = procfs.parent(server)
        self.siblings = sum(
            1
            for pid in procfs.children(server)
            if pid == self.pid or not self._registered_worker(pid)
        )
        share = self._share_of(requester) if requester else self.plan.get("pb") or self.n
        return max(1, share // max(1, self.siblings))

    def _registered_worker(self, pid: int) -> bool:
        if self.dir is None:
            return False
        try:
            record = json.loads(procfs.read(os.path.join(self.dir, f"{pid}.json"), 65536))
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("role") in ("worker", "helper")

    def _live_workers(self) -> int:
        if self.role not in ("root", "rank"):
            return 0
        mine = procfs.cmdline(self.pid)
        live = 0
        for pid in procfs.children(self.pid):
            if pid in self.worker_pids or (procfs.cmdline(pid) == mine and mine):
                live += 1
        return live

    def export(self) -> None:
        """The managed variables at this process's share, for the libraries it loads from
        now on and for its children; the plan its children read."""
        value = str(self.threads)
        mine: dict[str, str] = {}
        for name, expected in self.expected.items():
            now = os.environ.get(name)
            if name in self.user or (now is not None and now != expected):
                self.user[name] = now or ""  # someone between oversub and here set it: theirs
                continue
            os.environ[name] = value
            self.expected[name] = value
            mine[name] = value
        child = dict(self.plan, set=mine, pb=self.budget, pp=self.pid)
        child.pop("role", None)
        os.environ[PLAN_ENV] = json.dumps(child, separators=(",", ":"))

    # ----------------------------------------------------------------- what it did

    def record_variables(self) -> None:
        """The variables this process set, as a record (they size what loads from now on)."""
        mine = [n for n in self.expected if n not in self.user]
        if mine:
            self.record("variables", f"{mine[0]} & co", self.threads, "sized")
        else:
            self.report()

    def record(self, runtime: str, knob: str, value: int | None, state: str, **extra: Any) -> None:
        """What was done to `runtime`'s pool: "sized", "kept" (the program's own setting)
        or "failed"; the record is written at once."""
        entry: dict[str, Any] = {"knob": knob, "value": value, "state": state}
        entry.update(extra)
        self.records[runtime] = entry
        self.report()

    def fault(self, what: str, exc: BaseException) -> None:
        """One line on stderr naming what could not be applied; the program goes on."""
        line = fault_line(what, exc)
        self.faults.append(line)
        say(f"oversub: {line}; the program goes on\n")
        self.report()

    def report(self) -> None:
        """This process's record in the run's directory."""
        if self.dir is None:
            return
        document = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "start": procfs.start_ticks(),
            "role": self.role,
            "budget": self.budget,
            "threads": self.threads,
            "siblings": self.siblings,
            "python": ".".join(str(v) for v in sys.version_info[:3]),
            "user_vars": self.user,
            "records": self.records,
            "faults": self.faults[-MAX_FAULTS:],
        }
        write_record(self.dir, document)


def safely(hook: Hook, what: str, action: Any) -> None:
    """`action()`; an exception is one fault line, never the program's end."""
    try:
        action()
    except Exception as exc:
        hook.fault(what, exc)


def write_record(directory: str, document: dict[str, Any]) -> None:
    """`document` as this process's record, PID.json in `directory`, written whole: a
    temporary file renamed over the last one. A directory that is gone (oversub ended) is
    no error: nobody reads it any more."""
    path = os.path.join(directory, f"{os.getpid()}.json")
    temporary = f"{path}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, separators=(",", ":"))
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError):
        pass


def fault_line(what: str, exc: BaseException) -> str:
    """`could not apply WHAT in pid P: ERROR`, printable and bounded."""
    line = f"could not apply {what} in pid {os.getpid()}: {type(exc).__name__}: {exc}"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)[:MAX_LINE]


def say(text: str) -> None:
    """`text` on stderr; a closed or broken stderr must not break the program."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:
        pass
