"""`oversub stress`'s team: what sizes it, what it prints, and that oversub names it.

The team's threads are named `stress-team-I` and the catalogue has a row for them, so a
stress run oversubscribed by its teams is an `oversubscribed-pools` finding (critical: the
team spins at its barrier, as OpenMP's does) whose fix is the variable that sizes it.
"""

from __future__ import annotations

import pytest

from oversub.analysis.verdict import assess
from oversub.core.names import Severity, Verdict
from oversub.core.results import OwnerCount, ProcessRates
from oversub.core.runtimes import RUNTIMES_BY_KEY, owner_of_name
from oversub.core.thresholds import Thresholds
from oversub.render.phrases import SIZING_VARS
from oversub.run.stressload import (
    MAX_THREADS,
    TEAM_NAME,
    TEAM_VARIABLE,
    TeamSize,
    own_size,
    team_size,
)
from oversub.run.stressroot import banner, teams_line, throughput_line
from tests.support.builders import make_interval, make_process_rates, make_totals
from tests.support.harness import run_cli


def test_the_flag_wins_then_omp_num_threads_then_every_usable_vcpu() -> None:
    env = {TEAM_VARIABLE: "3"}
    assert team_size(5, env, 2, "team") == TeamSize(5, "--threads")
    assert team_size(None, env, 2, "team") == TeamSize(3, "OMP_NUM_THREADS=3")
    assert team_size(None, {}, 7, "team") == TeamSize(7, "all 7 usable vCPUs")
    assert team_size(None, {}, 1, "team") == TeamSize(1, "all 1 usable vCPU")
    # A nested list sizes the outer team with its first level, as in OpenMP.
    assert team_size(None, {TEAM_VARIABLE: " 2,1 "}, 8, "team").threads == 2
    # Independent hashing threads are no OpenMP team: the variable does not reach them.
    assert team_size(None, env, 2, "hash") == TeamSize(2, "all 2 usable vCPUs")


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "", "  ", str(MAX_THREADS + 1), "٣"])
def test_a_value_it_cannot_use_is_ignored_with_a_note_like_libgomp(value: str) -> None:
    size = team_size(None, {TEAM_VARIABLE: value}, 4, "team")
    assert size.threads == 4 and size.source == "all 4 usable vCPUs"
    if value.strip():
        assert size.note is not None and "ignoring OMP_NUM_THREADS=" in size.note
    else:
        assert size.note is None  # empty is unset


def test_a_hostile_value_is_shown_escaped_and_short() -> None:
    size = team_size(None, {TEAM_VARIABLE: "\x1b[2J" + "x" * 500}, 2, "team")
    assert size.note is not None
    assert "\x1b" not in size.note and len(size.note) < 200, size.note


def test_the_banner_says_what_sizes_the_teams_and_how_to_stop() -> None:
    # Each worker reads its own OMP_NUM_THREADS as it starts: the root does not state a
    # size it cannot know (under `oversub run` each worker's differs from the root's).
    assert banner(4, TeamSize(2, "all 2 usable vCPUs"), 0, 60.0, "team", 99) == (
        "oversub stress: root pid 99 (4 processes, each a team sized by its own "
        "OMP_NUM_THREADS (else all 2 usable vCPUs), 0 idle, 60 s); Ctrl-C stops it"
    )
    assert "(the root's is 3)" in banner(2, TeamSize(3, "OMP_NUM_THREADS=3"), 0, 1, "team", 1)
    assert "(--threads asks for 2)" in banner(2, TeamSize(2, "--threads"), 0, 1, "team", 1)
    assert "no team (--threads 0)" in banner(2, TeamSize(0, "--threads"), 0, 1, "team", 1)
    for size in (TeamSize(2, "--threads"), TeamSize(3, "OMP_NUM_THREADS=3")):
        assert "a team of" not in banner(2, size, 0, 1.0, "team", 1)
    # hash keeps the banner tools and tests parse
    assert banner(1, TeamSize(1, "--threads"), 2, 0.5, "hash", 7) == (
        "oversub stress: root pid 7 (1 process x 1 busy thread, 2 idle, 0.5 s)"
    )


def test_the_teams_line_gives_the_size_each_worker_took() -> None:
    assert (
        teams_line({102: 1, 101: 1}, 2)
        == "oversub stress: teams started: 1 thread in pids 101, 102"
    )
    assert teams_line({101: 2, 102: 1, 103: 1}, 4) == (
        "oversub stress: teams started: 1 thread in pids 102, 103; 2 threads in pid 101; "
        "1 worker did not report"
    )
    many = teams_line({pid: 3 for pid in range(100, 300)}, 200)
    assert many == "oversub stress: teams started: 3 threads in 200 workers"
    assert teams_line({}, 2) == "oversub stress: teams started: 2 workers did not report"


def test_the_throughput_is_one_token_for_metric() -> None:
    line = throughput_line([(1000, 10.0, 1), (500, 5.0, 1)], 2)
    tokens = line.split()
    assert "rounds_per_s=200.0" in tokens, line
    assert "1,500 rounds" in line and "2 processes x 1 team thread in 10.0 s" in line
    # Teams sized apart (each worker reads its own environment) say so.
    assert "2 processes x 1 to 2 team threads" in throughput_line([(1, 1.0, 2), (1, 1.0, 1)], 2)


def test_a_worker_reads_its_own_variable_as_a_runtime_does() -> None:
    # `oversub run`'s hook sizes each process as it starts: the worker's own value wins
    # over the root's, within the worker's share of the threads stress starts in all.
    assert own_size(2, MAX_THREADS, {TEAM_VARIABLE: "1"}) == 1
    assert own_size(2, MAX_THREADS, {}) == 2
    assert own_size(2, 3, {TEAM_VARIABLE: "64"}) == 3
    assert own_size(2, MAX_THREADS, {TEAM_VARIABLE: "lots"}) == 2
    assert own_size(0, MAX_THREADS, {TEAM_VARIABLE: "4"}) == 0


def test_team_thread_names_fit_comm_and_name_the_stress_team() -> None:
    for i in (0, 9, 999, 1023):
        name = f"{TEAM_NAME}{i}"[:15]
        assert owner_of_name(name) == "stress", name
    row = RUNTIMES_BY_KEY["stress"]
    assert row.waits == "spin" and row.variables == (TEAM_VARIABLE,) and not row.caller
    # oversub's own workload adds no variable to what recommend or run export for real jobs.
    assert set(row.variables) <= set(SIZING_VARS)
    assert owner_of_name("stress-test") is None


def _worker(pid: int, team: int) -> ProcessRates:
    counts = (
        OwnerCount("stress", team, team, team, float(team), 0.0),
        OwnerCount("python", 1, 0, 1, 0.0, 0.0),
    )
    return make_process_rates(
        pid=pid,
        threads=team + 1,
        active_threads=team,
        demand=float(team),
        cpu_percent=100.0,
        pools=(),
        thread_env={},
        owner_counts=counts,
        owners={},
    )


def test_an_oversubscribed_team_is_a_costly_finding_whose_fix_is_its_variable() -> None:
    procs = (_worker(11, 2), _worker(12, 2))
    root = make_process_rates(pid=10, ppid=1, threads=1, active_threads=0, demand=0.01)
    iv = make_interval(
        vcpus=2,
        processes=(*procs, root),
        totals=make_totals(
            processes=2,
            demand=4.0,
            active_threads=4,
            busy_processes=2,
            cpu_percent=200.0,
            run_delay_ratio=0.5,
        ),
    )
    over = [f for f in assess(iv, Thresholds()).findings if f.verdict is Verdict.OVERSUBSCRIBED]
    assert len(over) == 1, over
    finding = over[0]
    assert finding.rule == "oversubscribed-pools" and finding.severity is Severity.CRITICAL
    assert "oversub stress team" in finding.message and "spin" in finding.message
    assert "set OMP_NUM_THREADS=1 before the process starts" in finding.fix, finding.fix
    for wrong in ("dask", "ThreadPoolExecutor", "joblib", "threadpoolctl"):
        assert wrong not in finding.fix, finding.fix


def test_a_machine_beyond_the_bound_gets_the_largest_team_stress_starts() -> None:
    size = team_size(None, {}, MAX_THREADS + 976, "team")
    assert size.threads == MAX_THREADS
    assert size.source == f"{MAX_THREADS:,} of the {MAX_THREADS + 976:,} usable vCPUs"


def test_a_team_too_large_in_all_says_what_sized_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TEAM_VARIABLE, "100")
    code, out, err = run_cli(["stress", "--procs", "256"], capsys)
    assert code == 2 and out == "", err
    assert err.strip() == (
        "oversub: error: 256 processes x 100 threads is more than the 16,384 threads stress "
        "starts in all (T = 100: OMP_NUM_THREADS=100; give --threads)"
    )
