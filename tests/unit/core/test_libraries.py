"""The library of a shared object no row names, from its path (`core.libraries`), and the
owner attribution gives a thread whose code is there (`runtimes.owner_of_code`)."""

from __future__ import annotations

import json

import pytest

from oversub.core import runtimes
from oversub.core.libraries import (
    NAME_MAX,
    library_key,
    library_of,
    object_of,
    split_vendored,
)

SP = "/work/.venv/lib/python3.11/site-packages"


@pytest.mark.parametrize(
    ("path", "name", "vendored"),
    [
        (f"{SP}/tokenizers/tokenizers.abi3.so", "tokenizers", False),
        (f"{SP}/cv2/cv2.abi3.so", "cv2", False),
        (f"{SP}/cv2/python-3.11/cv2.cpython-311-x86_64-linux-gnu.so", "cv2", False),
        (f"{SP}/xgboost.libs/libgomp-a34b3233.so.1.0.0", "xgboost", True),
        (f"{SP}/scikit_learn.libs/libgomp-a34b3233.so.1.0.0", "scikit_learn", True),
        (f"{SP}/_cffi_backend.cpython-311-x86_64-linux-gnu.so", "_cffi_backend", False),
        ("/usr/lib/python3/dist-packages/cv2/cv2.so", "cv2", False),
        ("/usr/lib/x86_64-linux-gnu/libfoo.so.1", "libfoo", False),
        ("/opt/app/libmine.so", "libmine", False),
        ("/opt/app/bin/worker", "worker", False),
        # A directory named like a package root, but the object is not below it.
        ("/srv/site-packages", "site-packages", False),
    ],
)
def test_a_path_names_its_library(path: str, name: str, vendored: bool) -> None:
    assert library_of(path) == (name, vendored)


@pytest.mark.parametrize(
    "path",
    [
        f"{SP}/evil\nname, with: commas/x.so",
        f"{SP}/\x1b[31mred\x1b[0m/x.so",
        "/tmp/" + "a" * 5000 + ".so",
        f"{SP}/ünïcode/x.so",
        "/a b/lib\udcff.so",  # an undecodable byte as maps' reader keeps it
    ],
)
def test_hostile_paths_give_printable_names_and_safe_keys(path: str) -> None:
    name = library_of(path).name
    assert name and len(name) <= NAME_MAX
    assert all(c.isascii() and (c.isalnum() or c in "._+-") for c in name), name
    key = library_key(path)
    assert object_of(key) is not None  # well formed
    assert not any(c in key for c in ", \n\t\x1b@") and key.isascii() and key.isprintable()
    assert runtimes.label(key) == library_of(object_of(key) or "").name
    json.dumps(object_of(key))  # the JSON report's encoder takes it


def test_keys_that_are_not_well_formed_are_not_owners() -> None:
    for key in ("lib:", "lib:relative/x.so", "lib:/a b.so", "lib:/%zz", "libgomp@", "x@y"):
        assert key not in runtimes.RUNTIMES_BY_KEY, key
    assert library_key("/a b.so") in runtimes.RUNTIMES_BY_KEY
    assert "libgomp@xgboost" in runtimes.RUNTIMES_BY_KEY
    assert split_vendored("libgomp@xg boost") is None


def test_a_thread_in_a_library_without_a_row_is_that_librarys() -> None:
    key = runtimes.owner_of_code(f"{SP}/rowless/_native.abi3.so")
    assert key is not None and object_of(key) == f"{SP}/rowless/_native.abi3.so"
    row = runtimes.RUNTIMES_BY_KEY[key]
    assert (row.label, row.waits, row.variables, row.code) == ("rowless", "unknown", (), None)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (f"{SP}/tokenizers/tokenizers.abi3.so", "tokenizers"),
        (f"{SP}/cv2/cv2.abi3.so", "opencv"),
        (f"{SP}/xgboost/lib/libxgboost.so", "xgboost"),
        (f"{SP}/lightgbm/lib/lib_lightgbm.so", "lightgbm"),
        (f"{SP}/faiss/libfaiss.so", "faiss"),
    ],
)
def test_the_libraries_measured_have_rows(path: str, key: str) -> None:
    assert runtimes.owner_of_code(path) == key


XGB = f"{SP}/xgboost/lib/libxgboost.so"
SKL = f"{SP}/sklearn/ensemble/_hist_gradient_boosting/histogram.cpython-311.so"
LGB = f"{SP}/lightgbm/lib/lib_lightgbm.so"
FAISS = f"{SP}/faiss/_swigfaiss.abi3.so"
GOMP_SKL = f"{SP}/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0"
TORCH = f"{SP}/torch/lib/libtorch_cpu.so"


@pytest.mark.parametrize(
    ("mapped", "driver"),
    [
        # `import xgboost` imports scikit-learn, whose vendored libgomp then serves both.
        ((GOMP_SKL, SKL, XGB), "xgboost"),
        ((GOMP_SKL, SKL), "sklearn"),
        ((GOMP_SKL, SKL, LGB), "lightgbm"),
        ((FAISS,), "faiss"),
        ((XGB, LGB, SKL), None),  # two: not told apart
        ((XGB, TORCH), None),  # torch's team keeps its call
        ((GOMP_SKL,), None),
        ((f"/home/xgboost/{XGB.rsplit('/', 1)[-1]}",), None),  # not a package directory
    ],
)
def test_the_library_whose_openmp_team_a_process_runs(
    mapped: tuple[str, ...], driver: str | None
) -> None:
    assert runtimes.openmp_driver(mapped) == driver


def test_a_vendored_openmp_runtime_is_its_packages_team() -> None:
    key = runtimes.owner_of_code(f"{SP}/somepkg.libs/libgomp-a34b3233.so.1.0.0")
    assert key == "libgomp@somepkg"
    row = runtimes.RUNTIMES_BY_KEY[key]
    assert row.label == "somepkg's OpenMP team (libgomp)"
    assert (row.waits, row.variables) == ("spin", ("OMP_NUM_THREADS",))
    assert row.measured == ""  # another program's team's cost is not its cost
    # A vendored copy of a runtime that is no OpenMP runtime keeps its row.
    assert runtimes.owner_of_code(f"{SP}/numpy.libs/libscipy_openblas64_-ff651d7f.so") == (
        "openblas"
    )
    # Debian's, or torch's own copy (not a `.libs` vendoring): the runtime's.
    assert runtimes.owner_of_code("/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0") == "libgomp"
    assert runtimes.owner_of_code(f"{SP}/torch/lib/libgomp-a34b3233.so.1") == "libgomp"


def test_the_interpreter_the_program_and_the_c_library() -> None:
    assert runtimes.owner_of_code("/usr/bin/python3.11", "/usr/bin/python3.11") == "python"
    assert runtimes.owner_of_code("/opt/app/bin/server", "/opt/app/bin/server") == "program"
    assert runtimes.RUNTIMES_BY_KEY["program"].waits == "none"
    assert runtimes.owner_of_code("/usr/lib/x86_64-linux-gnu/libc.so.6") is None
    assert runtimes.owner_of_code("[anon:jit]") is None


def test_a_key_carries_the_variables_the_binary_names_as_candidates_only() -> None:
    from oversub.core.libraries import candidates_of

    key = library_key("/opt/lib/libpool.so", ("POOL_NUM_THREADS", "bad name", "X_THREADS"))
    assert candidates_of(key) == ("POOL_NUM_THREADS", "X_THREADS")
    assert object_of(key) == "/opt/lib/libpool.so" and runtimes.label(key) == "libpool"
    row = runtimes.RUNTIMES_BY_KEY[key]
    assert row.variables == () and row.code is None  # never a knob of its row
    for forged in (key + "+A+B+C", key.replace("X_THREADS", "x;rm"), key + "?Y_THREADS"):
        assert forged not in runtimes.RUNTIMES_BY_KEY, forged
