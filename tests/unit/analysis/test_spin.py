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
