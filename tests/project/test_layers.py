"""The house, enforced: the layers of docs/architecture.md and what each may import, one
package for the foundation, no import cycle, no private name used across modules, no file
name used twice, and the module list of docs/architecture.md equal to the tree.

Every `import` and `from ... import` of every module is read (those inside functions and
under TYPE_CHECKING too: a lazy import is still a dependency), so a renderer that reaches
into the probes, or a run that reaches into the CLI, fails here rather than in review.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "oversub"

FEATURE_LAYERS: dict[str, str] = {
    "oversub.recording": "render",
    "oversub.recording.types": "foundation",
    "oversub.recording.format": "analysis",
    "oversub.recording.replay": "analysis",
    "oversub.recording.compare": "analysis",
    "oversub.tuning": "render",
    "oversub.tuning.trials": "foundation",
    "oversub.tuning.advice": "analysis",
    "oversub.tuning.candidates": "analysis",
    "oversub.tuning.schedule": "analysis",
    "oversub.tuning.stats": "analysis",
    "oversub.tuning.ranking": "analysis",
}
"""A feature folder holds the pure halves of one feature (its command-line half is in cli/);
each of its modules keeps its layer, the rest are render (the folder's default)."""

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

FOLDER_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"core", "hook"}),
    frozenset({"probe", "analysis", "render"}),
    frozenset({"recording", "tuning"}),
    frozenset({"run"}),
    frozenset({"api"}),
    frozenset({"package"}),
    frozenset({"cli"}),
    frozenset({"launch"}),
    frozenset({"main"}),
)
"""The top-level folders (and the modules at the top) from the bottom up: an import between two
of them goes down, never up nor sideways. Each feature folder sits on the layers it uses."""

HOOK_PACKAGE = "_oversub_hook"
"""The hook's package (oversub/hook/_oversub_hook/), imported by this bare name."""

TOP_LEVEL = {"oversub", "oversub.api", "oversub.auto", "oversub.launch", "oversub.__main__"}
"""The only modules at the package's top: the foundation lives in oversub/core/."""


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("core", "hook"):  # hook/: stdlib only, standalone
        return "foundation"
    if module in FEATURE_LAYERS:
        return FEATURE_LAYERS[module]
    if len(parts) >= 2 and parts[1] in ("recording", "tuning"):
        return "render"
    if len(parts) >= 2 and parts[1] in ("probe", "analysis", "render", "run", "cli"):
        return parts[1]
    named = {
        "oversub": "package",
        "oversub.api": "api",
        "oversub.auto": "api",
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


MODULES = dict(modules())
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def imports(module: str, path: Path) -> set[str]:
    """The oversub modules `path` imports, by full name (a package's own name only when
    the package itself, not a module of it, is what is imported)."""
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
                found.add(candidate if candidate in MODULES else base)
    return {name for name in found if name == "oversub" or name.startswith("oversub.")}


@pytest.mark.parametrize(("module", "path"), modules(), ids=[m for m, _ in modules()])
def test_module_imports_only_what_its_layer_may(module: str, path: Path) -> None:
    own = layer(module)
    wrong = sorted(
        name
        for name in imports(module, path)
        if not (name in PACKAGES and name != "oversub") and layer(name) not in ALLOWED[own]
    )
    assert wrong == [], f"{module} ({own}) imports {wrong}"


def folder(module: str) -> str:
    """The top-level folder of `module` (its name in FOLDER_LEVELS for a top module)."""
    top = {"oversub": "package", "oversub.auto": "api", "oversub.__main__": "main"}
    if module in top or module in TOP_LEVEL:
        return top.get(module, module.rsplit(".", 1)[-1])
    return module.split(".")[1]


def imports_up() -> list[str]:
    """Every import from one top-level folder into another that is not below it."""
    level = {name: i for i, names in enumerate(FOLDER_LEVELS) for name in names}
    return sorted(
        f"{module} -> {name}"
        for module, path in MODULES.items()
        for name in imports(module, path)
        if folder(name) != folder(module) and level[folder(name)] >= level[folder(module)]
    )


def test_folders_import_only_the_folders_below_them() -> None:
    """The folder plan holds as the module plan does: `recording/` and `tuning/` import
    neither `cli/` nor `run/`, and `render/` none of them (packages count here too)."""
    assert imports_up() == []


def test_the_foundation_is_one_package_of_standard_library_modules() -> None:
    # Start-up and the Python API import them: stdlib only (click, rich, psutil stay out).
    import sys

    stdlib = frozenset(sys.stdlib_module_names)
    for module, path in modules():
        if layer(module) != "foundation":
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
                if module.startswith("oversub.hook."):
                    # The hook runs where oversub may not be installed: its own package (by
                    # the bare name the tree imports it by, or relatively), stdlib only.
                    assert top == HOOK_PACKAGE or top in stdlib, (module, name)
                    continue
                assert top in ("oversub", "__future__") or top in stdlib, (module, name)
    top = {m for m in MODULES if m.count(".") == 1 and m not in PACKAGES} | {"oversub"}
    assert top == TOP_LEVEL, sorted(top - TOP_LEVEL)


DISPATCHERS = {"oversub.render", "oversub.recording", "oversub.tuning"}
"""Packages whose __init__ holds code (format enums and their dispatchers), not re-exports."""


def test_no_import_cycle() -> None:
    """Between modules (a package's __init__ that only re-exports is not a module of it)."""
    graph = {
        m: {n for n in imports(m, p) if n != m and n not in PACKAGES - DISPATCHERS}
        for m, p in MODULES.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_module_imports_another_modules_private_names() -> None:
    """What modules share is public (or it moves); tests use what the package shows too."""
    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("oversub"):
                found += [
                    f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


def test_file_names_say_what_they_hold_once() -> None:
    names = Counter(path.name for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    twice = {
        name: sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob(name))
        for name, n in names.items()
        if n > 1 and name != "command.py"
    }
    assert twice == {}


def test_tests_mirror_the_layers() -> None:
    """tests/unit/<layer>/, tests/system/ (real processes), tests/project/ (the repository),
    tests/support/ (harness, fake trees, builders): no test module anywhere else."""
    tests = ROOT / "tests"
    layers = {"core", "probe", "analysis", "recording", "tuning", "render", "run", "cli", "api"}
    for path in tests.rglob("test_*.py"):
        place = path.relative_to(tests).parts[:-1]
        assert place[:1] in (("system",), ("project",)) or (
            place[:1] == ("unit",) and len(place) == 2 and place[1] in layers
        ), path
    support = {p.name for p in (tests / "support").glob("*.py")} - {"__init__.py"}
    clashes = {name for name in support if (PACKAGE / "core" / name).exists()}
    assert clashes == set()


def _architecture_tree() -> set[str]:
    """The module paths named in docs/architecture.md's module tree (```-fenced)."""
    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    block = text.split("## The modules", 1)[1].split("```", 2)[1]
    found: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines():
        m = re.match(r"^(\s*)([\w]+(?:\.py|/))(?:\s|$)", line)
        if not m:
            continue
        depth = len(m.group(1))
        while folders and folders[-1][0] >= depth:
            folders.pop()
        name = m.group(2)
        prefix = "/".join(f.rstrip("/") for _, f in folders[1:])
        if name.endswith("/"):
            folders.append((depth, name))
        elif folders:
            found.add(f"{prefix}/{name}" if prefix else name)
    return found


def test_the_architecture_page_names_every_module_and_only_those() -> None:
    on_disk = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    documented = _architecture_tree()
    assert sorted(on_disk - documented) == [], "modules missing from docs/architecture.md"
    assert sorted(documented - on_disk) == [], (
        "docs/architecture.md names modules that do not exist"
    )
