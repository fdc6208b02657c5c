"""oversub's start-up hook: sizes every thread pool of this Python process to its share.

`main` runs at the start of every Python process of `oversub run`'s tree, spawned,
forkserver or forked, from the plan in OVERSUB_RUN_PLAN (`oversub.hook` says how), then
the `sitecustomize` it shadows; `import oversub.auto` installs the same hook in-process
(`install`). Standard library only, and itself by relative imports. docs/run.md is the
reference; each module's docstring says its part (the list: docs/architecture.md).
"""

from __future__ import annotations

import os
import sys

from .children import watch_forks
from .importwatch import APPLIED, WATCHED, Finder, apply
from .planenv import PLAN_ENV, parse_plan
from .share import LOCK, Hook, safely, say

_hook: Hook | None = None

NAME = "_oversub_hook"
"""This package's name in every process of the tree (the hook's directory is on sys.path)."""


def install(plan: dict[str, object], source: str) -> Hook:
    """Apply `plan` to this process (once: a second call returns the hook in place)."""
    global _hook
    with LOCK:
        if _hook is not None:
            return _hook
        hook = Hook(plan, source)
        _hook = hook
        sys.meta_path.insert(0, Finder(hook))
        watch_forks(hook)
        if hook.role in ("root", "worker", "helper") or hook.cap is not None:
            hook.resolve()
        else:
            hook.report()
        for name in APPLIED:
            module = sys.modules.get(name)
            if module is not None:  # imported before the hook (oversub.auto late)
                safely(hook, f"the knobs of {name}", lambda m=module, n=name: apply(hook, n, m))
        if any(name in sys.modules for name in WATCHED):
            from .knobs import resize_loaded

            resize_loaded(hook, hook.resolve())
        return hook


def active() -> Hook | None:
    """The hook applied in this process, if any (oversub run's, or oversub.auto's)."""
    other = sys.modules.get(NAME)
    if other is not None and other is not sys.modules.get(__name__):
        return getattr(other, "_hook", None)
    return _hook


def chain() -> None:
    """Run the `sitecustomize` the hook shadows, as Python would have (its errors are
    reported by site.py as its own)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def main() -> None:
    """The hook of `oversub run`, installed from OVERSUB_RUN_PLAN (a plan that is not one is
    one line on stderr), then the shadowed `sitecustomize`."""
    text = os.environ.get(PLAN_ENV)
    if text:
        try:
            plan = parse_plan(text)
        except (ValueError, TypeError) as exc:
            say(f"oversub: ignoring {PLAN_ENV}: {exc}\n")
        else:
            try:
                install(plan, "oversub run")
            except Exception as exc:
                say(f"oversub: could not install the hook: {exc!r}\n")
    chain()
