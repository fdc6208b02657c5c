"""The imports the hook watches: a `sys.meta_path` finder that decides the process's share
before a watched library's own code runs (the library reads the thread variables then), and
applies that library's knobs after it.

It finds nothing itself: the other finders find the module, and the loader's `exec_module`
is wrapped. After the first import of each watched name the finder steps aside: nothing is
left but one set lookup per import.
"""

from __future__ import annotations

import sys

from .children import watch_multiprocessing
from .share import safely

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing costs every process 6 ms
    from typing import Any

    from .share import Hook

WATCHED: tuple[str, ...] = (
    "numpy",
    "scipy",
    "sklearn",
    "pandas",
    "torch",
    "onnxruntime",
    "pyarrow",
    "polars",
    "numexpr",
    "numba",
    "cv2",
    "duckdb",
    "tensorflow",
    "jax",
    "jaxlib",
    "xgboost",
    "lightgbm",
    "faiss",
)
"""Top-level modules whose first import decides this process's share: each loads a native
pool (or NumPy, which loads BLAS) that reads the thread variables when it loads."""

APPLIED: tuple[str, ...] = (
    "torch",
    "onnxruntime",
    "pyarrow",
    "cv2",
    "duckdb",
    "numba",
    "numexpr",
    "multiprocessing",
)
"""Modules the hook acts on once they have been imported: the runtimes of `knobs.APPLIERS`,
and multiprocessing (`children.watch_multiprocessing`)."""


def apply(hook: Hook, name: str, module: Any) -> None:
    """What the hook does once `name` (one of APPLIED) has been imported."""
    if name == "multiprocessing":
        watch_multiprocessing(hook, module)
        return
    from .knobs import APPLIERS  # loaded by the first process that imports a runtime

    APPLIERS[name](hook, module)


class Finder:
    """A sys.meta_path finder that runs the hook's applier after a watched module's own
    code, and decides the process's share before it. It finds nothing itself."""

    def __init__(self, hook: Hook) -> None:
        self.hook = hook
        self.pending = set(WATCHED) | set(APPLIED)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.pending:
            return None
        self.pending.discard(name)
        if name in WATCHED:
            safely(self.hook, "the process's share", self.hook.resolve)
        if name not in APPLIED:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec
        hook = self.hook

        def exec_and_apply(module: Any) -> None:
            exec_module(module)
            safely(hook, f"the knobs of {name}", lambda: apply(hook, name, module))

        try:  # noqa: SIM105 (contextlib costs every process 4 ms)
            loader.exec_module = exec_and_apply  # type: ignore[union-attr]
        except (AttributeError, TypeError):
            pass
        return spec
