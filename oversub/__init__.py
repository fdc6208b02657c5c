"""oversub: find CPU oversubscription in multi-process Python jobs and say how to fix it.

The Python API (`recommend`, `apply`, `worker_init_fn`, `Plan`) is loaded on first use, so
`import oversub` in a training script or DataLoader worker imports nothing else.
`__version__` is read from the installed package's metadata (pyproject.toml is its one
source) on first use: importlib.metadata costs more than the rest of a short command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Plan", "__version__", "apply", "recommend", "worker_init_fn"]

if TYPE_CHECKING:
    __version__: str
    from oversub.api import apply, recommend, worker_init_fn
    from oversub.core.model import Plan

# Public name -> module that defines it.
_LAZY: dict[str, str] = {
    "recommend": "oversub.api",
    "apply": "oversub.api",
    "worker_init_fn": "oversub.api",
    "Plan": "oversub.core.model",
}


def _installed_version() -> str:
    """The version recorded when oversub was installed (pip, pipx, or `pip install -e`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("oversub")
    except PackageNotFoundError:
        # Imported from a source tree that was never installed: there is no metadata, and
        # a number guessed here could be wrong, so say so (PEP 440 local version).
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _installed_version()
    else:
        module_name = _LAZY.get(name)
        if module_name is None:
            raise AttributeError(f"module 'oversub' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})
