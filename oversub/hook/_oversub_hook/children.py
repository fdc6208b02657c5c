"""The processes this one starts: forked children, multiprocessing's children and
DataLoader workers, and the threads their parent gives up for them.

- a forked child (`os.fork`, multiprocessing's `fork`) gets the worker plan, 1 thread, and
  its parent gives up a thread while it lives (`os.register_at_fork`);
- a DataLoader worker is recognised by its target whatever the start method: its parent
  starts it with the worker plan (`BaseProcess.start`) and gives up a thread for it, and it
  takes the worker plan in the child (`BaseProcess._bootstrap`);
- under `--procs M`, a process multiprocessing forked to run anything but a DataLoader
  worker is one of the plan's M processes: T threads, not the worker plan.
"""

from __future__ import annotations

import json
import os
import sys

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
    hook.export()
    hook.record_variables()
    _resize_loaded(hook, own)


def become_worker(hook: Hook) -> None:
    """The worker plan in this process (a forked child, a DataLoader worker): 1 thread."""
    if hook.role == "worker" and hook.threads == 1:
        return
    hook.role = "worker"
    hook.budget, hook.threads, hook.siblings = 1, 1, None
    hook.worker_pids = set()
    hook.export()
    hook.record_variables()
    _resize_loaded(hook, 1)


def become_rank(hook: Hook) -> None:
    """A forked child that is one of the plan's M processes: the plan's T threads."""
    assert hook.cap is not None
    hook.role = "rank"
    hook.budget = hook.cap + hook.workers
    hook.threads = hook.own()
    hook.export()
    hook.record_variables()
    _resize_loaded(hook, hook.threads)


def _resize_loaded(hook: Hook, n: int) -> None:
    """`knobs.resize_loaded`, loaded when first needed (a process that starts no child and
    imports no runtime never loads the knobs)."""
    from .knobs import resize_loaded

    resize_loaded(hook, n)


def watch_forks(hook: Hook) -> None:
    """The worker plan in every forked child, the parent's threads after each fork."""
    if not hasattr(os, "register_at_fork"):
        return

    def in_child() -> None:
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
        elif hook.role == "worker" and hook.cap is not None and hook.pid == os.getpid():
            # A process multiprocessing forked to run anything but a DataLoader worker is
            # one of the plan's M processes (`--procs M`): T threads, not the worker plan.
            safely(hook, "the plan's threads", lambda: become_rank(hook))
        return bootstrap(self, *args, **kwargs)

    started.__oversub_original__ = start  # type: ignore[attr-defined]
    bootstrapped.__oversub_original__ = bootstrap  # type: ignore[attr-defined]
    base.start = started
    base._bootstrap = bootstrapped


def _is_worker_target(process: Any) -> bool:
    target = getattr(process, "_target", None)
    return str(getattr(target, "__module__", "") or "").startswith(DATALOADER)
