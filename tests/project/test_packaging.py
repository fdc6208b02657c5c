"""Packaging: the version comes from the package metadata, and the sdist and the wheel hold
what they should (the wheel: the package alone; no tests, bench or build leftovers).

The sdist and wheel are built as `python -m build` builds them (the wheel from the sdist),
from a copy of this tree, without network (`--no-isolation`: the dev extra pins `build` and
setuptools). `make test-dist` goes further: it installs both with pip and pipx.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest

import oversub
from tests.support.harness import PROJECT, ROOT, VERSION
from tests.support.harness import run_cli as run

CACHES = ("__pycache__", "*.pyc", "*.pyo")
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", "dist", ".mypy_cache", ".ruff_cache", ".hypothesis", ".pytest_cache"
)


def _files(directory: str) -> set[str]:
    """Files under ROOT/directory as relative paths, caches left out."""
    base = ROOT / directory
    return {
        p.relative_to(ROOT).as_posix()
        for p in base.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }


# -- version ------------------------------------------------------------------------------


def test_version_comes_from_the_installed_metadata() -> None:
    assert oversub.__version__ == importlib.metadata.version("oversub") == VERSION


def test_version_flag_prints_the_metadata_version(capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--version", "-V"):
        code, out, err = run([flag], capsys)
        assert (code, out, err) == (0, f"oversub, version {VERSION}\n", "")


def test_uninstalled_source_tree_says_its_version_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert oversub._installed_version() == "0+unknown"


@pytest.mark.parametrize(
    "argv",
    [
        ["recommend", "--procs", "2", "--cpus", "4", "--format", "env"],
        ["cpus", "--format", "json"],
    ],
)
def test_short_commands_do_not_read_the_metadata(argv: list[str]) -> None:
    """importlib.metadata costs as much as the rest of `recommend`: only --version pays it."""
    probe = (
        "import sys\n"
        "from oversub.cli.app import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(str('importlib.metadata' in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stderr.strip() == "False"


# -- sdist and wheel -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel built from a copy of this tree (the tree itself is left untouched)."""
    pytest.importorskip("build", reason="the build package is not installed (dev extra)")
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_COPIED)
    out = tmp / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_build_gives_one_sdist_and_one_pure_wheel(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == [
        f"oversub-{VERSION}-py3-none-any.whl",
        f"oversub-{VERSION}.tar.gz",
    ]


def test_wheel_holds_the_package_and_nothing_else(dist: Path) -> None:
    with zipfile.ZipFile(dist / f"oversub-{VERSION}-py3-none-any.whl") as wheel:
        names = set(wheel.namelist())
    info = f"oversub-{VERSION}.dist-info"
    metadata = {
        f"{info}/{name}"
        for name in (
            "METADATA",
            "WHEEL",
            "RECORD",
            "entry_points.txt",
            "top_level.txt",
            "licenses/LICENSE",
        )
    }
    package = {name for name in _files("oversub") if name.endswith((".py", "py.typed"))}
    assert "oversub/py.typed" in package  # type hints of the Python API reach its users
    assert names == package | metadata, {
        "unexpected": sorted(names - package - metadata),
        "missing": sorted((package | metadata) - names),
    }


def test_wheel_metadata_and_console_script(dist: Path) -> None:
    info = f"oversub-{VERSION}.dist-info"
    with zipfile.ZipFile(dist / f"oversub-{VERSION}-py3-none-any.whl") as wheel:
        meta = HeaderParser().parsestr(wheel.read(f"{info}/METADATA").decode())
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == "oversub" and meta["Version"] == VERSION
    assert meta["Requires-Python"] == PROJECT["requires-python"]
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("Classifier") == PROJECT["classifiers"]
    runtime = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert len(runtime) == len(PROJECT["dependencies"])
    assert "oversub = oversub.launch:main" in entry_points.splitlines()


def test_sdist_holds_package_tests_examples_docs_and_deploy_without_leftovers(dist: Path) -> None:
    top = f"oversub-{VERSION}"
    with tarfile.open(dist / f"{top}.tar.gz") as sdist:
        names = {m.name.removeprefix(f"{top}/") for m in sdist.getmembers() if m.isfile()}
    wanted = {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "PKG-INFO"}
    wanted |= _files("oversub") | _files("tests") | _files("examples") | _files("docs")
    wanted |= _files("deploy")
    assert wanted <= names, sorted(wanted - names)
    leftovers = [
        n
        for n in names
        if n.startswith((".", "build/", "dist/", "bench/", ".venv"))
        or "__pycache__" in n
        or n.endswith((".pyc", ".pyo"))
    ]
    assert not leftovers
