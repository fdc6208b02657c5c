"""Packaging: the version comes from the package metadata, and the sdist and the wheel hold
what they should (the wheel: the package alone; no tests, bench or build leftovers).

The sdist and wheel are built as `python -m build` builds them (the wheel from the sdist),
from a copy of what would ship (the files git tracks or would add: nothing gitignored, so
`make test-container`'s rootfs under build/, whose links point into the host's /usr, is
never walked), without network (`--no-isolation`: the dev extra pins `build` and
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

NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.py[co]",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".pytest_cache",
)
"""Left out of the copy where the tree is no git checkout (an unpacked sdist)."""


def shipped(root: Path) -> list[str] | None:
    """The regular files under `root` that would ship: tracked, or untracked and not ignored
    (`git ls-files --cached --others --exclude-standard`), as relative paths; a tracked file
    deleted from the working tree and a symbolic link are left out. None when `root` is no
    git checkout."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        return None
    names = {n for n in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if n}
    return sorted(n for n in names if not (root / n).is_symlink() and (root / n).is_file())


def copy_shipped(root: Path, dest: Path) -> None:
    """Copy what would ship from `root` to `dest` (everything but caches and build output
    when `root` is no git checkout)."""
    names = shipped(root)
    if names is None:
        shutil.copytree(root, dest, ignore=NOT_COPIED)
        return
    for name in names:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, dest / name)


_SHIPPED = shipped(ROOT)


def _files(directory: str) -> set[str]:
    """Files of ROOT/directory that would ship, as relative paths, caches left out."""
    if _SHIPPED is not None:
        return {n for n in _SHIPPED if n.startswith(f"{directory}/")}
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


# -- what would ship -----------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_copy_holds_what_would_ship_and_never_walks_ignored_build_output(
    tmp_path: Path,
) -> None:
    """`make test-container` leaves build/container-rootfs, whose links point into the host's
    /usr (dangling here): copying the tree followed them and failed."""
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "new.py").write_text("B = 2\n")  # not yet added: it ships once added
    (root / ".gitignore").write_text("build/\n*.log\n")
    (root / "run.log").write_text("ignored\n")
    (root / "build" / "rootfs").mkdir(parents=True)
    (root / "build" / "rootfs" / "lib").symlink_to("usr/lib")  # dangling, as in the rootfs
    (root / "build" / "rootfs" / "file").write_text("ignored\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", ".gitignore", "pkg/a.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    assert shipped(root) == [".gitignore", "pkg/a.py", "pkg/new.py"]
    copy_shipped(root, tmp_path / "copy")
    copied = sorted(
        p.relative_to(tmp_path / "copy").as_posix()
        for p in (tmp_path / "copy").rglob("*")
        if not p.is_dir()
    )
    assert copied == [".gitignore", "pkg/a.py", "pkg/new.py"]


def test_a_tree_that_is_no_git_checkout_is_copied_without_build_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no checkout above it
    root = tmp_path / "unpacked"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"")
    (root / "build" / "rootfs").mkdir(parents=True)
    (root / "build" / "rootfs" / "lib").symlink_to("usr/lib")
    assert shipped(root) is None
    copy_shipped(root, tmp_path / "copy")
    copied = sorted(
        p.relative_to(tmp_path / "copy").as_posix()
        for p in (tmp_path / "copy").rglob("*")
        if not p.is_dir()
    )
    assert copied == ["pkg/a.py"]


# -- sdist and wheel -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel built from a copy of what would ship (the tree itself is left
    untouched)."""
    pytest.importorskip("build", reason="the build package is not installed (dev extra)")
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    copy_shipped(ROOT, src)
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
