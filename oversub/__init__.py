"""oversub: find CPU oversubscription in multi-process Python jobs and say how to fix it.

The Python API (`recommend`, `apply`, `worker_init_fn`, `Plan`) is loaded on first use, so
`import oversub` in a training script or DataLoader worker imports nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Plan", "__version__", "apply", "recommend", "worker_init_fn"]

if TYPE_CHECKING:
    from oversub.api import apply, recommend, worker_init_fn
    from oversub.model import Plan

# Public name -> module that defines it.
_LAZY: dict[str, str] = {
    "recommend": "oversub.api",
    "apply": "oversub.api",
    "worker_init_fn": "oversub.api",
    "Plan": "oversub.model",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'oversub' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
