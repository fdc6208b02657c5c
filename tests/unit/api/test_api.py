"""The Python API: oversub.recommend / apply / worker_init_fn, and a cheap `import oversub`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import oversub
from oversub.analysis.launcher import LAUNCHER_VARS
from oversub.analysis.plans import threads_for
from oversub.core.errors import UsageError
from oversub.core.pools import RECOMMENDED_VARS


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The test's own environment may come from a launcher: clear every launcher variable."""
    for name in (*LAUNCHER_VARS, "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter; subprocess.run waits for (and on timeout kills) it."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in RECOMMENDED_VARS},
    )


def test_recommend_with_given_cpus() -> None:
    plan = oversub.recommend(4, cpus=8)
    assert isinstance(plan, oversub.Plan)
    assert (plan.procs, plan.threads_per_process, plan.leftover) == (4, 2, 0)
    assert plan.procs_source is None
    assert plan.budget.notes == ("budget given with --cpus; not measured",)


def test_recommend_with_workers() -> None:
    plan = oversub.recommend(2, 3, cpus=8)
    assert (plan.threads_per_process, plan.workers) == (1, 3)
    assert set(plan.worker_env.values()) == {"1"}


def test_recommend_auto_reads_launcher(no_launcher: pytest.MonkeyPatch) -> None:
    no_launcher.setenv("LOCAL_WORLD_SIZE", "4")
    plan = oversub.recommend("auto", cpus=16)
    assert (plan.procs, plan.threads_per_process) == (4, 4)
    assert plan.procs_source == "LOCAL_WORLD_SIZE"


def test_recommend_auto_slurm_task(no_launcher: pytest.MonkeyPatch) -> None:
    no_launcher.setenv("SLURM_NTASKS_PER_NODE", "2(x4)")
    no_launcher.setenv("SLURM_CPUS_PER_TASK", "6")
    plan = oversub.recommend(cpus=12)
    assert (plan.procs, plan.threads_per_process) == (1, 6)


def test_recommend_auto_without_launcher(no_launcher: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="no launcher variable set"):
        oversub.recommend(cpus=4)


def test_recommend_numeric_string() -> None:
    assert oversub.recommend("3", cpus=6).threads_per_process == 2


@pytest.mark.parametrize("procs", ["many", "0", 0, -1, ""])
def test_recommend_rejects_bad_procs(procs: int | str) -> None:
    with pytest.raises(ValueError):
        oversub.recommend(procs, cpus=4)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"procs": True}, TypeError),
        ({"procs": False}, TypeError),
        ({"procs": 2.5}, TypeError),
        ({"procs": 2.0}, TypeError),
        ({"procs": "x"}, ValueError),
        ({"procs": None}, TypeError),
        ({"procs": 2, "workers": True}, TypeError),
        ({"procs": 2, "workers": 1.0}, TypeError),
        ({"procs": 2, "workers": "1"}, TypeError),
    ],
)
def test_recommend_refuses_values_that_are_not_counts(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    # bool is an int subclass: without the check, procs=True would plan for 1 process.
    with pytest.raises(error):
        oversub.recommend(**kwargs, cpus=4)  # type: ignore[arg-type]


def test_recommend_refuses_bool_cpus() -> None:
    with pytest.raises(TypeError):
        oversub.recommend(2, cpus=True)


def test_recommend_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        oversub.recommend(2, -1, cpus=4)
    with pytest.raises(ValueError):
        oversub.recommend(2, cpus=4, pid=os.getpid())


def test_recommend_measures_this_process() -> None:
    plan = oversub.recommend(2)
    assert plan.budget.pid == os.getpid()
    assert 1 <= plan.budget.vcpus <= len(os.sched_getaffinity(0))
    assert plan.threads_per_process == threads_for(plan.budget.vcpus, 2)


def test_import_oversub_is_cheap() -> None:
    result = run_python(
        """
        import sys
        import oversub
        heavy = ["rich", "psutil", "cpuinfo", "click", "oversub.api", "oversub.probe"]
        print(sorted(m for m in heavy if m in sys.modules))
        oversub.recommend  # the API itself must not pull them in either
        print(sorted(m for m in heavy[:4] if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "[]"]


def test_lazy_names_and_dir() -> None:
    assert {"recommend", "apply", "worker_init_fn", "Plan"} <= set(dir(oversub))
    with pytest.raises(AttributeError):
        _ = oversub.no_such_name


# Fake torch and threadpoolctl modules that record how they were called.
FAKES = """
import json, os, sys, types
calls = {"torch": [], "threadpoolctl": []}
torch = types.ModuleType("torch")
torch.set_num_threads = lambda n: calls["torch"].append(n)
tpc = types.ModuleType("threadpoolctl")
class Limiter:
    def __init__(self, limits=None, user_api=None):
        calls["threadpoolctl"].append(limits)
tpc.threadpool_limits = Limiter
"""


def test_apply_sets_env_torch_and_threadpoolctl() -> None:
    result = run_python(
        FAKES
        + """
sys.modules["torch"] = torch
sys.modules["threadpoolctl"] = tpc
import oversub
import oversub.api
plan = oversub.recommend(2, 1, cpus=8)
main = oversub.apply(plan)
main_env = {k: os.environ[k] for k in plan.env}
worker = oversub.apply(plan, role="worker")
worker_env = {k: os.environ[k] for k in plan.env}
kept = oversub.api._threadpool_limiter is not None
print(json.dumps([main, worker, main_env, worker_env, calls, kept]))
"""
    )
    assert result.returncode == 0, result.stderr
    main, worker, main_env, worker_env, calls, kept = json.loads(result.stdout)
    assert (main, worker) == (3, 1)
    assert main_env == dict.fromkeys(RECOMMENDED_VARS, "3")
    assert worker_env == dict.fromkeys(RECOMMENDED_VARS, "1")
    assert calls == {"torch": [3, 1], "threadpoolctl": [3, 1]}
    assert kept


def test_apply_imports_threadpoolctl_not_torch() -> None:
    result = run_python(
        """
        import json, os, sys
        import oversub
        before = "threadpoolctl" in sys.modules
        plan = oversub.recommend(1, cpus=3)
        threads = oversub.apply(plan)
        print(json.dumps([threads, os.environ["OMP_NUM_THREADS"], before,
                          "torch" in sys.modules, "threadpoolctl" in sys.modules]))
        """
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [3, "3", False, False, True]


def test_threadpoolctl_is_a_dependency() -> None:
    # Issue 11 item 13: without it `apply` silently left NumPy's pools at N threads.
    from importlib.metadata import requires

    assert any(
        r.split(">")[0].split("=")[0].strip() == "threadpoolctl" for r in requires("oversub") or []
    )


def test_apply_resizes_an_openmp_pool_loaded_before_it() -> None:
    # Issue 11 item 13: a pool loaded before `apply` (here libgomp, as NumPy's OpenBLAS is in
    # a spawned worker) read its size at load time; apply must still cap it. No NumPy here:
    # `make test-real` shows the same with NumPy's OpenBLAS.
    import ctypes.util

    gomp = ctypes.util.find_library("gomp")
    if gomp is None:
        pytest.skip("libgomp is not installed on this machine")
    result = run_python(
        f"""
        import ctypes, json
        lib = ctypes.CDLL({gomp!r})
        before = lib.omp_get_max_threads()
        import oversub
        threads = oversub.apply(oversub.recommend(1, cpus=1))
        print(json.dumps([before, threads, lib.omp_get_max_threads()]))
        """
    )
    assert result.returncode == 0, result.stderr
    before, threads, after = json.loads(result.stdout)
    assert threads == 1 and after == 1
    assert before == len(os.sched_getaffinity(0))  # the default: every CPU


def test_apply_worker_role_without_workers_in_plan() -> None:
    result = run_python(
        """
        import os
        import oversub
        plan = oversub.recommend(2, cpus=4)
        print(oversub.apply(plan, role="worker"), os.environ["OPENBLAS_NUM_THREADS"])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1"]


def test_apply_rejects_unknown_role() -> None:
    plan = oversub.recommend(1, cpus=2)
    with pytest.raises(ValueError, match="role"):
        oversub.apply(plan, role="boss")  # type: ignore[arg-type]


def test_worker_init_fn_sets_one_thread() -> None:
    result = run_python(
        FAKES
        + """
sys.modules["torch"] = torch
sys.modules["threadpoolctl"] = tpc
import oversub
oversub.worker_init_fn(3)
print(json.dumps([{k: os.environ[k] for k in os.environ if k.endswith("_THREADS")}, calls]))
"""
    )
    assert result.returncode == 0, result.stderr
    env, calls = json.loads(result.stdout)
    assert {k: env[k] for k in RECOMMENDED_VARS} == dict.fromkeys(RECOMMENDED_VARS, "1")
    assert calls == {"torch": [1], "threadpoolctl": [1]}
