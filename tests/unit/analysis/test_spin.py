"""Wait code and real work among sampled PCs (`analysis.spin`), on synthetic profiles shaped
like the real ones of docs/pools.md ("Where their busy threads' CPU goes")."""

from __future__ import annotations

import pytest

from oversub.analysis.spin import SPIN_CODE, SPIN_HINT, split, waiting_runtime
from oversub.core.pcprofile import NotMeasured, ObjectSamples, PcBucket, PcProfile

SITE = "/venv/lib/python3.11/site-packages"
GOMP = f"{SITE}/xgboost_cpu.libs/libgomp-e985bcbb.so.1.0.0"


def profile(*objects: ObjectSamples) -> PcProfile:
    return PcProfile(7, 0.3, 499, objects=objects)


def obj(path: str, *buckets: tuple[str | None, bool, int]) -> ObjectSamples:
    kept = tuple(PcBucket(*b) for b in buckets)
    return ObjectSamples(path, sum(b.samples for b in kept), kept)


def test_an_openmp_team_at_its_barrier_is_waiting() -> None:
    """XGBoost's hist at 2 processes: the team's threads in libgomp's barrier loops."""
    found = split(
        profile(
            obj(
                GOMP,
                ("gomp_team_barrier_wait_end", True, 170),
                ("gomp_barrier_wait_end", True, 160),
            ),
            obj(
                f"{SITE}/xgboost/lib/libxgboost.so", ("_ZNK7xgboost4tree13HistEvaluator", False, 20)
            ),
        )
    )
    assert (found.samples, found.waiting) == (350, 330)
    assert found.share == pytest.approx(330 / 350)
    assert [(o.path, o.waiting, o.runtime) for o in found.objects] == [
        (GOMP, 330, "libgomp"),
        (f"{SITE}/xgboost/lib/libxgboost.so", 0, None),
    ]


def test_a_runtime_object_without_names_is_its_runtimes_code() -> None:
    # Debian's libgomp (LightGBM's) has no hidden names and no spin hint read (a FUSE file).
    found = split(profile(obj("/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0", (None, False, 40))))
    assert found.waiting == 40 and found.objects[0].runtime == "libgomp"
    assert split(profile(obj("/opt/libiomp5.so", (None, False, 3)))).objects[0].runtime == "libomp"


def test_working_teams_are_work() -> None:
    """faiss's threads in its distance kernels; tokenizers' in its own code and malloc."""
    found = split(
        profile(
            obj(f"{SITE}/faiss/libfaiss.so", ("_ZN5faiss10fvec_L2sqr", False, 190)),
            obj(GOMP, ("gomp_team_barrier_wait_end", True, 10)),
            obj(
                f"{SITE}/tokenizers/tokenizers.abi3.so",
                ("_RNvXs3_NtNtCs_4core4hash3sip", False, 50),
            ),
            obj("/lib/x86_64-linux-gnu/libc.so.6", ("malloc", False, 30), (None, False, 20)),
        )
    )
    assert found.waiting == 10 and found.share == pytest.approx(10 / 300)


@pytest.mark.parametrize(
    ("path", "function", "runtime"),
    [
        ("/x/libscipy_openblas64_-32a4b2a6.so", "blas_thread_server", "openblas"),
        ("/x/libscipy_openblas64_-32a4b2a6.so", "dgemm_kernel_SKYLAKEX", None),
        # rayon's sleep, in v0 and legacy Rust mangling, in any library that links it.
        (
            "/x/tokenizers.abi3.so",
            "_RINvMNtCsjpdOAJTRuNw_10rayon_core5sleepNtB3_5Sleep5sleepNCNvMs8_NtB5_8registry",
            "rayon",
        ),
        (
            "/x/_polars_runtime.abi3.so",
            "_ZN10rayon_core5sleep5Sleep5sleep17h0123456789abcdefE",
            "rayon",
        ),
        (
            "/x/tokenizers.abi3.so",
            "_RNvMs_NtCs1_10rayon_core8registryNtB4_12WorkerThread15wait_until_cold",
            "rayon",
        ),
        (
            "/x/tokenizers.abi3.so",
            "_RNvMs_NtCs1_15crossbeam_deque5dequeINtB4_7StealerE5steal",
            "rayon",
        ),
        # A work closure generic over a latch is not the latch's wait.
        ("/x/tokenizers.abi3.so", "_RINvNtCs_4core3ptr9drop_glueINtNtCs_10rayon_core5latch", None),
        ("/lib/x86_64-linux-gnu/libc.so.6", "sched_yield", "yield"),
        ("/lib/x86_64-linux-gnu/libc.so.6", "__sched_yield", "yield"),
        ("/lib/x86_64-linux-gnu/libc.so.6", "memcpy", None),
        ("/x/libmine.so", "sched_yield_for_real_work", None),  # not the C library
    ],
)
def test_the_wait_functions_of_each_runtime(path: str, function: str, runtime: str | None) -> None:
    assert waiting_runtime(path, PcBucket(function, False, 1)) == runtime


def test_a_spin_loop_is_waiting_whatever_library_it_is_in() -> None:
    """OpenCV's pool or any other without a row: a PAUSE or NOP delay loop is spinning."""
    found = split(profile(obj("/x/cv2.abi3.so", (None, True, 30), (None, False, 70))))
    assert found.waiting == 30 and found.objects[0].runtime == SPIN_HINT
    # A named runtime's wait wins over the generic hint for the object's label.
    named = split(
        profile(obj("/x/libopenblas.so.0", ("blas_thread_server", True, 5), (None, True, 1)))
    )
    assert named.objects[0].runtime == "openblas" and named.waiting == 6


def test_not_measured_passes_through() -> None:
    why = "kernel.perf_event_paranoid is 3: perf events need CAP_PERFMON or root"
    found = split(PcProfile(7, 0.0, 499, unmeasured=NotMeasured.PARANOID, why=why))
    assert found.unmeasured is NotMeasured.PARANOID and found.why == why
    assert found.samples == 0 and found.share is None
    assert split(profile()).share is None  # measured, nothing sampled (threads asleep)


def test_every_entry_is_documented_and_well_formed() -> None:
    keys = [e.key for e in SPIN_CODE]
    assert len(set(keys)) == len(keys) and SPIN_HINT not in keys
    for entry in SPIN_CODE:
        assert entry.measured and entry.label
        assert entry.whole or entry.functions, entry.key
        assert all(parts and all(parts) for parts in entry.functions), entry.key


def test_a_window_is_a_wait_share_that_says_why_when_it_measured_nothing() -> None:
    from oversub.analysis.spin import wait_share

    team = profile(
        obj(GOMP, ("gomp_team_barrier_wait_end", True, 300)),
        obj(f"{SITE}/xgboost/lib/libxgboost.so", ("_ZN7xgboost", False, 20)),
    )
    share = wait_share(team, 12.0)
    assert (share.samples, share.waiting, share.runtime, share.at) == (320, 300, "libgomp", 12.0)
    assert share.share == pytest.approx(300 / 320) and share.spins is True
    refused = PcProfile(7, 0.0, 499, unmeasured=NotMeasured.PARANOID, why="paranoid 3")
    assert wait_share(refused, 1.0).share is None
    assert wait_share(refused, 1.0).unmeasured == "perf-paranoid"
    assert wait_share(refused, 1.0).why == "paranoid 3"
    # Samples no object names (maps unreadable) would count as work that nothing showed.
    blind = wait_share(profile(obj("[unmapped]", (None, False, 400))), 1.0)
    assert blind.unmeasured == "unmapped" and blind.share is None
    few = wait_share(profile(obj(GOMP, (None, False, 9))), 1.0)
    assert few.unmeasured == "few-samples" and few.spins is None


def test_a_runs_windows_are_summed_once_each() -> None:
    from oversub.analysis.accumulators import summed_share
    from oversub.core.pcprofile import WaitShare

    first, second = WaitShare(100, 90, "libgomp", 1.0), WaitShare(300, 30, None, 31.0)
    total = summed_share(summed_share(None, first), first)  # the same window twice: once
    assert total == first
    total = summed_share(total, second)
    assert total is not None and (total.samples, total.waiting, total.windows) == (400, 120, 2)
    refused = WaitShare(0, 0, None, 61.0, 1, "denied", "seccomp")
    assert summed_share(total, refused) == total  # a later refusal keeps what was measured
    assert summed_share(refused, first._replace(at=70.0)) == first._replace(at=70.0)
