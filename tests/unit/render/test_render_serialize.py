"""The JSON schema (keys, values, rounding), the env output run through a real shell, and the
rule that `serialize` never imports rich."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import sys

import pytest

from oversub.core.pools import RECOMMENDED_VARS
from oversub.render.plan_formats import (
    ROUNDING_RULE,
    budget_dict,
    export_lines,
    plan_dict,
    plan_env,
)
from oversub.render.serialize import (
    ProcessTexts,
    finding_dict,
    interval_dict,
    interval_line,
    summary_dict,
    to_json,
)
from tests.support.builders import (
    make_assessment,
    make_budget,
    make_cpuset,
    make_finding,
    make_interval,
    make_plan,
    make_process_rates,
    make_quota,
    make_quota_budget,
    make_summary,
    make_totals,
)

BUDGET_KEYS = [
    "vcpus",
    "logical",
    "physical",
    "affinity",
    "quota",
    "quota_detail",
    "cpuset",
    "cpuset_cgroup",
    "numa",
    "limited_by",
    "launcher",
    "rounding",
    "notes",
]
PLAN_KEYS = [
    "vcpus",
    "procs",
    "workers",
    "threads_per_process",
    "leftover",
    "over_by",
    "oversubscribed",
    "env",
    "worker_env",
    "binding",
    "warnings",
    "procs_source",
    "launcher_procs",
    "budget",
]
FINDING_KEYS = ["rule", "severity", "verdict", "message", "pids", "evidence", "fix"]
INTERVAL_KEYS = [
    "t",
    "seconds",
    "root_pid",
    "vcpus",
    "verdict",
    "findings",
    "processes",
    "totals",
    "host",
    "unavailable",
]
RATES_KEYS = [
    "pid",
    "ppid",
    "name",
    "threads",
    "active_threads",
    "cpu_percent",
    "demand",
    "run_delay_ratio",
    "involuntary_ctx_per_s",
    "voluntary_ctx_per_s",
    "pools",
    "thread_env",
    "exited",
    "live_pools",
    "owners",
]
TOTALS_KEYS = [
    "processes",
    "threads",
    "active_threads",
    "busy_processes",
    "cpu_percent",
    "demand",
    "run_delay_ratio",
    "involuntary_ctx_per_s",
    "voluntary_ctx_per_s",
    "involuntary_ctx_per_cpu_s",
    "pool_threads",
    "pool_processes",
]
HOST_KEYS = ["outside_cpus", "steal_cpus", "psi_some", "throttled_ratio", "throttled_s"]
SUMMARY_KEYS = [
    "root_pid",
    "vcpus",
    "budget",
    "verdict",
    "judged",
    "not_judged_reason",
    "findings",
    "processes",
    "totals",
    "totals_peak",
    "host",
    "samples",
    "duration_s",
    "target_exited",
    "unavailable",
    "notes",
    "episodes",
    "episode_totals",
]
PROCESS_SUMMARY_KEYS = [
    "pid",
    "ppid",
    "name",
    "cmdline",
    "threads",
    "cpu_percent",
    "cpu_percent_peak",
    "demand",
    "demand_peak",
    "run_delay_ratio",
    "run_delay_ratio_peak",
    "involuntary_ctx_per_s",
    "involuntary_ctx_per_s_peak",
    "voluntary_ctx_per_s",
    "voluntary_ctx_per_s_peak",
    "active_threads_peak",
    "pools",
    "thread_env",
    "exited",
    "seconds",
    "live_pools",
    "owners",
]


def test_budget_dict_without_limits() -> None:
    d = budget_dict(make_budget())
    assert list(d) == BUDGET_KEYS
    assert d["vcpus"] == 4
    assert d["affinity"] == [0, 1, 2, 3]
    assert d["quota"] is None and d["quota_detail"] is None
    assert d["cpuset"] is None and d["cpuset_cgroup"] is None
    assert d["numa"] == {"0": [0, 1, 2, 3]}
    assert d["limited_by"] == "none"
    assert d["rounding"] == ROUNDING_RULE == "fractional quotas round down; at least 1"


def test_budget_dict_with_quota_cpuset_and_detail() -> None:
    b = make_quota_budget(
        cpuset=make_cpuset(cpus=(2, 3), cgroup="/slice"),
        numa={1: (2, 3), 0: (0, 1)},
        notes=("cpu.max unreadable",),
        cpu_model="AMD EPYC 7B13",
        cpu_flags=("avx2", "fma"),
    )
    d = budget_dict(b)
    assert list(d) == [*BUDGET_KEYS, "cpu_model", "cpu_flags"]
    assert d["quota"] == 1.5
    assert d["quota_detail"] == {
        "quota_us": 150000,
        "period_us": 100000,
        "cgroup": "/kubepods/pod1",
        "version": 2,
    }
    assert d["cpuset"] == [2, 3] and d["cpuset_cgroup"] == "/slice"
    assert list(d["numa"]) == ["0", "1"]
    assert d["limited_by"] == "quota" and d["vcpus"] == 1
    assert d["notes"] == ["cpu.max unreadable"]
    assert d["cpu_model"] == "AMD EPYC 7B13" and d["cpu_flags"] == ["avx2", "fma"]


def test_plan_dict() -> None:
    p = make_plan(procs_source="LOCAL_WORLD_SIZE", warnings=("w1",))
    d = plan_dict(p)
    assert list(d) == PLAN_KEYS
    assert d["vcpus"] == 4 and d["procs"] == 2 and d["threads_per_process"] == 2
    assert d["binding"] == [[0, 1], [2, 3]]
    assert d["env"]["OMP_NUM_THREADS"] == "2"
    assert d["worker_env"] == {}
    assert d["warnings"] == ["w1"]
    assert d["procs_source"] == "LOCAL_WORLD_SIZE"
    assert d["budget"] == budget_dict(p.budget)
    json.loads(to_json(d, indent=2))


def test_plan_env_only_exports_in_recommended_order() -> None:
    env = {name: "3" for name in reversed(RECOMMENDED_VARS)}
    env["KMP_BLOCKTIME"] = "0"
    text = plan_env(make_plan(env=env))
    lines = text.splitlines()
    assert text.endswith("\n")
    assert all(line.startswith("export ") for line in lines)
    names = [line.removeprefix("export ").split("=")[0] for line in lines]
    assert names == [*RECOMMENDED_VARS, "KMP_BLOCKTIME"]
    # Workers' variables are not part of the main processes' env output.
    assert plan_env(make_plan(env={}, worker_env={"OMP_NUM_THREADS": "1"})) == ""


def test_export_lines_quote_and_refuse_bad_names() -> None:
    assert export_lines({"OMP_NUM_THREADS": "2 ; rm -rf /"}) == (
        "export OMP_NUM_THREADS='2 ; rm -rf /'\n"
    )
    with pytest.raises(ValueError, match="shell variable"):
        export_lines({"OMP;touch x": "1"})


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX sh")
@pytest.mark.parametrize("threads", [1, 3])
def test_plan_env_evaluates_in_sh(threads: int) -> None:
    env = {name: str(threads) for name in RECOMMENDED_VARS}
    text = plan_env(make_plan(env=env, threads_per_process=threads))
    out = subprocess.run(
        ["sh", "-c", 'eval "$(cat)"; echo "$OMP_NUM_THREADS $NUMBA_NUM_THREADS"'],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.split() == [str(threads), str(threads)]


def test_finding_dict_rounds_evidence() -> None:
    f = make_finding(evidence={"demand": 3.98765, "vcpus": 2, "pool": "libgomp", "x": None})
    d = finding_dict(f)
    assert list(d) == FINDING_KEYS
    assert d["severity"] == "critical" and d["verdict"] == "oversubscribed"
    assert d["pids"] == [2001, 2002]
    assert d["evidence"] == {"demand": 3.988, "vcpus": 2, "pool": "libgomp", "x": None}


def test_interval_dict_keys_and_rounding() -> None:
    iv = make_interval(
        t0=10.0,
        t1=11.23456,
        processes=(make_process_rates(cpu_percent=99.12345, run_delay_ratio=None),),
        totals=make_totals(demand=float("nan")),
    )
    d = interval_dict(iv, make_assessment())
    assert list(d) == INTERVAL_KEYS
    assert d["t"] == 11.235 and d["seconds"] == 1.235
    assert d["verdict"] == "oversubscribed"
    assert [f["rule"] for f in d["findings"]] == ["oversubscribed-pools"]
    proc = d["processes"][0]
    assert list(proc) == RATES_KEYS
    assert proc["cpu_percent"] == 99.123
    assert proc["run_delay_ratio"] is None
    assert proc["pools"] == ["libgomp", "torch"]
    assert list(d["totals"]) == TOTALS_KEYS
    assert d["totals"]["demand"] is None  # NaN never reaches JSON
    assert list(d["host"]) == HOST_KEYS
    line = to_json(d, indent=None)
    assert "\n" not in line
    assert json.loads(line) == d


def test_summary_dict_keys() -> None:
    s = make_summary(unavailable=("psi",), notes=("n",), target_exited=True)
    d = summary_dict(s)
    assert list(d) == SUMMARY_KEYS
    assert d["vcpus"] == 2 and d["budget"]["limited_by"] == "affinity"
    assert [list(p) for p in d["processes"]] == [PROCESS_SUMMARY_KEYS] * 2
    assert d["processes"][1]["exited"] is True
    assert d["processes"][0]["thread_env"] == {"OMP_NUM_THREADS": "2"}
    assert list(d["totals_peak"]) == TOTALS_KEYS
    assert d["totals_peak"]["demand"] == 4.2
    assert d["unavailable"] == ["psi"] and d["notes"] == ["n"]
    assert d["target_exited"] is True
    assert d["verdict"] == "oversubscribed" and d["judged"] is True
    assert d["not_judged_reason"] is None
    assert json.loads(to_json(d, indent=2)) == d


def test_summary_dict_of_a_run_not_judged() -> None:
    d = summary_dict(make_summary(verdict=None, not_judged="nothing was measured"))
    assert list(d) == SUMMARY_KEYS
    assert d["verdict"] is None and d["judged"] is False
    assert d["not_judged_reason"] == "nothing was measured"


def test_unknown_pools_and_env_stay_null() -> None:
    d = interval_dict(
        make_interval(processes=(make_process_rates(pools=None, thread_env=None),)),
        make_assessment(),
    )
    assert d["processes"][0]["pools"] is None and d["processes"][0]["thread_env"] is None


def test_to_json_keeps_unicode_and_order() -> None:
    text = to_json({"z": "µs", "a": 1}, indent=None)
    assert text == '{"z": "µs", "a": 1}'
    with pytest.raises(ValueError):
        to_json({"x": math.inf}, indent=None)


@pytest.mark.parametrize("encoding", ["latin-1", "ascii", "cp1252"])
def test_to_json_escapes_what_a_narrow_stdout_cannot_encode(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a Latin-1 stdout the stream's stand-ins wrote `\U0001f600` and a plain `"` for a
    # curly quote into JSON strings: invalid JSON. Escaped, it is ASCII, valid in any encoding.
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding=encoding))
    hostile = {"name": "😀x “q” é", "cmdline": "a\u2028b"}
    text = to_json(hostile, indent=2)
    assert text.isascii() and json.loads(text) == hostile
    assert "\\ud83d\\ude00x" in text


@pytest.mark.parametrize("encoding", ["utf-8", "UTF8", "utf-16"])
def test_to_json_keeps_unicode_on_a_stdout_that_encodes_it(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding=encoding))
    assert to_json({"name": "😀x é"}, indent=None) == '{"name": "😀x é"}'


def test_quota_json_is_exact() -> None:
    b = make_budget(quota=make_quota(cpus=2.5, quota_us=250000), limited_by="quota", vcpus=2)
    assert budget_dict(b)["quota"] == 2.5


def test_serialize_import_does_not_import_rich() -> None:
    code = (
        "import sys, oversub.render.serialize, oversub.render\n"
        "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_plan_dict_of_a_plan_that_does_not_fit_says_over_by_like_the_text() -> None:
    """`--procs 3 --workers 2` on 2 CPUs: the text says "over by 7"; JSON says the same."""
    from oversub.analysis.plans import make_plan as plan_for
    from oversub.analysis.plans import synthetic_budget

    plan = plan_for(synthetic_budget(2), 3, workers=2)
    d = plan_dict(plan)
    needed = plan.procs * (plan.threads_per_process + plan.workers)
    assert (d["leftover"], d["over_by"]) == (0, needed - 2)
    fitting = plan_dict(plan_for(synthetic_budget(4), 2))
    assert (fitting["leftover"], fitting["over_by"]) == (0, 0)
    spare = plan_dict(plan_for(synthetic_budget(5), 2))
    assert (spare["leftover"], spare["over_by"]) == (1, 0)


def test_an_ndjson_line_with_kept_texts_is_the_line_encoded_whole() -> None:
    """`ProcessTexts` only saves work: every line is byte for byte the record encoded at
    once, hostile names included, as processes are kept, replaced and dropped."""
    hostile = make_process_rates(pid=7, name='x"\n\u2028\\\0', cmdline="a\x1b[31m")
    quiet = make_process_rates(pid=8, name="quiet")
    texts = ProcessTexts()
    a = make_assessment()
    rounds = [
        make_interval(processes=(hostile, quiet)),
        make_interval(processes=(hostile, quiet)),  # both kept: their texts reused
        make_interval(processes=(hostile._replace(cpu_percent=55.5), quiet)),
        make_interval(processes=(quiet,)),
        make_interval(processes=()),
    ]
    for iv in rounds:
        whole = to_json({"type": "interval", "timestamp": "T", **interval_dict(iv, a)}, indent=None)
        line = interval_line(iv, a, "T", texts)
        assert line == whole == interval_line(iv, a, "T")
        assert json.loads(line)["processes"] == interval_dict(iv, a)["processes"]
