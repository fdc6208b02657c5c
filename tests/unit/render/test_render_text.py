"""Terminal renderers (budget, plan, live frame, summary) rendered through a capture Console,
and the plain stderr report."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console, RenderableType

from oversub.core.model import Budget
from oversub.core.names import Severity, Verdict
from oversub.probe.psutil_sampler import PSUTIL_UNAVAILABLE
from oversub.render.budget_text import budget_text
from oversub.render.finalreport import summary_renderable, summary_text
from oversub.render.live import watch_renderable
from oversub.render.phrases import budget_limit_line, unavailable_text
from oversub.render.plan_text import plan_text
from tests.support.builders import (
    make_assessment,
    make_budget,
    make_cpuset,
    make_finding,
    make_host_rates,
    make_interval,
    make_plan,
    make_process_rates,
    make_process_summary,
    make_quota,
    make_quota_budget,
    make_summary,
    make_totals,
)


def render(renderable: RenderableType, width: int = 120) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(renderable)
    return buffer.getvalue()


def line_with(text: str, needle: str) -> str:
    matches = [line for line in text.splitlines() if needle in line]
    assert matches, f"{needle!r} not in output:\n{text}"
    return matches[0]


def row_starting(text: str, first_cell: str) -> str:
    """The table row whose first cell is `first_cell` (a header may contain the word)."""
    matches = [line for line in text.splitlines() if line.split()[:1] == [first_cell]]
    assert matches, f"no row {first_cell!r} in output:\n{text}"
    return matches[0]


# --------------------------------------------------------------------------- budget


def test_budget_quota_binds_and_is_exact() -> None:
    out = budget_text(make_quota_budget(cpuset=make_cpuset()))
    quota_row = line_with(out, "cgroup quota")
    assert "1.50 CPUs (150000/100000 µs) in /kubepods/pod1, cgroup v2" in quota_row
    assert "binds" in quota_row
    assert "binds" not in line_with(out, "Affinity")
    assert "2 CPUs: 0-1 in /kubepods/pod1, cgroup v2" in line_with(out, "cgroup cpuset")
    assert "N = 1 usable vCPU (limited by quota: 1.5 CPUs rounded down)" in out
    assert "fractional quotas round down; at least 1" in out


def test_budget_rows_for_host_topology() -> None:
    b = make_budget(
        numa={0: (0, 1), 1: (2, 3)},
        notes=("no cgroup mount",),
        cpu_model="EPYC",
        cpu_flags=("avx2",),
    )
    out = budget_text(b)
    assert "4 online" in line_with(out, "Logical CPUs")
    assert "binds" in line_with(out, "Logical CPUs")  # limited_by none: the host's CPUs
    assert "2 cores, 2 threads per core" in line_with(out, "Physical cores (SMT)")
    assert "node 0: 0-1; node 1: 2-3" in line_with(out, "NUMA nodes")
    assert "4 CPUs: 0-3" in line_with(out, "Affinity")
    assert "none" in line_with(out, "cgroup quota")
    assert "note: no cgroup mount" in out
    assert "CPU model: EPYC" in out and "avx2" in out
    assert "no limit: all 4 logical CPUs" in out


def test_budget_unknown_smt_and_numa() -> None:
    out = budget_text(make_budget(physical=None, cores=(), numa={}))
    assert "unknown" in line_with(out, "Physical cores")
    assert "not reported" in line_with(out, "NUMA nodes")
    assert "CPU model" not in out


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (
            make_budget(vcpus=2, affinity=(0, 5), limited_by="affinity"),
            "N = 2 usable vCPUs (limited by affinity: 2 CPUs)",
        ),
        (
            make_budget(vcpus=3, cpuset=make_cpuset(cpus=(0, 1, 2)), limited_by="cpuset"),
            "N = 3 usable vCPUs (limited by cpuset: 3 CPUs)",
        ),
        (
            make_budget(vcpus=1, quota=make_quota(cpus=0.5), limited_by="quota"),
            "N = 1 usable vCPU (limited by quota: 0.5 CPUs, raised to the minimum of 1)",
        ),
        (
            make_budget(vcpus=2, quota=make_quota(cpus=2.0), limited_by="quota"),
            "N = 2 usable vCPUs (limited by quota: 2 CPUs)",
        ),
        (
            make_budget(pid=0, vcpus=8, logical=8),
            "N = 8 usable vCPUs (given, not measured)",
        ),
    ],
)
def test_budget_limit_line(budget: Budget, expected: str) -> None:
    assert budget_limit_line(budget) == expected


# --------------------------------------------------------------------------- plan


def test_plan_text_numbers_exports_code_and_binding() -> None:
    p = make_plan(procs_source="LOCAL_WORLD_SIZE", binding=((0, 1), (2, 3, 5)))
    out = plan_text(p, width=120)
    assert "LOCAL_WORLD_SIZE" in line_with(out, "M ")
    assert "all host CPUs" in line_with(out, "N ")
    assert "2" in line_with(out, "threads per main process")
    assert "export OMP_NUM_THREADS=2" in out
    assert "export OPENBLAS_NUM_THREADS=2" in out
    assert "torch.set_num_threads(2)" in out
    assert "threadpoolctl.threadpool_limits(2)" in out
    assert "worker_init_fn" not in out  # no workers, no worker advice
    assert "taskset -c 0-1 <cmd>" in out and "numactl -C 0-1 <cmd>" in out
    assert "taskset -c 2-3,5 <cmd>" in out


def test_plan_text_workers_and_warnings() -> None:
    p = make_plan(
        procs=2,
        workers=3,
        threads_per_process=1,
        leftover=-4,
        oversubscribed=True,
        env={"OMP_NUM_THREADS": "1"},
        worker_env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
        binding=(),
        warnings=("8 threads on 4 vCPUs: reduce workers",),
    )
    p = p._replace(budget=make_budget(pid=0, notes=("budget given with --cpus",)))
    out = plan_text(p, width=120)
    assert "given" in line_with(out, "N ")
    assert "note: budget given with --cpus" in out
    assert "oversub.worker_init_fn" in out
    assert "export MKL_NUM_THREADS=1" in out  # the workers' variables
    # Warnings are diagnostics: the CLI prints them on stderr, not in the plan.
    assert "reduce workers" not in out
    assert "taskset" not in out
    assert "Binding: none, since --cpus gives a count" in out


def test_plan_text_over_budget_says_by_how_much() -> None:
    # Issue 11 item 6: "leftover -7 ... CPUs not handed out".
    p = make_plan(
        procs=3,
        workers=2,
        threads_per_process=1,
        leftover=-5,
        oversubscribed=True,
        budget=make_budget(),
    )
    out = plan_text(p, width=120)
    assert "leftover" not in out and "-5" not in out
    row = line_with(out, "over by")
    assert " 5 " in row and "the plan needs 9 threads on 4 vCPUs (2.2x)" in row


def test_plan_text_prints_one_export_block_when_workers_get_the_same() -> None:
    # Issue 11 item 12: with workers and T = 1 the same block was printed twice.
    env = {"OMP_NUM_THREADS": "1"}
    plan = make_plan(workers=1, threads_per_process=1, env=env, worker_env=env)
    out = plan_text(plan, width=120)
    assert out.count("export OMP_NUM_THREADS=1") == 1
    assert "main processes and workers alike" in out
    assert "In each worker's environment" not in out


# --------------------------------------------------------------------------- live


def test_watch_frame_has_header_verdict_table_and_fix() -> None:
    budget = make_budget(vcpus=2, affinity=(0, 1), limited_by="affinity")
    host = make_host_rates(throttled_ratio=0.25, throttled_s=0.5, psi_some=0.3)
    iv = make_interval(host=host, unavailable=("schedstat",))
    out = render(watch_renderable(iv, make_assessment(), budget, elapsed=12.34, samples=12))
    assert "pid 1234" in out and "12.3 s" in out and "12 samples" in out
    assert "N = 2 usable vCPUs (limited by affinity: 2 CPUs)" in out
    assert "outside the tree 0.05 CPUs" in out and "PSI some 30%" in out
    assert "throttled 25% of periods (0.50 s)" in out
    assert "unavailable: run delay (no schedstat in this kernel)" in out
    assert "OVERSUBSCRIBED" in out
    row = line_with(out, "2001")
    for cell in ("python train.py --worker", "2/3", "100", "2.00", "50%", "260"):
        assert cell in row
    assert "active/total" in out  # the Threads column says what its two numbers are
    # Issue 11 item 14: pools once, in the table below the numbers, with the variables that
    # size them, set or unset.
    assert "libgomp, torch" not in row
    pools_rows = [line for line in out.splitlines() if "libgomp, torch" in line]
    assert len(pools_rows) == 2 and all("OMP_NUM_THREADS unset" in line for line in pools_rows)
    root = next(line for line in out.splitlines() if line.strip().startswith("1234"))
    assert "python train.py" in root and "-" in root  # the root's label, unknown delay
    total = row_starting(out, "total")
    assert "4.00 / 2" in total and "4/7" in total
    assert "[critical] oversubscribed-pools:" in out
    assert "fix: export OMP_NUM_THREADS=1" in out


def test_watch_frame_sorts_by_cpu_and_caps_rows() -> None:
    procs = tuple(
        make_process_rates(pid=3000 + i, cmdline=f"w{i}", cpu_percent=float(i)) for i in range(5)
    )
    iv = make_interval(processes=procs)
    ok = make_assessment(verdict=Verdict.OK, findings=())
    out = render(watch_renderable(iv, ok, make_budget(), elapsed=1.0, samples=2, max_processes=3))
    positions = [out.index(f"w{i} ") for i in (4, 3, 2)]
    assert positions == sorted(positions)
    assert "w1 " not in out and "… 2 more" in out
    assert "OK" in out and "No findings." in out


@pytest.mark.parametrize("verdict", list(Verdict))
def test_every_verdict_has_a_banner(verdict: Verdict) -> None:
    out = render(
        watch_renderable(
            make_interval(),
            make_assessment(verdict=verdict),
            make_budget(),
            elapsed=1.0,
            samples=1,
        )
    )
    assert verdict.value.upper() in out


def test_summary_renderable_reports_mean_peak_and_notes() -> None:
    s = make_summary(
        processes=(
            make_process_summary(pid=2001, cpu_percent=97.0, cpu_percent_peak=100.0),
            make_process_summary(pid=2002, exited=True, seconds=8.0, cpu_percent=12.0),
        ),
        notes=("schedstat missing for 1 thread",),
        target_exited=True,
    )
    out = render(summary_renderable(s))
    assert "OVERSUBSCRIBED" in out and "target exited" in out
    assert "20 samples" in out and "10.0 s" in out
    assert "97/100" in line_with(out, "2001")
    assert "(exited)" in line_with(out, "2002")
    assert out.index("2001") < out.index("2002")  # sorted by CPU
    assert "4.00/4.20" in row_starting(out, "total")
    assert "fix: export OMP_NUM_THREADS=1" in out
    assert "note: schedstat missing for 1 thread" in out


def test_summary_text_is_plain() -> None:
    s = make_summary(
        findings=(
            make_finding(),
            make_finding(
                rule="pool-default",
                severity=Severity.WARNING,
                verdict=Verdict.AT_RISK,
                message="Pools sized by default.",
                fix="Set OMP_NUM_THREADS.",
            ),
        )
    )
    text = summary_text(s)
    lines = text.splitlines()
    assert lines[0].startswith("oversub: oversubscribed (")
    assert f"[critical] oversubscribed-pools: {make_finding().message}" in lines
    assert lines[lines.index("[warning] pool-default: Pools sized by default.") + 1] == (
        "  fix: Set OMP_NUM_THREADS."
    )
    totals = next(line for line in lines if line.startswith("totals:"))
    assert "demand 4.00 runnable threads on N = 2" in totals and "peak demand 4.20" in totals
    assert "\x1b" not in text and not text.endswith("\n")
    text.encode("ascii")  # CI logs: no fancy punctuation


def test_summary_text_without_findings_or_host() -> None:
    s = make_summary(
        verdict=Verdict.OK,
        findings=(),
        host=make_host_rates(outside_cpus=None, steal_cpus=None, psi_some=None),
    )
    text = summary_text(s)
    assert text.startswith("oversub: ok")
    assert "fix:" not in text and "host:" not in text


def test_summary_text_says_which_signals_are_unavailable() -> None:
    s = make_summary(unavailable=("schedstat", "psi"))
    assert "unavailable here: run delay (no schedstat in this kernel), CPU pressure (no PSI" in (
        summary_text(s)
    )
    assert "unavailable here" not in summary_text(make_summary(unavailable=()))


def test_preflight_report_has_no_run_line_or_totals() -> None:
    s = make_summary(
        root_pid=0, samples=0, preflight=True, notes=("static preflight: nothing was sampled",)
    )
    text = summary_text(s)
    assert "static preflight, nothing sampled" in text
    assert "pid 0" not in text and "totals:" not in text


def test_reports_fit_an_80_column_terminal_without_cutting_numbers() -> None:
    budget = make_budget(vcpus=2, affinity=(0, 1), limited_by="affinity")
    frame = render(
        watch_renderable(make_interval(), make_assessment(), budget, elapsed=1.0, samples=1),
        width=80,
    )
    report = render(summary_renderable(make_summary()), width=80)
    for out in (frame, report):
        rows = [line for line in out.splitlines() if "2001" in line or "total" in line]
        assert rows and not any("…" in line for line in rows), out


def test_unavailable_says_why_and_how_to_see_pools() -> None:
    text = unavailable_text(("schedstat", "pools", "thread_env"))
    assert text.startswith("run delay (no schedstat in this kernel), ")
    assert "pools and thread variables (another user's process: run as that user or root;" in text
    assert unavailable_text(("psi",)) == "CPU pressure (no PSI in this kernel)"
    assert unavailable_text(("something-new",)) == "something-new"  # unknown names pass through
    # Without /proc (psutil) pools are missing for another reason: no permission hint.
    assert unavailable_text(PSUTIL_UNAVAILABLE).endswith(
        "context switches, pools, CPU pressure (no PSI in this kernel)"
    )


def test_unavailable_live_pools_names_every_cause_not_only_permission() -> None:
    # A process whose reads oversub abandoned (`probe.memreader`'s quarantine, and every
    # process once reads stopped) is unread for that reason, not for want of root (#38).
    text = unavailable_text(("live_pools",))
    assert "needs root or being its ancestor" in text
    assert "did not return and oversub reads nothing of it any more" in text
    assert "could not be read safely" in text and "FUSE" in text
    # Pools and variables never read before a read of the process was abandoned.
    both = unavailable_text(("pools", "thread_env"))
    assert both.endswith("abandoned a read of it)") and "another user's process" in both


@pytest.mark.parametrize("width", [36, 40])
def test_narrow_terminal_lists_rows_instead_of_cutting_cells(width: int) -> None:
    budget = make_budget(vcpus=2, affinity=(0, 1), limited_by="affinity")
    frame = render(
        watch_renderable(make_interval(), make_assessment(), budget, elapsed=1.0, samples=1),
        width=width,
    )
    report = render(summary_renderable(make_summary()), width=width)
    for out in (frame, report):
        assert max(len(line.rstrip()) for line in out.splitlines()) <= width, out
        # The pid and the evidence survive whole: no cell cut to "2…" or dropped.
        assert "pid 2001 python" in out, out
        assert "delay 50%" in out, out
        assert not any(line.strip().endswith("…") for line in out.splitlines()), out
    # Wide enough for the table: the table, not the list.
    assert "pid 2001 python" not in render(summary_renderable(make_summary()), width=80)


def test_live_pool_sizes_are_shown_and_code_settings_named() -> None:
    from oversub.render.finalreport import summary_text

    s = make_summary(
        processes=(
            make_process_summary(
                pid=11, pools=("openblas",), thread_env={}, live_pools={"openblas": 1}
            ),
            make_process_summary(
                pid=12, pools=("openblas",), thread_env={}, live_pools={"openblas": 1}
            ),
            make_process_summary(
                pid=13, pools=("openblas",), thread_env={}, live_pools={"openblas": 2}
            ),
        ),
    )
    text = summary_text(s)
    assert (
        "pool sizes read live: OpenBLAS 1 thread in pids 11, 12 (set in code); "
        "OpenBLAS 2 threads in pid 13\n" in text + "\n"
    ), text


def test_a_run_not_judged_has_no_verdict_in_the_terminal_or_plain_report() -> None:
    # Issue 11 item 2: "ok (the tree's runnable threads fit...)" above "nothing was measured".
    s = make_summary(
        verdict=None, not_judged="no complete interval was sampled", samples=0, findings=()
    )
    text = summary_text(s)
    assert text.splitlines()[0].startswith(
        "oversub: not judged (no complete interval was sampled), pid 1234"
    )
    terminal = render(summary_renderable(s))
    assert "NOT JUDGED" in terminal and "no complete interval was sampled" in terminal
    for out in (text, terminal):
        assert " OK " not in out and "fit in its vCPUs" not in out


def test_a_delay_ratio_of_almost_nothing_is_shown_as_low() -> None:
    # Issue 11 item 10: an idle tree showed "run delay 94%" next to "demand 0.00".
    idle = make_process_rates(active_threads=0, cpu_percent=0.1, demand=0.002, run_delay_ratio=0.94)
    totals = make_totals(
        processes=1,
        threads=3,
        active_threads=0,
        cpu_percent=0.1,
        demand=0.002,
        run_delay_ratio=0.94,
    )
    iv = make_interval(processes=(idle,), totals=totals)
    ok = make_assessment(verdict=Verdict.OK, findings=())
    frame = render(watch_renderable(iv, ok, make_budget(), elapsed=1.0, samples=1))
    assert "94%" not in frame
    assert " low " in row_starting(frame, "2001") and " low " in row_starting(frame, "total")
    s = make_summary(totals=totals, totals_peak=totals, findings=(), verdict=Verdict.OK)
    text = summary_text(s)
    assert "94%" not in text
    assert "run delay low (0.00 CPU-s/s waited, below --min-wait 0.05)" in text
    # Real waiting keeps its percentage.
    busy = render(
        watch_renderable(make_interval(), make_assessment(), make_budget(), elapsed=1.0, samples=1)
    )
    assert "50%" in row_starting(busy, "total")


def test_names_tell_the_root_workers_and_helpers_apart() -> None:
    # Issue 11 item 14: every process was "python".
    root = make_process_rates(
        pid=10, ppid=1, cmdline="/venv/bin/python -m oversub stress --procs 2"
    )
    tracker = make_process_rates(
        pid=11,
        ppid=10,
        cmdline="/venv/bin/python -B -c from multiprocessing.resource_tracker import main;main(3)",
    )
    spawned = make_process_rates(
        pid=12,
        ppid=10,
        cmdline="/venv/bin/python -B -c from multiprocessing.spawn import spawn_main; "
        "spawn_main(tracker_fd=4, pipe_handle=6) --multiprocessing-fork",
    )
    forked = make_process_rates(pid=13, ppid=10, cmdline=root.cmdline)
    iv = make_interval(processes=(root, tracker, spawned, forked))
    frame = render(watch_renderable(iv, make_assessment(), make_budget(), elapsed=1.0, samples=1))
    assert "python -m oversub stress" in row_starting(frame, "10")
    assert "resource tracker" in row_starting(frame, "11")
    assert "spawn worker" in row_starting(frame, "12")
    assert "fork of 10" in row_starting(frame, "13")


EXECNET_BOOT = "/venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))"
"""A pytest-xdist worker without setproctitle, as `ps` shows it (pytest-xdist 3.8)."""


@pytest.mark.parametrize(
    ("cmdline", "parent", "label"),
    [
        (EXECNET_BOOT, "/venv/bin/python -m pytest -n 2 tests", "pytest-xdist worker"),
        (EXECNET_BOOT, "/venv/bin/python /venv/bin/pytest -n 2", "pytest-xdist worker"),
        (EXECNET_BOOT, "/venv/bin/python app.py", "execnet worker"),
        ("[pytest-xdist running] tests/test_a.py::test_b", None, "pytest-xdist worker"),
        (
            "/venv/bin/python -c from joblib.externals.loky.backend.popen_loky_posix import "
            "main; main() --process-name LokyProcess-1 --pipe 8",
            "/venv/bin/python job.py",
            "loky worker",
        ),
        # A fork of an xdist worker keeps its command line: still named as a fork.
        (EXECNET_BOOT, EXECNET_BOOT, "fork of 1"),
    ],
)
def test_pool_workers_are_named_by_their_role(cmdline: str, parent: str | None, label: str) -> None:
    # As spawn workers are: "python -u -c import sys;exec(eval(sys.stdin.re…" said nothing.
    from oversub.render.phrases import process_label

    assert process_label("python", cmdline, parent, 1) == label


@pytest.mark.parametrize(
    ("cmdline", "label"),
    [
        # A console script: the kernel runs its interpreter with its path.
        (
            "/work/main/.venv/bin/python /work/main/.venv/bin/oversub stress --procs 4",
            "oversub stress --procs 4",
        ),
        (
            "/usr/bin/python3.11 /home/me/.local/bin/torchrun --nproc 2 a.py",
            "torchrun --nproc 2 a.py",
        ),
        ("/usr/bin/python3 /home/me/project/train.py --epochs 1", "python3 train.py --epochs 1"),
        ("/venv/bin/python -m oversub stress", "python -m oversub stress"),
        ("/venv/bin/python -u /x/train.py", "python -u /x/train.py"),
        ("python", "python"),
        ("/bin/bash ./run.sh", "bash ./run.sh"),
    ],
)
def test_a_process_is_named_for_the_program_the_user_ran(cmdline: str, label: str) -> None:
    # Issue 39: the root row of `oversub stress` showed the venv's python path.
    from oversub.render.phrases import process_label

    assert process_label("python3", cmdline, None, 1) == label


def test_sizing_variables_not_tuning_ones() -> None:
    # Issue 11 item 14: OPENBLAS_CORETYPE=Haswell filled the column; OPENBLAS_NUM_THREADS
    # unset, the fact that matters, was only in the fix.
    from oversub.render.phrases import sizing_vars_text

    env = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512"}
    assert sizing_vars_text(("openblas",), env) == "OPENBLAS_NUM_THREADS unset"
    assert sizing_vars_text(("libgomp", "openblas"), {"OMP_NUM_THREADS": "1"}) == (
        "OMP_NUM_THREADS=1"
    )
    assert sizing_vars_text((), {"MKL_NUM_THREADS": "2", "KMP_BLOCKTIME": "0"}) == (
        "MKL_NUM_THREADS=2"
    )
    assert sizing_vars_text(("openblas",), None) == "?"
    assert sizing_vars_text((), env) == "-"


def test_on_a_terminal_a_long_fix_continues_under_its_text() -> None:
    # Issue 11 item 16: continuation lines of a fix started at column 0.
    long_fix = "set OMP_NUM_THREADS=1 " * 12
    s = make_summary(findings=(make_finding(fix=long_fix.strip()),))
    out = render(summary_renderable(s), width=60)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  fix: "))
    continuation = lines[first + 1 : first + 3]
    assert continuation and all(re.match(r" {7}\S", line) for line in continuation), out


# --------------------------------------------------------------------------- hostile text

HOSTILE_NAME = "\x1b[2J\x1b]0;x\x07[/]"
"""A process name (comm, 15 bytes) that clears the screen, sets the window title, and is
rich markup that does not parse; shown when the command line is empty."""
HOSTILE_VALUE = "8\x1b]0;x\x07\x1b[2J\n::error::forged\noversub check: pass"


def hostile_summary() -> object:
    finding = make_finding(message=f"pid 7 {HOSTILE_NAME} runs", fix=f"set {HOSTILE_VALUE}")
    process = make_process_summary(
        name=HOSTILE_NAME, cmdline="", thread_env={"OMP_NUM_THREADS": HOSTILE_VALUE}
    )
    return make_summary(findings=(finding,), processes=(process,), notes=(HOSTILE_VALUE,))


@pytest.mark.parametrize("width", [200, 40])
def test_live_frame_and_summary_show_control_characters_escaped(width: int) -> None:
    rates = make_process_rates(
        name=HOSTILE_NAME, cmdline="", thread_env={"OMP_NUM_THREADS": HOSTILE_VALUE}
    )
    frame = watch_renderable(
        make_interval(processes=(rates,)),
        make_assessment(findings=(make_finding(fix=HOSTILE_VALUE),)),
        make_budget(),
        elapsed=1.0,
        samples=1,
    )
    summary = summary_renderable(hostile_summary())  # type: ignore[arg-type]
    for out in (render(frame, width), render(summary, width)):
        assert "\x1b" not in out and "\x07" not in out  # no colour here: any ESC is theirs
        assert "\\x1b]0;x\\x07" in out.replace("\n", "")  # shown, as paths are
        assert not any(line.startswith("::error::") for line in out.splitlines())
        assert "[/]" in out  # a name, not markup


def test_plain_report_keeps_one_line_per_fact() -> None:
    text = summary_text(hostile_summary())  # type: ignore[arg-type]
    lines = text.splitlines()
    assert not any(line.startswith(("::", "oversub check:")) for line in lines), text
    assert "\x1b" not in text and "\x07" not in text
    assert f"note: {HOSTILE_VALUE.encode('unicode_escape').decode()}" in lines
