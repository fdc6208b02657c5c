"""A sweep of the live system (like psutil's): sample the tree of pid 1, the whole machine,
twice, and check that every number oversub derives from it is sane and that nothing raises,
whatever processes come and go, whatever they are named and whatever may not be read.
Then read the budget of each process, assess, and render every format."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from oversub.analysis.policy import gate
from oversub.analysis.rates import counted, interval
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.core.errors import NoSuchProcess, PermissionDenied
from oversub.core.names import FailOn, Signal, Verdict
from oversub.core.results import Interval, ProcessRates, Totals
from oversub.core.thresholds import Thresholds
from oversub.probe.budget import read_budget
from oversub.probe.sampler import TreeSampler
from oversub.render import WatchFormat, render_watch_interval, render_watch_summary
from oversub.render.finalreport import summary_text
from oversub.render.junit import summary_junit
from oversub.render.markdown import summary_markdown

pytestmark = pytest.mark.skipif(not Path("/proc/1/stat").exists(), reason="needs Linux /proc")


def _check_rates(r: ProcessRates | Totals, seconds: float) -> None:
    assert r.cpu_percent >= 0 and r.demand >= 0 and r.cpu_s >= 0
    assert math.isclose(r.cpu_percent, r.cpu_s / seconds * 100, rel_tol=1e-9)
    assert r.demand + 1e-9 >= r.cpu_percent / 100  # runnable includes running
    assert 0 <= r.active_threads <= r.threads
    if r.run_delay_ratio is not None:
        assert 0 <= r.run_delay_ratio <= 1
        assert r.delay_s is not None and r.delay_s >= 0
    for count in (r.involuntary_ctx, r.voluntary_ctx):
        assert count is None or count >= 0


def _check_interval(iv: Interval) -> None:
    assert iv.seconds > 0 and iv.root_pid == 1
    live = [p for p in iv.processes if not p.exited]
    assert iv.totals.processes == len(live)
    assert iv.totals.threads == sum(p.threads for p in live)
    _check_rates(iv.totals, iv.seconds)
    for p in iv.processes:
        _check_rates(p, iv.seconds)
        # A thread can neither run nor wait longer than the interval.
        assert p.cpu_s + (p.delay_s or 0) <= p.threads * iv.seconds + 1e-6
    assert math.isclose(iv.totals.cpu_s, sum(p.cpu_s for p in live), rel_tol=1e-9, abs_tol=1e-9)
    assert set(iv.unavailable) <= set(Signal)
    host = iv.host
    for value in (host.outside_cpus, host.steal_cpus, host.psi_some, host.throttled_ratio):
        assert value is None or value >= 0


def test_sampling_the_whole_machine_twice_is_sane_and_never_raises() -> None:
    budget = read_budget(1) if Path("/proc/1/status").exists() else read_budget()
    stat = budget.quota.stat_path if budget.quota else None
    with TreeSampler(1, throttle_stat_path=stat) as sampler:
        first = sampler.sample()
        time.sleep(0.2)  # the interval measured, not a wait for readiness
        second = sampler.sample()
    assert 1 in first.processes and len(first.processes) >= 1
    iv = counted(interval(first, second, budget.vcpus), Thresholds())
    _check_interval(iv)
    assessment = assess(iv, Thresholds())
    assert assessment.verdict in set(Verdict)
    run = RunSummary(root_pid=1)
    run.add(iv)
    summary = run.result(budget, Thresholds(), target_exited=False)
    assert summary.samples == 1 and summary.judged
    for fmt in WatchFormat:
        render_watch_interval(iv, assessment, budget, fmt, elapsed=0.2, samples=1)
        render_watch_summary(summary, fmt)
    record = render_watch_interval(
        iv, assessment, budget, WatchFormat.NDJSON, elapsed=0.2, samples=1
    )
    assert isinstance(record, str) and json.loads(record)["root_pid"] == 1
    summary_text(summary)
    judged = gate(summary, FailOn.OVERSUBSCRIBED)
    summary_markdown(summary, command=None, exit_status=0, command_status=None, gate=judged)
    summary_junit(summary, judged)


def test_the_budget_of_every_process_reads_or_says_why_not() -> None:
    with TreeSampler(1) as sampler:
        pids = sorted(sampler.sample().processes)
    for pid in pids:
        try:
            budget = read_budget(pid)
        except (NoSuchProcess, PermissionDenied):
            continue  # exited since the sample, or another user's under hidepid
        assert 1 <= budget.vcpus <= budget.logical
        assert budget.limited_by in ("affinity", "quota", "cpuset", "none")
        assert budget.vcpus <= len(budget.affinity)  # N is never more than it may run on
