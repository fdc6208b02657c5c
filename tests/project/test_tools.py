"""The developer tools in tools/: how the Python matrix finds interpreters, how missing
system commands are named, and that the docs and CHANGELOG follow pyproject.toml."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.harness import PROJECT, ROOT, VERSION


def _load(name: str) -> ModuleType:
    """tools/NAME.py as a module (tools/ is a folder of scripts, not a package)."""
    qualified = f"oversub_tools_{name}"
    spec = importlib.util.spec_from_file_location(qualified, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


matrix = _load("matrix")
syspkg = _load("syspkg")

CLASSIFIED = [
    c.rsplit(" ", 1)[1]
    for c in PROJECT["classifiers"]
    if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
]
THIS = f"{sys.version_info.major}.{sys.version_info.minor}"


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def no_interpreters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty PATH directory and an empty pyenv root; returns the pyenv root."""
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    return tmp_path / "pyenv"


def test_matrix_versions_are_the_classifiers() -> None:
    assert CLASSIFIED == ["3.10", "3.11", "3.12", "3.13"]
    assert matrix.supported_versions() == CLASSIFIED


def test_pyenv_candidates_newest_patch_first(no_interpreters: Path) -> None:
    for name in ("3.12.1", "3.12.10", "3.12.2", "3.12.3t", "3.12-dev", "3.13.0"):
        _executable(no_interpreters / "versions" / name / "bin" / "python3.12", "")
    found = matrix._pyenv_candidates("3.12")
    assert [Path(p).parts[-3] for p in found] == ["3.12.10", "3.12.2", "3.12.1"]


def test_missing_version_says_where_it_looked(no_interpreters: Path) -> None:
    interpreter, why = matrix.find_interpreter("3.99")
    assert interpreter is None
    assert why == f"no python3.99 on PATH and none in {no_interpreters / 'versions'}"


def test_an_inactive_pyenv_shim_is_passed_over_for_pyenv_versions(
    tmp_path: Path, no_interpreters: Path
) -> None:
    shim = "#!/bin/sh\necho 'pyenv: python{v}: command not found' >&2\nexit 127\n"
    _executable(tmp_path / "bin" / f"python{THIS}", shim.format(v=THIS))
    interpreter, why = matrix.find_interpreter(THIS)
    assert interpreter is None and "does not run (pyenv: python" in why
    real = no_interpreters / "versions" / f"{THIS}.99" / "bin" / f"python{THIS}"
    real.parent.mkdir(parents=True)
    real.symlink_to(sys.executable)
    interpreter, why = matrix.find_interpreter(THIS)
    assert interpreter is not None, why
    assert interpreter.version.startswith(f"{THIS}.")


def test_an_interpreter_of_another_version_is_refused(
    tmp_path: Path, no_interpreters: Path
) -> None:
    (tmp_path / "bin" / "python3.99").symlink_to(sys.executable)
    interpreter, why = matrix.find_interpreter("3.99")
    assert interpreter is None
    assert f"is Python {THIS}." in why and "not 3.99" in why


def test_matrix_summary_names_what_ran_and_what_is_missing() -> None:
    found = matrix.Interpreter("3.10.13", "/opt/python3.10")
    lines = matrix.report(
        [
            matrix.Outcome("3.10", found, "passed", "900 passed in 140s", 12.0, 140.0),
            matrix.Outcome("3.14", None, "missing", "no python3.14 on PATH"),
        ]
    )
    text = "\n".join(lines)
    assert "3.10  passed: Python 3.10.13 (/opt/python3.10); 900 passed in 140s" in text
    assert "3.14  missing: no python3.14 on PATH" in text
    assert lines[-1].strip() == "ran: 3.10.13; missing: 3.14"


def test_syspkg_leaves_present_commands_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert syspkg.ensure({"sh": "dash"}, "test", install=True) == []
    assert capsys.readouterr().err == ""


def test_syspkg_names_what_it_may_not_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OVERSUB_NO_INSTALL", "1")
    missing = syspkg.ensure({"no-such-tool-x": "pkg-x", "sh": "dash"}, "make bench", True)
    assert missing == ["no-such-tool-x"]
    err = capsys.readouterr().err
    assert err == (
        "make bench: not found: no-such-tool-x (package pkg-x); "
        "not installed: OVERSUB_NO_INSTALL is set (apt-get install pkg-x)\n"
    )


def test_syspkg_check_only_never_installs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OVERSUB_NO_INSTALL", raising=False)
    monkeypatch.setattr(syspkg, "_apt_install", lambda pkgs: pytest.fail("apt-get ran"))
    assert syspkg.ensure({"no-such-tool-x": "pkg-x"}, "t", install=False) == ["no-such-tool-x"]
    assert "not asked to install (--check)" in capsys.readouterr().err


def test_syspkg_says_why_it_cannot_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OVERSUB_NO_INSTALL", raising=False)
    monkeypatch.setattr(syspkg.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(syspkg, "_apt_install", lambda pkgs: pytest.fail("apt-get ran"))
    assert syspkg.ensure({"no-such-tool-x": "pkg-x"}, "t", install=True) == ["no-such-tool-x"]
    expected = "not root" if shutil.which("apt-get") else "no apt-get on this system"
    assert f"not installed: {expected} (apt-get install pkg-x)" in capsys.readouterr().err


FAKE_APT = """#!/bin/sh
# Fails `install` until `update` ran (a fresh machine's empty package lists), then puts
# the asked-for command on PATH.
echo "$@" >> "{log}"
case "$1" in
  update) touch "{updated}" ;;
  install) [ -e "{updated}" ] || exit 100
           printf '#!/bin/sh\n' > "{bin}/no-such-tool-x"; chmod +x "{bin}/no-such-tool-x" ;;
esac
"""


def test_syspkg_installs_as_root_refreshing_package_lists_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    fake = FAKE_APT.format(log=log, updated=tmp_path / "updated", bin=bin_dir)
    _executable(bin_dir / "apt-get", fake)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("OVERSUB_NO_INSTALL", raising=False)
    monkeypatch.setattr(syspkg.os, "geteuid", lambda: 0)
    assert syspkg.ensure({"no-such-tool-x": "pkg-x"}, "make bench", install=True) == []
    assert log.read_text().splitlines() == [
        "install -y -q --no-install-recommends pkg-x",
        "update -q",
        "install -y -q --no-install-recommends pkg-x",
    ]
    assert "not found: no-such-tool-x (package pkg-x); installing with apt-get" in (
        capsys.readouterr().err
    )


def test_syspkg_require_fails_only_when_an_install_could_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `make test-rules` skips where promtool cannot be installed, never where apt-get broke.
    _executable(tmp_path / "bin" / "apt-get", "#!/bin/sh\nexit 100\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("OVERSUB_NO_INSTALL", raising=False)
    monkeypatch.setattr(syspkg.os, "geteuid", lambda: 0)
    wanted = ["--for", "make test-rules", "no-such-tool-x=pkg-x"]
    monkeypatch.setattr(sys, "argv", ["syspkg.py", "--require", *wanted])
    assert syspkg.main() == 1
    err = capsys.readouterr().err
    assert "make test-rules: still missing after apt-get: no-such-tool-x" in err
    assert "make test-rules: failed: no-such-tool-x could be installed, but apt-get did not" in err
    monkeypatch.setattr(sys, "argv", ["syspkg.py", *wanted])
    assert syspkg.main() == 0  # without --require a missing tool is a gap, not a failure
    monkeypatch.setenv("OVERSUB_NO_INSTALL", "1")
    monkeypatch.setattr(sys, "argv", ["syspkg.py", "--require", *wanted])
    assert syspkg.main() == 0
    assert "not installed: OVERSUB_NO_INSTALL is set" in capsys.readouterr().err


def test_docs_state_the_supported_versions_and_the_readme_links_the_changelog() -> None:
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = cli.split("## Supported Python versions", 1)[1]
    listed = ", ".join(CLASSIFIED[:-1]) + f" and {CLASSIFIED[-1]}"
    assert section.lstrip().startswith(listed), section[:200]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "[CHANGELOG.md](CHANGELOG.md)" in readme
    assert "## Versioning" in (ROOT / "docs" / "development.md").read_text(encoding="utf-8")


def test_changelog_has_unreleased_and_the_current_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", changelog, re.MULTILINE)
    assert headings[0] == "Unreleased"
    dated = re.compile(rf"{re.escape(VERSION)} - \d{{4}}-\d{{2}}-\d{{2}}")
    assert any(dated.fullmatch(h) for h in headings), headings
    for block in re.split(r"^## ", changelog, flags=re.MULTILINE)[1:]:
        kinds = re.findall(r"^### (.+)$", block, re.MULTILINE)
        assert set(kinds) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


# --------------------------------------------------------------------------- slurm_check


def test_slurm_check_finds_the_recipes_of_docs_clusters() -> None:
    """`make test-slurm` runs docs/clusters.md's scripts as written: each batch script has
    one `srun` line and its fix block, and the fix goes in before that line."""
    check = _load("slurm_check")
    page = (ROOT / "docs" / "clusters.md").read_text()
    for needle in ("python train.py", "torchrun"):
        script, fix = check.recipe(page, needle)
        assert script.startswith("#!/bin/sh\n#SBATCH ")
        assert fix.startswith('eval "$(oversub recommend ')
        fixed = check.with_fix(script, fix)
        assert fixed.index(fix) < fixed.index("\nsrun ") + 1
        assert fixed.replace(fix, "") == script
    (running,) = [b for b in check.blocks(page) if "--overlap" in b and "oversub check --pid" in b]
    assert "--duration 60" in running


def test_slurm_check_reads_concatenated_json() -> None:
    check = _load("slurm_check")
    assert check.json_docs('{"a": 1}\n{"a": 2}\n') == [{"a": 1}, {"a": 2}]
    assert check.json_docs("") == []
