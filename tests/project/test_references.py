"""The map is true (issue 40): every dotted reference to oversub's code in the docstrings
(attribute docstrings too) and comments of the Python files (oversub/, tests/, tools/, bench/,
examples/) and in README.md, docs/*.md and bench/RESULTS.md names something that exists, as
test_layers.py checks the module list of docs/architecture.md against the tree; and that page
reads whole and places every module.

A reference is a dotted name whose first part is `oversub` or one of its top-level folders
and modules (`ROOTS`), written in backquotes or in plain text, and not itself the tail of a
longer name or path: `run.session.follow`, `probe.owners`, `oversub.cli.app`,
`core.names.Signal.PSI`. It resolves when its leading parts are a package or module of the
tree and the rest, read with `ast`, is a name the module defines (a function, class or
assignment at module level, or a name imported by a package's `__init__.py`), then an
attribute or method of that class, and so on. A file name looks like one and is not
(`run.ndjson`, `cli.md`, `launch.py`: the last part is a file suffix and the name does not
resolve), nor are the few names of `NOT_REFERENCES`. A path into the tree
(`run/session.py`, `cli/record/`, `tests/unit/run/test_one_loop.py`) is checked as well.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "oversub"

ROOTS = (
    "oversub",
    "core",
    "hook",
    "probe",
    "analysis",
    "render",
    "recording",
    "tuning",
    "run",
    "cli",
    "api",
    "auto",
    "launch",
    "_oversub_hook",
)
"""The first parts that make a dotted name a reference: the package, its folders and its
top-level modules (a test below keeps this equal to the tree), and the hook's package, which
the hook imports by its bare name."""

FILE_SUFFIXES = frozenset(
    {"py", "md", "ndjson", "json", "toml", "txt", "yml", "yaml", "xml", "prom", "png", "sh"}
    | {"log", "csv", "cfg", "ini"}
)
"""Suffixes that make an unresolved dotted name a file name (`run.ndjson`, `cli.md`). Not
`html` nor `svg`: they are modules too (`recording.html`, `recording.svg`), so a name
ending so is a reference unless it is one of `NOT_REFERENCES`."""

NOT_REFERENCES = frozenset({"run.html", "oversub.html", "oversub.merge"})
"""The only names written like references that are not: the HTML files of the examples
(`report ... -o run.html`) and the JUnit class name of merge's test cases."""

REFERENCE = re.compile(rf"(?<![\w.\-/\\])(?:{'|'.join(ROOTS)})(?:\.[A-Za-z_]\w*)+")
FOLDERS = ("core", "hook", "probe", "analysis", "render", "recording", "tuning", "run", "cli")
"""The package's folders, where a path into the tree starts (a test keeps this true)."""
PATH = re.compile(
    rf"(?<![\w.\-/\\])(?:(?:oversub/)?(?:{'|'.join(FOLDERS)})|tests|tools)/"
    r"(?:[a-z0-9_]+/)*(?:[a-z0-9_]+\.py\b)?"
)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "RESULTS.md"]
SOURCES = sorted(
    path
    for folder in ("oversub", "tests", "tools", "bench", "examples")
    for path in (ROOT / folder).rglob("*.py")
)


class Reference(NamedTuple):
    where: str  # file:line
    text: str


def docstrings_and_comments(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of every docstring and comment: a docstring is any string that
    stands as a statement (a module's, class's or function's, and an attribute's below it)."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            yield node.lineno, node.value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def texts() -> Iterator[tuple[Path, int, str]]:
    for path in SOURCES:
        for line, text in docstrings_and_comments(path.read_text("utf-8")):
            yield path, line, text
    for page in PAGES:
        yield page, 1, page.read_text("utf-8")


def dotted(text: str) -> Iterator[tuple[int, str]]:
    """(line offset, name) of every dotted reference in `text` (file names and
    `NOT_REFERENCES` left out)."""
    for match in REFERENCE.finditer(text):
        name = match.group(0)
        if name in NOT_REFERENCES:
            continue
        if name.rsplit(".", 1)[1] in FILE_SUFFIXES and not resolves(name):
            continue  # a file name: run.ndjson, cli.md
        yield text.count("\n", 0, match.start()), name


def paths(text: str) -> Iterator[tuple[int, str]]:
    for match in PATH.finditer(text):
        yield text.count("\n", 0, match.start()), match.group(0)


def _names(statements: list[ast.stmt], imported: bool) -> dict[str, ast.AST | None]:
    """The names `statements` bind at their own level (inside `if`, `try`, `with` too): their
    definitions (a class, to look into), and the imported names when `imported`."""
    found: dict[str, ast.AST | None] = {}
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                found.update((n.id, None) for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            if isinstance(node.target, ast.Name):
                found[node.target.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and imported:
            found.update(((a.asname or a.name).split(".")[0], None) for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                inner += handler.body
            found.update(_names(inner, imported))
    return found


def _members(cls: ast.ClassDef) -> dict[str, ast.AST | None]:
    """A class's attributes and methods: its body's names and what its methods set on self."""
    found = _names(cls.body, imported=False)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            found.setdefault(node.attr, None)
    return found


@cache
def _module_names(path: Path) -> dict[str, ast.AST | None]:
    return _names(ast.parse(path.read_text("utf-8")).body, imported=path.name == "__init__.py")


@cache
def resolves(name: str) -> bool:
    """Whether dotted `name` is a package, module or name of oversub's tree (see above)."""
    parts = name.split(".")
    if parts[0] == "oversub":
        parts = parts[1:]
    elif parts[0] == "_oversub_hook":
        parts = ["hook", *parts]
    folder, module = PACKAGE, PACKAGE / "__init__.py"
    while parts and folder.is_dir():
        if (folder / parts[0] / "__init__.py").is_file():
            folder = folder / parts[0]
            module = folder / "__init__.py"
        elif (folder / f"{parts[0]}.py").is_file():
            folder = module = folder / f"{parts[0]}.py"
        else:
            break
        parts = parts[1:]
    scope = _module_names(module)
    for i, part in enumerate(parts):
        if part not in scope:
            return False
        node = scope[part]
        if i < len(parts) - 1:
            if not isinstance(node, ast.ClassDef):
                return False
            scope = _members(node)
    return True


def path_exists(path: str) -> bool:
    if path.startswith(("tests/", "tools/")):
        return (ROOT / path).exists()
    return (PACKAGE / path.removeprefix("oversub/")).exists()


@cache
def references() -> tuple[list[Reference], list[Reference]]:
    """Every dotted reference and every path into the tree, with where it is written."""
    names, places = [], []
    for file, line, text in texts():
        where = file.relative_to(ROOT).as_posix()
        for offset, name in dotted(text):
            names.append(Reference(f"{where}:{line + offset}", name))
        for offset, path in paths(text):
            places.append(Reference(f"{where}:{line + offset}", path))
    return names, places


def test_the_roots_are_the_top_of_the_package() -> None:
    top = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    top |= {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert set(ROOTS) == {"oversub", "_oversub_hook", *top}
    assert set(FOLDERS) == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def test_a_reference_is_found_in_backquotes_and_plain_text_and_only_there() -> None:
    text = (
        "`run.session.follow` and run.node.attach(target); oversub.cli.app.\n"
        "`oversub.recommend`, core.names.Signal.PSI, run.ndjson, cli.md, python launch.py,\n"
        "`render.svg` (-o run.html)\n"
        'classname "oversub.merge", "run.gone", subprocess.run.x, https://api.github.com/x,\n'
        "my.probe.x, tests/unit/run/test_one_loop.py, cli/record/ and run/session.py"
    )
    assert [name for _, name in dotted(text)] == [
        "run.session.follow",
        "run.node.attach",
        "oversub.cli.app",
        "oversub.recommend",
        "core.names.Signal.PSI",
        "render.svg",
        "run.gone",
    ]
    assert [line for line, _ in dotted(text)] == [0, 0, 0, 1, 1, 2, 3]
    assert [path for _, path in paths(text)] == [
        "tests/unit/run/test_one_loop.py",
        "cli/record/",
        "run/session.py",
    ]


def test_a_reference_resolves_against_the_tree() -> None:
    for name in (
        "oversub",
        "oversub.recommend",
        "oversub.__main__",
        "probe",
        "probe.owners",
        "run.session.follow",
        "cli.app.main",
        "cli.check.runners",
        "core.names.Signal.PSI",  # a class attribute
        "probe.sampler.TreeSampler.tree",  # a method
        "core.settings.SETTINGS",  # an assignment
        "_oversub_hook.share",
    ):
        assert resolves(name), name
    for name in (
        "run.node.attach",  # a module that moved
        "run.session.nothing",  # a name the module does not define
        "core.settings.SETTINGS.keys",  # an attribute of a value, unknown
        "render.tune",
        "run.session.Path",  # imported, not defined, outside a package's __init__
    ):
        assert not resolves(name), name


def test_every_dotted_reference_names_what_exists() -> None:
    names, _ = references()
    assert len(names) > 300, f"only {len(names)} references found: is the pattern broken?"
    stale = [f"{ref.where}: {ref.text}" for ref in names if not resolves(ref.text)]
    assert stale == [], f"{len(stale)} of {len(names)} references name nothing:\n" + "\n".join(
        stale
    )


def test_every_path_into_the_tree_exists() -> None:
    _, places = references()
    assert len(places) > 200, f"only {len(places)} paths found: is the pattern broken?"
    stale = [f"{ref.where}: {ref.text}" for ref in places if not path_exists(ref.text)]
    assert stale == [], f"{len(stale)} of {len(places)} paths name nothing:\n" + "\n".join(stale)


ARCHITECTURE = ROOT / "docs" / "architecture.md"
TREE_ENTRY = re.compile(r"^\s*(\S+)\s*(.*)$")


def _tree_entries() -> list[tuple[str, str]]:
    """(name, description) of each line of docs/architecture.md's module tree."""
    block = ARCHITECTURE.read_text("utf-8").split("## The modules", 1)[1].split("```", 2)[1]
    return [
        (m.group(1), m.group(2))
        for line in block.splitlines()
        if line.strip() and (m := TREE_ENTRY.match(line))
    ]


def _balanced(text: str) -> bool:
    return text.count("`") % 2 == 0 and text.count("(") == text.count(")")


def test_the_module_tree_reads_whole() -> None:
    """One module a line, each with a description that is not cut off: no line ending in `;`
    or `,`, no list of names in place of one, brackets and backquotes closed."""
    broken = [
        f"{name} {text}"
        for name, text in _tree_entries()
        if not re.fullmatch(r"[\w.]+/?", name)
        or (name.endswith(".py") and not text)
        or text[:1] in {",", ";", ".", ":"}
        or text.rstrip()[-1:] in {",", ";", ":", "("}
        or not _balanced(text)
    ]
    assert broken == [], "\n".join(broken)


def test_the_architecture_page_reads_whole() -> None:
    """Outside the code blocks, every paragraph and table row ends where a sentence can, and
    has its backquotes and brackets closed."""
    text = re.sub(r"^```.*?^```", "", ARCHITECTURE.read_text("utf-8"), flags=re.M | re.S)
    blocks = [b for b in re.split(r"\n\s*\n|\n(?=\|)|\n(?=- )", text) if b.strip()]
    broken = [
        block.strip()[-60:]
        for block in blocks
        if not _balanced(block)
        or re.search(r"[;,:(]\s*\|?\s*$", block)
        or re.search(r"\s[;,]|;\s*[;.,)]", block)
    ]
    assert broken == [], "\n".join(broken)


def _layer_table() -> dict[str, str]:
    """docs/architecture.md's layer table: each folder, module or module group its first
    column names (`core/`, `recording/format`, `replay`, `api.py`) -> that row's layer."""
    rows = re.findall(r"^\| (.+?) \|", ARCHITECTURE.read_text("utf-8"), flags=re.M)
    placed: dict[str, str] = {}
    for cell in rows[1:]:  # after the header
        names = re.findall(r"`([^`]+)`", cell)
        row = cell.split(":", 1)[0] if not cell.startswith("`") else names[0]
        row = row.removesuffix("/").removesuffix(".py")
        folder = ""
        for name in names:
            if "/" in name.rstrip("/"):
                folder = name.split("/", 1)[0]
            elif not name.endswith(("/", ".py")) and folder:
                name = f"{folder}/{name}"
            placed[name.removesuffix(".py")] = row
    return placed


def test_the_layer_table_says_where_every_module_goes() -> None:
    """Every module is placed by the layer table, by its own name or its folder's (the most
    specific one named), in the row of the layer test_layers.py gives it."""
    from tests.project.test_layers import layer, modules

    table = _layer_table()
    wrong = []
    for module, path in modules():
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        names = [
            "/".join(parts),
            *("/".join(parts[:i]) + "/" for i in range(len(parts) - 1, 0, -1)),
        ]
        row = next((table[n] for n in names if n in table), None)
        if row != layer(module):
            wrong.append(f"{'/'.join(parts)}.py: in the {row} row, its layer is {layer(module)}")
    assert wrong == [], "\n".join(wrong)
