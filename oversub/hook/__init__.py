"""The start-up hook of `oversub run` and `import oversub.auto` (standard library only).

This directory goes first on PYTHONPATH in the tree `oversub run` starts, so its
`sitecustomize.py` runs at the start of every Python process there, oversub installed or
not, and loads the hook, the package `_oversub_hook` beside it. Nothing else may live here:
every module of this directory is importable by its bare name in those processes.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
"""The directory `oversub run` puts first on PYTHONPATH."""
PACKAGE = "_oversub_hook"
"""The hook's package, by the bare name every process of the tree imports it by."""


def load() -> ModuleType:
    """The hook's package as the processes of the tree have it (`_oversub_hook`, from
    DIRECTORY): one copy in a process, whether `oversub run` or `oversub.auto` loaded it."""
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None:
        return loaded
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec(PACKAGE, [DIRECTORY])
    if spec is None or spec.loader is None:
        raise ImportError(f"{PACKAGE} is missing from {DIRECTORY}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE]
        raise
    return module
