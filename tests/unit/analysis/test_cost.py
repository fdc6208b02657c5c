"""The severity rule (`analysis.cost`, docs/rules.md "What oversubscription costs"): a
finding's severity and every cost it states follow where this run measured its busy threads'
CPU to go, never which idle pool is mapped beside them; unmeasured, it says so.

Synthetic processes shaped like issue 41's table (2 processes on 2 CPUs): an OpenMP team
whose busy threads wait at its barrier (XGBoost: 0.93 of the samples), one whose threads work
(faiss: 0.04), tokenizers' threads no runtime names, with and without NumPy's idle OpenBLAS.
"""

from __future__ import annotations

import pytest

from oversub.analysis.verdict import assess
from oversub.core.names import Severity, Verdict
from oversub.core.pcprofile import WaitShare
from oversub.core.results import Finding, Interval, OwnerCount, ProcessRates
from oversub.core.thresholds import Thresholds
from tests.support.builders import make_interval, make_process_rates, make_totals

XGBOOST = WaitShare(1200, 1116, "libgomp", 30.0)
FAISS = WaitShare(1200, 48, "libgomp", 30.0)
TOKENIZERS = WaitShare(900, 0, None, 30.0)
REFUSED = WaitShare(0, 0, None, 30.0, 1, "perf-paranoid", "kernel.perf_event_paranoid is 3")


def oc(owner: str, threads: int, busy: int = 0) -> OwnerCount:
    return OwnerCount(owner, threads, busy, busy, float(busy), 0.0)


def proc(pid: int, counts: tuple[OwnerCount, ...], **kw: object) -> ProcessRates:
    busy = sum(c.busy for c in counts)
    base = make_process_rates(
        pid=pid,
        threads=sum(c.threads for c in counts),
        active_threads=busy,
        demand=float(busy),
        cpu_percent=100.0,
        pools=(),
        thread_env={},
        live_pools={},
        live_threads={},
        owner_counts=counts,
        owners={},
    )
    return base._replace(**kw)  # type: ignore[arg-type]


def team(pid: int, share: WaitShare | None, pools: tuple[str, ...] = ("libgomp",)) -> ProcessRates:
    """A libgomp team of 2 busy threads (the caller and its one thread), default-sized."""
    counts = (oc("libgomp", 1, 1), oc("python", 1, 1))
    return proc(pid, counts, pools=pools, wait_share=share)


def tokenizers(pid: int, share: WaitShare | None, numpy: bool) -> ProcessRates:
    """tokenizers' rayon threads, unattributed; with NumPy, its OpenBLAS sized 2 and idle."""
    counts = (oc("unattributed", 2, 2), oc("python", 1, 1))
    if not numpy:
        return proc(pid, counts, wait_share=share, demand=2.1)
    return proc(
        pid,
        (*counts, oc("openblas", 1, 0)),
        pools=("openblas",),
        live_pools={"openblas": 2},
        live_threads={"openblas": 1},
        wait_share=share,
        demand=2.1,
    )


def tree(*procs: ProcessRates) -> Interval:
    d = sum(p.demand for p in procs)
    return make_interval(
        vcpus=2,
        processes=procs,
        totals=make_totals(
            processes=len(procs),
            demand=d,
            active_threads=sum(p.active_threads for p in procs),
            busy_processes=len(procs),
            cpu_percent=100.0 * len(procs),
            run_delay_ratio=0.5,
        ),
    )


def over(iv: Interval) -> Finding:
    a = assess(iv, Thresholds())
    found = [f for f in a.findings if f.verdict is Verdict.OVERSUBSCRIBED]
    assert len(found) == 1, a.findings
    return found[0]


def test_a_team_that_spins_at_its_barrier_is_critical_with_its_measured_share() -> None:
    f = over(tree(team(11, XGBOOST), team(12, XGBOOST)))
    assert f.severity is Severity.CRITICAL and f.rule == "oversubscribed-pools"
    assert "Measured here, 93 % of their busy threads' CPU went to GNU OpenMP's wait code" in (
        f.message
    )
    assert f.evidence["cost"] == "spin" and f.evidence["wait_share"] == 0.93
    assert f.evidence["wait_samples"] == 2400 and f.evidence["wait_runtime"] == "libgomp"
    assert "10.6x" not in f.message  # torch's figure: not this program's team


def test_a_team_whose_threads_work_is_not_critical_whatever_its_runtime() -> None:
    """faiss: a libgomp team, 1.2-1.4x measured; the catalogue's "spin" is not this run."""
    f = over(tree(team(11, FAISS), team(12, FAISS)))
    assert f.severity is Severity.WARNING
    assert "spent 96 % of their CPU on real work (4 % waiting, 2,400 samples)" in f.message
    assert "costly" not in f.message and "10.6x" not in f.message
    assert f.evidence["cost"] == "work" and f.evidence["wait_share"] == 0.04
    assert "OMP_NUM_THREADS=1" in f.fix  # the knob still applies: its gain is smaller


def test_a_spinning_pool_no_runtime_names_is_critical_when_measured() -> None:
    spinning = WaitShare(800, 700, "spin-hint", 30.0)
    f = over(tree(tokenizers(11, spinning, False), tokenizers(12, spinning, False)))
    assert f.severity is Severity.CRITICAL and "a spin loop's wait code" in f.message


@pytest.mark.parametrize("share", [TOKENIZERS, None, REFUSED])
def test_an_idle_numpy_beside_a_pool_changes_nothing(share: WaitShare | None) -> None:
    alone = over(tree(tokenizers(11, share, False), tokenizers(12, share, False)))
    beside = over(tree(tokenizers(11, share, True), tokenizers(12, share, True)))
    assert alone.severity is beside.severity is Severity.WARNING
    assert alone.rule == beside.rule
    assert "spin" not in beside.message and "costly" not in beside.message
    # Its OpenBLAS is named as idle, never as "at most 1 thread" beside "at 2 threads".
    assert "OpenBLAS at 2 threads, read live, idle" in beside.message
    assert "at most 1 thread or sit idle" in beside.message


def test_a_refusal_says_cost_not_measured_and_falls_back_to_the_runtime() -> None:
    f = over(tree(team(11, REFUSED), team(12, REFUSED)))
    # Not measured: a spinning runtime seen running the busy threads stays critical.
    assert f.severity is Severity.CRITICAL
    assert (
        "Cost not measured here (kernel.perf_event_paranoid is 3): `oversub tune -- CMD` "
        "measures what fewer threads gain." in f.message
    )
    assert f.evidence["cost"] == "unmeasured" and f.evidence["wait_share"] is None


def test_a_figure_is_quoted_only_where_it_was_measured() -> None:
    torch = over(tree(team(11, None, ("libgomp", "torch")), team(12, None, ("libgomp", "torch"))))
    assert "10.6x slower for torch's team" in torch.message
    plain = over(tree(team(11, None), team(12, None)))
    assert "10.6x" not in plain.message and "Cost not measured here" in plain.message


def test_another_users_processes_claim_no_pool_and_no_cost() -> None:
    """Watched as another user: maps refused (pools unknown), perf refused, busy threads
    unattributed. No pool is named, so none is said to be "named" or to spin."""
    refused = WaitShare(
        0, 0, None, 3.0, 1, "perf-paranoid", "not root, and process 11 is another user's"
    )
    hidden = [
        tokenizers(pid, refused, False)._replace(pools=None, thread_env=None) for pid in (11, 12)
    ]
    f = over(tree(*hidden))
    assert f.severity is Severity.WARNING
    assert "Cost not measured here (not root, and process 11 is another user's)" in f.message
    assert "pools named" not in f.message and "spin" not in f.message


def _pool(pid: int, owner: str, share: WaitShare | None) -> ProcessRates:
    """A pool of 2 busy threads beside its idle caller, owned by `owner`."""
    return proc(pid, (oc(owner, 2, 2), oc("python", 1, 0)), wait_share=share, demand=2.0)


@pytest.mark.parametrize("owner", ["polars", "lib:/venv/lib/site-packages/foo/_foo.so"])
def test_a_pool_the_catalogue_says_sleeps_or_has_no_row_is_critical_when_it_spins(
    owner: str,
) -> None:
    """The measurement decides, whatever the catalogue says of the owner (polars sleeps; a
    library without a row has no kind): 0.92 of the samples in a spin loop is critical."""
    spinning = WaitShare(1000, 920, "spin-hint", 30.0)
    f = over(tree(_pool(11, owner, spinning), _pool(12, owner, spinning)))
    assert (f.severity, f.rule) == (Severity.CRITICAL, "oversubscribed-pools"), f
    assert "92 % of their busy threads' CPU went to a spin loop's wait code" in f.message
    assert "costs little" not in f.message
    cheap = over(tree(_pool(11, owner, TOKENIZERS), _pool(12, owner, TOKENIZERS)))
    assert cheap.severity is Severity.WARNING and "on real work" in cheap.message


def test_openblas_measured_below_the_line_stays_critical_its_waiting_unseen() -> None:
    """NumPy's matmul in 2 processes: OpenBLAS's threads wait partly in sched_yield, in the
    kernel, so user-space samples read 0.36 in one run and 0.58 in another while the fix did
    1.8x the matmuls. Its catalogue kind stands, and the finding says why it is not measured."""
    counts = (oc("openblas", 1, 1), oc("python", 1, 1))
    low = WaitShare(1000, 360, "spin-hint", 30.0)
    procs = [proc(pid, counts, pools=("openblas",), wait_share=low) for pid in (11, 12)]
    f = over(tree(*procs))
    assert f.severity is Severity.CRITICAL and f.rule == "oversubscribed-pools", f.message
    assert "Cost not measured here (OpenBLAS's threads wait partly in sched_yield" in f.message
    assert f.evidence["cost"] == "unmeasured"
