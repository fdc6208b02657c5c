"""The hook's state in one process: its role, its share of the tree's CPUs, the managed
variables set to it, and what it did.

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

from . import procfs, records
from .planenv import PLAN_ENV

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

LOCK = threading.RLock()
"""Held while the share is decided and while the hook is installed."""


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
        else:
            parent = self.plan.get("pb") or self.n
            self.siblings = self._siblings()
            self.budget = max(1, parent // self.siblings)
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

    def _siblings(self) -> int:
        """The processes this one shares its parent's share with: itself and every live
        child of its parent that is neither a helper nor a forked copy of the parent (a
        worker)."""
        parent = os.getppid()
        mine = procfs.cmdline(parent)
        count = 1
        for pid in procfs.children(parent):
            if pid == self.pid:
                continue
            line = procfs.cmdline(pid)
            if not line or procfs.is_helper(line) or line == mine or self._registered_worker(pid):
                continue
            count += 1
        return count

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
        line = records.fault_line(what, exc)
        self.faults.append(line)
        records.say(f"oversub: {line}; the program goes on\n")
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
            "faults": self.faults[-records.MAX_FAULTS :],
        }
        records.write(self.dir, document)


def safely(hook: Hook, what: str, action: Any) -> None:
    """`action()`; an exception is one fault line, never the program's end."""
    try:
        action()
    except Exception as exc:
        hook.fault(what, exc)
