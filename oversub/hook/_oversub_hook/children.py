"""The processes this one starts: forked children, multiprocessing's children and
DataLoader workers, and the threads their parent gives up for them.

- a forked child (`os.fork`, multiprocessing's `fork`) gets the worker plan, 1 thread, and
  its parent gives up a thread while it lives (`os.register_at_fork`);
- a DataLoader worker is recognised by its target whatever the start method: its parent
  starts it with the worker plan (`BaseProcess.start`) and gives up a thread for it, and it
  takes the worker plan in the child (`BaseProcess._bootstrap`);
- under `--procs M`, a process multiprocessing forked to run anything but a DataLoader
  worker is one of the plan's M processes: T threads, not the worker plan; in the tree's
  own count, a child of multiprocessing's forkserver is one of the processes of the
  forkserver's parent, and decides its share at its first library import;
- a spawned multiprocessing child decides its share when its target starts, if no import
  decided it before.
"""

from __future__ import annotations

import json
import os
import sys

from . import procfs
from .planenv import PLAN_ENV
from .share import safely

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

    from .share import Hook

DATALOADER = "torch.utils.data"
"""The module of DataLoader's worker loop: a multiprocessing child running it is a worker."""


def regrow(hook: Hook) -> None:
    """After this process started or lost workers: its own threads, applied to what is
    loaded (a parent that forks DataLoader workers gives up one thread for each)."""
    if hook.threads is None or hook.budget is None:
        return
    own = hook.own()
    if own == hook.threads:
        return
    hook.threads = own
    _apply(hook, own)


def become_worker(hook: Hook) -> None:
    """The worker plan in this process (a forked child, a DataLoader worker): 1 thread."""
    if hook.role == "worker" and hook.threads == 1:
        return
    hook.role = "worker"
    hook.budget, hook.threads, hook.siblings = 1, 1, None
    hook.worker_pids = set()
    _apply(hook, 1)


def become_rank(hook: Hook) -> None:
    """A forked child that is one of the plan's M processes: the plan's T threads."""
    assert hook.cap is not None
    hook.role = "rank"
    hook.budget = hook.cap + hook.workers
    hook.threads = hook.own()
    _apply(hook, hook.threads)


def undecided(hook: Hook) -> None:
    """A forked child that is a rank whose share is not decided yet: it keeps the worker
    plan's variables until it decides (`Hook.resolve`)."""
    hook.role = "rank"
    hook.budget = hook.threads = hook.siblings = None
    hook.report()


def _apply(hook: Hook, n: int) -> None:
    """The process's `n` threads, just decided, in its variables, its record and the pools
    already loaded (`knobs.resize_loaded`, loaded when first needed: a process that starts
    no child and imports no runtime never loads the knobs)."""
    from .knobs import resize_loaded

    hook.export()
    hook.record_variables()
    resize_loaded(hook, n)


def watch_forks(hook: Hook) -> None:
    """The worker plan in every forked child, the parent's threads after each fork."""
    if not hasattr(os, "register_at_fork"):
        return

    def in_child() -> None:
        hook.forkserved = hook.role == "helper" and procfs.FORKSERVER in procfs.cmdline(hook.pid)
        hook.pid = os.getpid()
        hook.records = {k: v for k, v in hook.records.items() if v.get("state") == "kept"}
        hook.faults = []
        safely(hook, "the worker plan", lambda: become_worker(hook))

    def in_parent() -> None:
        if hook.threads is not None:
            safely(hook, "the parent's threads after a fork", lambda: regrow(hook))

    os.register_at_fork(after_in_child=in_child, after_in_parent=in_parent)


def watch_multiprocessing(hook: Hook, module: Any) -> None:
    """multiprocessing's children: a DataLoader worker gets the worker plan in the child
    (`_bootstrap`, every start method), and its parent gives up a thread for it (`start`)."""
    process = sys.modules.get("multiprocessing.process")
    base = getattr(process, "BaseProcess", None)
    if base is None or getattr(base.start, "__oversub_original__", None):
        return
    start, bootstrap = base.start, base._bootstrap

    def started(self: Any) -> Any:
        worker = _is_worker_target(self)
        if worker:
            self._oversub_worker = True
        saved = os.environ.get(PLAN_ENV)
        if worker and saved is not None:
            hook.resolve()
            os.environ[PLAN_ENV] = json.dumps(dict(json.loads(os.environ[PLAN_ENV]), role="worker"))
        try:
            return start(self)
        finally:
            if worker and saved is not None:
                os.environ[PLAN_ENV] = saved
            if worker and self.pid:
                hook.worker_pids.add(self.pid)
                safely(hook, "the parent's threads after starting a worker", lambda: regrow(hook))

    def bootstrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_oversub_worker", False) or _is_worker_target(self):
            safely(hook, "the worker plan", lambda: become_worker(hook))
        elif hook.pid != os.getpid():
            pass
        elif hook.role == "worker" and hook.cap is not None:
            # A process multiprocessing forked to run anything but a DataLoader worker is
            # one of the plan's M processes (`--procs M`): T threads, not the worker plan.
            safely(hook, "the plan's threads", lambda: become_rank(hook))
        elif hook.role == "worker" and hook.forkserved:
            # A child of the forkserver is a copy of no computing process: it is one of the
            # processes the forkserver's parent runs. It decides its share at its first
            # library import, once its siblings are there too (the forkserver forks each as
            # it is asked: the first would count alone now); until then the worker plan.
            undecided(hook)
        elif hook.threads is None:
            # A child's share is decided when its target starts, if no import decided it
            # before: a target may size a pool from its variables without importing a
            # library the hook watches (oversub stress's team; a plain-Python pool worker).
            safely(hook, "the process's share", hook.resolve)
        return bootstrap(self, *args, **kwargs)

    started.__oversub_original__ = start  # type: ignore[attr-defined]
    bootstrapped.__oversub_original__ = bootstrap  # type: ignore[attr-defined]
    base.start = started
    base._bootstrap = bootstrapped


def _is_worker_target(process: Any) -> bool:
    target = getattr(process, "_target", None)
    return str(getattr(target, "__module__", "") or "").startswith(DATALOADER)
