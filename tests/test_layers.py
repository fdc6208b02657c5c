"""The layers of docs/architecture.md, enforced: what each part of the package may import.

Every `import` and `from ... import` of every module is read (those inside functions too:
a lazy import is still a dependency), so a renderer that reaches into the probes, or a run
that reaches into the CLI, fails here rather than in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "oversub"

FOUNDATION = frozenset(
    {
        "oversub.names",
        "oversub.errors",
        "oversub.settings",
        "oversub.thresholds",
        "oversub.rules",
        "oversub.cpulist",
        "oversub.plural",
        "oversub.pools",
        "oversub.runtimes",
        "oversub.model",
        "oversub.samples",
        "oversub.results",
        "oversub.nodes",
        "oversub.timeline",
        "oversub.workload",
        "oversub.targets",
        "oversub.trials",
    }
)
"""Data types, vocabulary and catalogues: every layer may import them; they import only
each other and the standard library."""

ALLOWED: dict[str, frozenset[str]] = {
    "foundation": frozenset({"foundation"}),
    "probe": frozenset({"foundation", "probe"}),
    "analysis": frozenset({"foundation", "analysis"}),
    "render": frozenset({"foundation", "render"}),
    "run": frozenset({"foundation", "probe", "analysis", "run"}),
    "cli": frozenset({"foundation", "probe", "analysis", "render", "run", "cli", "package"}),
    "api": frozenset({"foundation", "probe", "analysis"}),
    "launch": frozenset({"foundation", "run", "cli"}),
    "package": frozenset({"foundation", "api"}),
    "main": frozenset({"launch"}),
}
"""Layer -> the layers its modules may import."""


def layer(module: str) -> str:
    if module in FOUNDATION:
        return "foundation"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("probe", "analysis", "render", "run", "cli"):
        return parts[1]
    named = {
        "oversub": "package",
        "oversub.api": "api",
        "oversub.launch": "launch",
        "oversub.__main__": "main",
    }
    if module in named:
        return named[module]
    raise AssertionError(f"{module} belongs to no layer: add it to docs/architecture.md")


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, path))
    return found


def imports(module: str, path: Path) -> set[str]:
    """The oversub modules `path` imports, by full name (packages as their own name)."""
    tree = ast.parse(path.read_text("utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py")
                is_package = PACKAGE.parent / Path(*candidate.split(".")) / "__init__.py"
                found.add(candidate if is_module.exists() or is_package.exists() else base)
    return {name for name in found if name == "oversub" or name.startswith("oversub.")}


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_module_imports_only_what_its_layer_may(module: str, path: Path) -> None:
    own = layer(module)
    wrong = sorted(
        name
        for name in imports(module, path)
        if name not in ("oversub.probe", "oversub.analysis", "oversub.render", "oversub.run")
        and name != "oversub.cli"
        and layer(name) not in ALLOWED[own]
    )
    assert wrong == [], f"{module} ({own}) imports {wrong}"


def test_foundation_modules_import_no_third_party_package() -> None:
    # Start-up and the Python API import them: stdlib only (click, rich, psutil stay out).
    for module, path in modules():
        if module not in FOUNDATION:
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for name in names:
                top = name.split(".")[0]
                assert top in ("oversub", "__future__") or top in _stdlib(), (module, name)


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names)


def test_no_module_is_over_400_lines() -> None:
    # docs/architecture.md: modules of 100-400 lines with names that say what they hold.
    long = {m: n for m, p in modules() if (n := len(p.read_text("utf-8").splitlines())) > 400}
    assert long == {}


def test_only_the_public_api_declares_all() -> None:
    # __all__ had drifted in internal modules (issue 13 item 8): it is kept where it is a
    # promise (the package and its Python API), and each name it lists exists.
    import importlib

    declaring = {m for m, p in modules() if "\n__all__ = " in p.read_text("utf-8")}
    assert declaring == {"oversub", "oversub.api"}
    for name in declaring:
        module = importlib.import_module(name)
        for public in module.__all__:
            assert getattr(module, public) is not None, (name, public)
