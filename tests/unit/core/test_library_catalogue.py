"""The library catalogue (`core.catalogue`): one row per library, and the two views of it
(`core.pools` for the objects a process maps, `core.runtimes` for the owners of threads)."""

from __future__ import annotations

import pytest

from oversub.analysis.cureplan import readers, thread_variables
from oversub.core.catalogue import CATALOGUE, OPENMP, Library
from oversub.core.pools import POOL_KINDS, POOLS_BY_KEY, classify_library, is_thread_var
from oversub.core.runtimes import RUNTIMES, RUNTIMES_BY_KEY, owner_of_name, owner_of_object

ROWS = {row.key: row for row in CATALOGUE}
MAPPED = [row for row in CATALOGUE if row.mapped]


def test_one_row_per_library() -> None:
    assert len(ROWS) == len(CATALOGUE)
    assert RUNTIMES is CATALOGUE


def test_every_mapped_row_is_a_pool_and_no_other() -> None:
    assert [k.key for k in POOL_KINDS] == [row.key for row in MAPPED]
    for row in MAPPED:
        kind = POOLS_BY_KEY[row.key]
        assert kind.label == (row.pool_label or row.label)
        assert (kind.prefixes, kind.variables, kind.code_fix) == (
            row.mapped,
            row.reads,
            row.pool_code,
        )
        assert kind.openmp == (row.key in OPENMP)


@pytest.mark.parametrize("row", [r for r in CATALOGUE if not r.mapped], ids=lambda r: r.key)
def test_mapped_pool_facts_only_on_a_mapped_row(row: Library) -> None:
    """A field of the mapped pool on a row no map reveals would never be read: a fact in
    the wrong place."""
    assert not row.reads and not row.pool_label and row.pool_code is None
    assert row.live_symbol is None and row.live_started is None


def test_openmp_runtimes_have_rows_that_spin() -> None:
    for key in OPENMP:
        assert ROWS[key].waits == "spin" and ROWS[key].mapped


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.key)
def test_every_variable_a_row_names_can_be_read_from_another_process(row: Library) -> None:
    """oversub reads only the thread variables of another process (its environment holds
    secrets): a knob it could not read would be recommended again after it was set."""
    for variable in (*row.variables, *row.reads):
        assert is_thread_var(variable), variable
        assert variable in thread_variables(), variable
        assert readers(variable), variable


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.key)
def test_a_row_is_found_by_what_it_declares(row: Library) -> None:
    for prefix in row.names:
        assert owner_of_name(prefix + "0") == row.key
    for directory in row.dirs:
        assert owner_of_object(f"/v/lib/python3/site-packages/{directory}/_x.so") == row.key
    for prefix in row.objects:
        assert owner_of_object(f"/usr/lib/{prefix}so.1") == row.key
    for prefix in row.mapped:
        assert classify_library(prefix + "so.1") == row.key


@pytest.mark.parametrize("row", CATALOGUE, ids=lambda r: r.key)
def test_a_measured_cost_names_the_situation_it_was_measured_in(row: Library) -> None:
    if row.measured_with:
        assert row.measured and row.measured_with in POOLS_BY_KEY
    if row.drives:
        assert row.waits == "spin"  # a library driving an OpenMP team


def test_pytorch_runs_two_pools_in_one_row() -> None:
    """Its threads named pt_* are the inter-op pool (no variable reaches it); the mapped
    libtorch_cpu stands for the intra-op pool, sized by OMP_NUM_THREADS."""
    torch = RUNTIMES_BY_KEY["torch"]
    assert torch.variables == () and "interop" in (torch.code or "")
    assert POOLS_BY_KEY["torch"].variables[0] == "OMP_NUM_THREADS"
    assert POOLS_BY_KEY["torch"].code_fix == "torch.set_num_threads({t})"


def test_a_vendored_openmp_team_is_no_mapped_pool_and_quotes_no_cost() -> None:
    row = RUNTIMES_BY_KEY["libgomp@foo"]
    assert row.label == "foo's OpenMP team (libgomp)" and row.waits == "spin"
    assert row.measured == "" and row.mapped == ()
    assert row.variables == ("OMP_NUM_THREADS",)
