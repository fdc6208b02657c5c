"""`oversub doctor`: the runtimes it starts, the budgets it starts them under, what it read.

One check per Python package that starts a thread pool of its own: the small parallel
operation its child runs (the code is `oversub.probe.poolstart.OPERATIONS`, under the same
key), the owner (`core.runtimes`) whose knob sizes it, and the modules imported before the
count starts, so that their pools are not counted as its own (numexpr needs NumPy, whose
OpenBLAS starts at import). Then the records of a run: the budgets (`RunSpec`), what one
child started under one of them (`Measurement`), and the report (`DoctorReport`).
Pure data, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.names import Name


class Checkup(NamedTuple):
    """One package doctor starts in a child."""

    key: str
    """Stable id, in JSON and `--runtime` ("numpy", "scikit-learn", ...)."""
    module: str
    """What the child imports ("scipy.linalg")."""
    dists: tuple[str, ...]
    """Distribution names that give its version, first found wins."""
    operation: str
    """The operation the child runs, in words."""
    owner: str | None
    """The `runtimes` key of the pool it starts (its knob, when its own threads name none);
    None for a package the owner catalogue does not know."""
    code: str | None = None
    """Its own in-code knob, with {t}, where it has one (else the owner's)."""
    variable: str | None = None
    """Its own sizing variable where the owner catalogue has none for it."""
    needs: tuple[str, ...] = ()
    """Modules imported before the count starts, where installed: their own pools (NumPy's
    OpenBLAS, SciPy's) are their rows', not this one's."""


CHECKUPS: tuple[Checkup, ...] = (
    Checkup("numpy", "numpy", ("numpy",), "matmul of two 512x512 float64 matrices", "openblas"),
    Checkup(
        "scipy",
        "scipy.linalg",
        ("scipy",),
        "LU factorisation of a 512x512 matrix",
        "openblas",
        needs=("numpy",),
    ),
    Checkup(
        "torch",
        "torch",
        ("torch",),
        "matmul of two 512x512 tensors",
        "libgomp",
        code="torch.set_num_threads({t})",
        needs=("numpy",),
    ),
    Checkup(
        "onnxruntime",
        "onnxruntime",
        ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"),
        "one inference of a 256x256 MatMul model",
        "onnxruntime",
        needs=("numpy",),
    ),
    Checkup("polars", "polars", ("polars",), "group-by and sort of 200,000 rows", "polars"),
    Checkup(
        "pyarrow", "pyarrow", ("pyarrow",), "group-by of 200,000 rows", "pyarrow", needs=("numpy",)
    ),
    Checkup(
        "numexpr",
        "numexpr",
        ("numexpr",),
        "evaluate on 1,000,000 elements",
        "numexpr",
        needs=("numpy",),
    ),
    Checkup(
        "numba",
        "numba",
        ("numba",),
        "a parallel prange loop (compiled first)",
        "numba",
        needs=("numpy",),
    ),
    Checkup(
        "scikit-learn",
        "sklearn",
        ("scikit-learn",),
        "KMeans fit of 20,000 points",
        "sklearn",
        needs=("numpy", "scipy.linalg"),
    ),
    Checkup(
        "duckdb",
        "duckdb",
        ("duckdb",),
        "group-by of 2,000,000 rows",
        None,
        code="duckdb.connect(config={{'threads': {t}}})",
    ),
    Checkup(
        "opencv",
        "cv2",
        ("opencv-python", "opencv-python-headless", "opencv-contrib-python"),
        "Gaussian blur of a 1024x1024 image",
        "opencv",
        code="cv2.setNumThreads({t})",
        needs=("numpy",),
    ),
    Checkup(
        "xgboost",
        "xgboost",
        ("xgboost", "xgboost-cpu"),
        "2 boosting rounds on 20,000 rows",
        "xgboost",
        code="nthread={t} (n_jobs={t})",
        needs=("numpy", "scipy.linalg"),
    ),
    Checkup(
        "lightgbm",
        "lightgbm",
        ("lightgbm",),
        "2 boosting rounds on 20,000 rows",
        "lightgbm",
        code="num_threads={t}",
        needs=("numpy", "scipy.linalg"),
    ),
)
"""Every check, in the order of doctor's table."""

CHECKUPS_BY_KEY: Mapping[str, Checkup] = {c.key: c for c in CHECKUPS}


class RunKind(Name):
    """The budgets a check is started under (JSON `runs[].kind`)."""

    BUDGET = "budget"
    """The budget asked for (`--cpus`, `--cpuset`); without either, the host run is it."""
    HOST = "host"
    """As doctor itself runs: nothing added."""
    AFFINITY = "affinity"
    """Fewer CPUs of affinity (half, at least 1), no quota added: does it read affinity?"""
    QUOTA = "quota"
    """A CPU quota (half the CPUs, at least 1) with the same affinity: does it read it?"""


class Status(Name):
    """How one child ended (JSON `status`)."""

    MEASURED = "measured"
    FAILED = "failed"
    """The import or the operation raised: `error` says what."""
    CRASHED = "crashed"
    """The child died (a signal, or an exit before it said why)."""
    TIMED_OUT = "timed-out"
    """Not done within `--timeout`: killed."""
    NOT_RUN = "not-run"
    """Its budget could not be imposed (a quota without a cgroup to write)."""


class RunSpec(NamedTuple):
    """A budget to start children under."""

    kind: RunKind
    affinity: tuple[int, ...] | None
    """CPUs to set with sched_setaffinity; None: as inherited."""
    quota: float | None
    """CPUs of a CPU quota on a new child cgroup; None: no cgroup of doctor's own."""


class Confined(NamedTuple):
    """A RunSpec as it could be imposed."""

    spec: RunSpec
    applied: bool
    """Everything asked was imposed (False: the quota's cgroup could not be made)."""
    cgroup: str | None
    """The child cgroup's path in its hierarchy, where one was made."""
    version: int | None
    """Its cgroup version (1: cpu.cfs_quota_us, 2: cpu.max)."""
    note: str | None
    """Why not applied, and what that limits."""


class SeenBudget(NamedTuple):
    """The budget a child really had, read from outside (`probe.budget`)."""

    online: int
    affinity: int
    """CPUs in its affinity."""
    quota: float | None
    """The tightest CPU quota on its cgroup path, in CPUs."""
    vcpus: int
    """Its N: the tightest of both (quota rounded down, at least 1)."""


class Measurement(NamedTuple):
    """What one child of one check did under one budget."""

    kind: RunKind
    status: Status
    budget: SeenBudget | None = None
    started: Mapping[str, int] = {}
    """Owner (`runtimes` key, or "unattributed") -> threads alive after the operation that
    were not there before the import."""
    at_import: int | None = None
    """Threads the import alone started (alive after it)."""
    busy: int | None = None
    """Threads (the calling one included) runnable for at least `active_cpu` of the time
    while the operation ran in a loop; None when not measured."""
    reported: Mapping[str, str] = {}
    """What the library says of its own size: call -> value."""
    version: str | None = None
    error: str | None = None
    """One line: what failed, where."""
    seconds: float = 0.0


class Knob(NamedTuple):
    """What sizes a runtime, at the plan's T."""

    variable: str | None
    code: str | None
    threads: int


class SizedFrom(Name):
    """What a runtime sized its pool from, told by comparing its counts under the budgets
    (JSON `sized_from`)."""

    BUDGET = "affinity+quota"
    """It follows both: it sizes itself to N."""
    AFFINITY = "affinity"
    """It follows affinity and ignores the quota."""
    QUOTA = "quota"
    """It follows the quota and ignores affinity."""
    CORES = "cores"
    """The same under every budget tried: the machine's CPUs (or a fixed size)."""
    NO_THREADS = "no-threads"
    """It started no thread under any budget."""
    UNCLEAR = "unclear"
    """No single input explains the counts, or too few budgets could be compared."""


class Sizing(NamedTuple):
    source: SizedFrom
    ignores_quota: bool | None
    """True: a binding quota left its count as without one; None: not told apart."""
    ignores_affinity: bool | None


class DoctorRow(NamedTuple):
    """One check: its measurements and what they say."""

    checkup: Checkup
    installed: bool
    version: str | None
    measurements: tuple[Measurement, ...]
    sizing: Sizing | None
    started: int | None
    """Threads of compute pools it started under the asked budget (None: not measured)."""
    width: int | None
    """Threads of one process that run at once in its operation under the asked budget."""
    width_measured: bool
    """`width` is the busy count (else: started + the calling thread)."""
    oversubscribes: bool | None
    """M processes of `width` threads exceed N."""
    knob: Knob
    variables: Mapping[str, str]
    """Its sizing variables set in the children's environment."""


class DoctorReport(NamedTuple):
    python: str
    """The interpreter the children ran."""
    python_version: str
    prefix: str
    runs: tuple[Confined, ...]
    vcpus: int
    """N of the asked budget."""
    procs: int
    threads: int
    """T = max(1, floor(N / M))."""
    rows: tuple[DoctorRow, ...]
    thread_env: Mapping[str, str]
    """Thread variables in the children's environment."""
    notes: tuple[str, ...]
