"""`oversub check --procs M --threads T [--workers W]`: static preflight."""

from __future__ import annotations

import pytest

from oversub.analysis.plans import synthetic_budget
from oversub.analysis.preflight import preflight
from oversub.core.names import Severity, Verdict
from oversub.core.rules import PREFLIGHT_RULES


def test_exact_fit_is_ok_without_findings() -> None:
    result = preflight(synthetic_budget(8), 2, 4)
    assert result.verdict is Verdict.OK
    assert result.findings == ()


def test_multithread_teams_oversubscribed_are_critical() -> None:
    result = preflight(synthetic_budget(2), 2, 2)
    assert result.verdict is Verdict.OVERSUBSCRIBED
    (finding,) = result.findings
    assert finding.rule == "preflight-oversubscribed"
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence == {
        "vcpus": 2,
        "procs": 2,
        "threads": 2,
        "workers": 0,
        "total_threads": 4,
        "ratio": 2.0,
    }
    assert "OMP_NUM_THREADS=1" in finding.fix
    assert "torch.set_num_threads(1)" in finding.fix
    assert (
        finding.message
        == "The plan runs 2 processes of 2 threads each = 4 threads on 2 vCPUs (2.0x)"
    )


def test_single_threads_over_budget_are_a_warning() -> None:
    (finding,) = preflight(synthetic_budget(2), 4, 1).findings
    assert finding.rule == "preflight-oversubscribed"
    assert finding.severity is Severity.WARNING
    assert "at most 2 processes" in finding.fix


def test_fix_suggests_threads_for() -> None:
    (finding,) = preflight(synthetic_budget(8), 3, 8).findings
    assert "use 2 threads per process" in finding.fix
    assert "OMP_NUM_THREADS=2" in finding.fix
    assert finding.evidence["ratio"] == 3.0


def test_workers_push_it_over() -> None:
    # 2 x 2 threads fit 4 vCPUs; 2 workers each bring it to 8.
    result = preflight(synthetic_budget(4), 2, 2, workers=2)
    assert result.verdict is Verdict.OVERSUBSCRIBED
    (finding,) = result.findings
    assert finding.rule == "preflight-workers"
    assert finding.evidence["total_threads"] == 8
    assert finding.evidence["workers"] == 2
    # Even 1 main thread + 2 workers x 2 procs = 6 > 4: fewer workers.
    assert "at most 1 worker per process" in finding.fix
    assert "worker_init_fn" in finding.fix


def test_workers_push_it_over_fix_keeps_workers_when_possible() -> None:
    # 2 x 4 = 8 fits 8 vCPUs; +1 worker each = 10. T = (8 - 2) / 2 = 3 fits.
    (finding,) = preflight(synthetic_budget(8), 2, 4, workers=1).findings
    assert finding.rule == "preflight-workers"
    assert "use 3 threads per process" in finding.fix


def test_main_threads_over_budget_with_workers() -> None:
    # Main threads alone oversubscribe: the main rule, and the fix lowers workers too.
    (finding,) = preflight(synthetic_budget(4), 2, 4, workers=3).findings
    assert finding.rule == "preflight-oversubscribed"
    assert "at most 1 worker per process" in finding.fix


def test_idle_cpus_suggest_more_threads() -> None:
    result = preflight(synthetic_budget(16), 2, 2, workers=2)
    assert result.verdict is Verdict.OK
    (finding,) = result.findings
    assert finding.rule == "preflight-idle"
    assert finding.severity is Severity.INFO
    assert finding.verdict is Verdict.OK
    assert "use 6 threads per process" in finding.fix
    assert "leaving 8 vCPUs idle" in finding.message


def test_idle_remainder_no_even_split_can_use() -> None:
    # 2 x 2 on 5 vCPUs leaves 1 idle, but T = 3 would need 6: nothing to suggest.
    assert preflight(synthetic_budget(5), 2, 2).findings == ()


def test_never_advises_zero_workers() -> None:
    # Issue 11 item 7: `--procs 2 --threads 1 --workers 2` on 2 vCPUs advised "at most 0
    # workers per process".
    for n, procs, threads, workers in [(2, 2, 1, 2), (2, 2, 2, 2), (3, 2, 1, 1), (1, 1, 1, 3)]:
        for finding in preflight(synthetic_budget(n), procs, threads, workers).findings:
            assert " 0 " not in f" {finding.fix} ", finding.fix
            assert (
                "worker" not in finding.fix
                or "drop the workers" in finding.fix
                or ("at most 1 worker" in finding.fix)
            )


def test_findings_speak_of_a_plan_not_a_tree() -> None:
    # Issue 11 item 7: nothing runs yet, so no "tree keeps threads runnable".
    for args in [(2, 2, 0), (2, 1, 2), (1, 1, 0), (4, 1, 1)]:
        for f in preflight(synthetic_budget(2), *args).findings:
            assert "tree" not in f.message + f.fix and "runnable" not in f.message
            assert f.message.startswith(("The plan runs", "The plan's main threads fit"))


def test_every_rule_is_documented() -> None:
    budget = synthetic_budget(4)
    fired = {
        f.rule
        for args in [(2, 4, 0), (2, 2, 2), (1, 1, 0)]
        for f in preflight(budget, *args).findings
    }
    assert fired == set(PREFLIGHT_RULES)
    assert all(PREFLIGHT_RULES[rule] for rule in fired)


@pytest.mark.parametrize(("procs", "threads", "workers"), [(0, 1, 0), (1, 0, 0), (1, 1, -1)])
def test_rejects_bad_counts(procs: int, threads: int, workers: int) -> None:
    with pytest.raises(ValueError):
        preflight(synthetic_budget(4), procs, threads, workers)
