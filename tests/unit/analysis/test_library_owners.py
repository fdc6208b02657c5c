"""Busy threads of a library oversub has no row for (`runtimes.owner_of_code`): the finding
names the library (or the package whose vendored OpenMP team it is), never "the
application's own threads" nor dask's, joblib's or an executor's knob, and gives the levers
that work for any runtime; the JSON names the object (issue 41, item 1 and 3)."""

from __future__ import annotations

import json

from oversub.core.libraries import library_key
from oversub.core.names import Severity
from oversub.core.results import OwnerCount
from oversub.core.runtimes import RUNTIMES_BY_KEY
from oversub.render.serialize import interval_dict
from tests.unit.analysis.test_causes import finding_of, oc, tree, worker

SP = "/venv/lib/python3.11/site-packages"
ROWLESS = library_key(f"{SP}/rowless/_native.abi3.so")
APP_WORDS = ("application's own", "dask", "ThreadPoolExecutor", "joblib", "threads_per_worker")


def rowless(owner: str, busy: int = 2) -> tuple[OwnerCount, ...]:
    return (oc(owner, busy, busy), oc("python", 1, 0, ran=1))


def test_a_library_without_a_row_is_named_with_the_levers_of_any_runtime() -> None:
    f, _ = finding_of(tree(worker(11, rowless(ROWLESS)), worker(12, rowless(ROWLESS))))
    assert "belong to rowless" in f.message, f.message
    assert "no row for" in f.message
    for words in APP_WORDS:
        assert words not in f.message and words not in f.fix, (words, f.message, f.fix)
    assert "rowless in 2 processes (pids 11, 12)" in f.fix
    assert "run at most 2 busy processes at a time" in f.fix
    assert "taskset -c CPUS CMD" in f.fix and "os.sched_setaffinity(0, CPUS)" in f.fix
    assert "OMP_NUM_THREADS" not in f.fix and "threadpoolctl" not in f.fix
    # What it costs is not known from a row: never the critical of a spinning runtime.
    assert f.severity is Severity.WARNING
    assert "rowless: 2 busy" in str(f.evidence["owners"])


def test_the_json_names_the_library_and_its_object_escaped() -> None:
    hostile = library_key(f'{SP}/evil"\n\x1b[31m/x.so')
    iv = tree(worker(11, rowless(hostile)), worker(12, rowless(hostile)))
    f, a = finding_of(iv)
    document = json.dumps(interval_dict(iv, a))
    entry = json.loads(document)["processes"][0]["owners"][0]
    assert entry["library"] == "evil____31m"
    assert entry["object"] == f'{SP}/evil"\n\x1b[31m/x.so'
    assert "\x1b" not in document and "\x1b" not in f.message + f.fix
    assert "\n" not in f.message and "evil____31m" in f.message


def test_a_vendored_openmp_team_is_its_packages_with_the_openmp_knob() -> None:
    team = "libgomp@somepkg"
    counts = (oc(team, 1, 1), oc("python", 1, 1), oc("openblas", 1, 0))
    f, _ = finding_of(tree(worker(11, counts), worker(12, counts)))
    assert "somepkg's OpenMP team (libgomp)" in f.message
    assert "OMP_NUM_THREADS=1" in f.fix
    assert RUNTIMES_BY_KEY[team].measured == ""
    assert "torch" not in f.message  # no figure measured for another program's team
    for words in APP_WORDS:
        assert words not in f.fix


def test_the_programs_own_threads_are_no_pool() -> None:
    counts = (oc("program", 2, 2), oc("openblas", 1, 0))
    f, _ = finding_of(tree(worker(11, counts), worker(12, counts)))
    assert "program" not in str(f.evidence.get("pools") or "")


def test_threads_no_evidence_names_are_never_said_to_be_the_applications_alone() -> None:
    counts = (oc("unattributed", 2, 2), oc("python", 1, 0, ran=1))
    kw = {"pools": (), "live_pools": {}, "live_threads": {}}
    f, _ = finding_of(tree(worker(11, counts, **kw), worker(12, counts, **kw)))
    assert "no evidence names their code" in f.message, f.message
    assert "or a native library's that oversub could not attribute" in f.message
    assert "threads_per_worker" in f.fix  # theirs, if they are the application's
    assert "taskset -c CPUS CMD" in f.fix  # a library's: the levers of any runtime
    unread = [worker(p, counts, owner_counts=None, owners=None, **kw) for p in (11, 12)]
    f, _ = finding_of(tree(*unread))
    assert "their owners were not read" in f.message, f.message


def test_variables_its_binary_names_are_candidates_never_the_fix() -> None:
    key = library_key(f"{SP}/rowless/_native.abi3.so", ("ROWLESS_NUM_THREADS",))
    f, _ = finding_of(tree(worker(11, rowless(key)), worker(12, rowless(key))))
    assert "its binary names ROWLESS_NUM_THREADS" in f.fix and "unverified" in f.fix
    assert "ROWLESS_NUM_THREADS=" not in f.fix and "ROWLESS_NUM_THREADS" not in f.message
    assert "belong to rowless," in f.message  # the same library, whatever its candidates
