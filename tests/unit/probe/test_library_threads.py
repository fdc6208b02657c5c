"""Threads of libraries, on fake processes laid out as glibc lays out real ones: the library
whose code started a thread owns it, catalogued or not; a vendored OpenMP team is the team
of the library that drives it; only the interpreter's code makes a Python thread."""

from __future__ import annotations

from pathlib import Path

from oversub.core.libraries import library_key
from tests.support.fake_threads import GOMP, PY, SITE
from tests.unit.probe.test_startroutine import CLONE3, START_THREAD, owners, process

TOKENIZERS = (0x88000, 0x90000, f"{SITE}/tokenizers/tokenizers.abi3.so")
ROWLESS = (0x88000, 0x90000, f"{SITE}/rowless/_native.abi3.so")
HOSTILE = (0x88000, 0x90000, f"{SITE}/evil name,\u202e/x.so")
VENDORED = (0x20000, 0x30000, f"{SITE}/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0")
XGB = (0x30000, 0x38000, f"{SITE}/xgboost/lib/libxgboost.so")
SKL = (0x38000, 0x40000, f"{SITE}/sklearn/utils/_openmp_helpers.cpython-311.so")
OTHER = (0x30000, 0x38000, f"{SITE}/otherpkg.libs/libgomp-e985bcbb.so.1.0.0")


def started(root: Path, mapped: tuple[int, int, str], *more: tuple[int, int, str]) -> str:
    """The owner of one running thread whose start routine is in `mapped`."""
    proc = process(root, mapped, *more)
    ret = mapped[0] + 0x40
    proc.call_site(ret)
    thread = proc.thread(101)
    proc.stack_top(101, (CLONE3, START_THREAD, ret))
    proc.flush()
    return owners(root, [thread])[101]


def test_a_catalogued_librarys_thread_is_its_rows(tmp_path: Path) -> None:
    assert started(tmp_path, TOKENIZERS) == "tokenizers"


def test_a_thread_of_a_library_without_a_row_is_that_librarys(tmp_path: Path) -> None:
    assert started(tmp_path, ROWLESS) == library_key(ROWLESS[2])


def test_a_hostile_path_gives_a_key_with_no_separator_nor_control(tmp_path: Path) -> None:
    key = started(tmp_path, HOSTILE)
    assert key.startswith("lib:") and key.isascii() and key.isprintable()
    assert not any(c in key for c in " ,\n")


def test_a_python_thread_is_the_interpreters_and_a_library_thread_is_not(tmp_path: Path) -> None:
    assert started(tmp_path, PY) == "python"
    assert started(tmp_path / "b", ROWLESS, PY) != "python"


def test_a_vendored_team_is_the_team_of_the_library_that_drives_it(tmp_path: Path) -> None:
    # XGBoost's process maps scikit-learn's copy of libgomp (imported first): XGBoost's team.
    assert started(tmp_path / "a", VENDORED, XGB, SKL) == "xgboost"
    assert started(tmp_path / "b", VENDORED, SKL) == "sklearn"
    # A package without a row that vendors libgomp: its own team, with OpenMP's knob.
    assert started(tmp_path / "c", OTHER) == "libgomp@otherpkg"
    # Debian's libgomp with nothing that drives it: the runtime's.
    assert started(tmp_path / "d", GOMP) == "libgomp"
