"""Every line true: each finding template and message, for singular and plural counts and for
thread variables already at the recommended value, checked against its own evidence.

Issue 11's "Done when": this renders every rule of `core.rules.RUNTIME_RULES` and
`core.rules.PREFLIGHT_RULES`, every plan warning and text, every budget line and every
closing line of `check`, through every human format (plain stderr report, terminal, Markdown,
JUnit), over grids of N, M, threads and workers that include 1 (singular), 0 and many, and
checks the text for what a reader would catch:

- a count whose noun disagrees with it ("1 vCPUs", "2 thread", "thread(s)");
- a Python repr ("None", "nan", "inf") in human text;
- a number that contradicts the evidence beside it (N, demand, threads per process, the
  processes counted, the total threads of a plan);
- a fix that asks for a value a variable already has.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping, Sequence

import pytest
from rich.console import Console

from oversub.analysis.plans import make_plan, synthetic_budget
from oversub.analysis.policy import gate
from oversub.analysis.preflight import preflight
from oversub.analysis.summary import unmeasured_summary
from oversub.analysis.verdict import assess
from oversub.cli.check.runners import CheckOptions, report
from oversub.core.model import Budget
from oversub.core.names import FailOn, Verdict
from oversub.core.results import Assessment, CheckOutcome, Finding, Interval
from oversub.core.rules import PREFLIGHT_RULES
from oversub.core.rules import RUNTIME_RULES as RULES
from oversub.core.thresholds import Thresholds
from oversub.render.finalreport import summary_renderable, summary_text
from oversub.render.junit import summary_junit
from oversub.render.live import watch_renderable
from oversub.render.markdown import summary_markdown
from oversub.render.phrases import budget_limit_line, totals_line
from oversub.render.plan_text import plan_text
from tests.support.builders import (
    CAUSE_KINDS,
    IDLE,
    ROOT,
    Host,
    Load,
    Proc,
    analyse,
    busy_workers,
    cause_proc,
    make_budget,
    make_cpuset,
    make_process_summary,
    make_quota,
    make_summary,
    make_totals,
)

TH = Thresholds()
NOUNS = r"(?:process|thread|CPU|vCPU|sample|worker|task|proc|finding|core|pool|second)"
ADJECTIVES = r"(?:(?:busy|single-thread|main|idle|usable|active) )?"
BAD_SINGULAR = re.compile(rf"(?<![.\d])\b1 {ADJECTIVES}{NOUNS}(?:s|es)\b")
BAD_PLURAL = re.compile(rf"(?<![.\d-])\b(?:0|[2-9]|[1-9]\d+) {ADJECTIVES}{NOUNS}(?![\w-])")
REPRS = re.compile(r"\b(?:None|nan|inf|True|False)\b|\(s\)")


def problems(text: str) -> list[str]:
    """Wording a reader would catch in `text`, whatever produced it."""
    found = [m.group(0) for m in BAD_SINGULAR.finditer(text)]
    found += [m.group(0) for m in BAD_PLURAL.finditer(text)]
    found += [m.group(0) for m in REPRS.finditer(text)]
    return found


def test_the_checker_catches_what_the_issue_saw() -> None:
    # The strings issue 11 quotes: a harness that cannot fail proves nothing.
    for bad in (
        "1 vCPUs",
        "1 processes",
        "1 samples",
        "1 threads",
        "1 CPUs",
        "2 thread",
        "0 process",
        "1 busy processes",
        "use 2 thread(s)",
        "throttled_ratio: None",
    ):
        assert problems(bad), bad
    for good in ("1 vCPU", "2 CPUs", "1.0 threads", "2 CPU-seconds", "0-1", "1 thread each"):
        assert problems(good) == [], good


def terminal(renderable: object, width: int = 100) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


# --------------------------------------------------------------------------- scenarios


def root() -> Proc:
    return Proc(ROOT, (IDLE,), ppid=1, cmdline="python launch.py")


def forked(children: int, *, hung: bool) -> list[Proc]:
    parent = Proc(ROOT, (Load(cpu=0.5), IDLE), ppid=1, cmdline="python train.py")
    return [parent] + [
        Proc(
            301 + i,
            (IDLE,) if hung else (Load(cpu=0.3),),
            cmdline="python train.py",
            pools=("libgomp",),
            wait="futex-private",
        )
        for i in range(children)
    ]


def scenarios() -> Iterator[tuple[str, Sequence[Proc], int, Host, float]]:
    """(id, processes, N, host, seconds): every rule, with counts of 1 and of many."""
    for n in (1, 2, 4):
        for m, k in ((1, 3), (2, 2), (3, 2)):
            if m * k > 1.15 * n:
                yield (
                    f"pools-n{n}-m{m}",
                    busy_workers(m, k, delay=0.5, pools=("libgomp",)),
                    n,
                    Host(),
                    1.0,
                )
                yield (
                    f"pools-torch-openblas-n{n}-m{m}",
                    busy_workers(m, k, delay=0.5, pools=("libgomp", "openblas", "torch")),
                    n,
                    Host(),
                    1.0,
                )
        for m in (2, 3, 5):
            if m > 1.15 * n:
                yield f"processes-n{n}-m{m}", busy_workers(m, 1, delay=0.5), n, Host(), 1.0
                yield f"beyond-budget-n{n}-m{m}", busy_workers(m, 1, delay=0.0), n, Host(), 1.0
        for m in (1, 2):
            if m <= n:
                yield (
                    f"outside-n{n}-m{m}",
                    busy_workers(m, 1, delay=0.34),
                    n,
                    Host(outside=1.0),
                    1.0,
                )
                steal = Host(outside=0.0, steal=1.0)
                yield f"steal-n{n}-m{m}", busy_workers(m, 1, delay=0.34), n, steal, 1.0
                unknown = Host(outside=None, steal=None)
                yield f"unattributed-n{n}-m{m}", busy_workers(m, 1, delay=0.34), n, unknown, 1.0
        quota = Host(periods=10, throttled=5, throttled_s=0.5)
        yield f"quota-n{n}", [Proc(ROOT, (Load(cpu=0.5),), ppid=1)], n, quota, 1.0
        busy = n + 1
        yield f"busy-threads-n{n}", [root(), Proc(201, (Load(cpu=0.25),) * busy)], n, Host(), 1.0
        # One process of 5,001 threads started in a burst: none is active for long, together
        # they keep several runnable (was "1 single-thread process ... will not help").
        burst = (Load(cpu=0.0005 * n, delay=0.0004 * n),) * 5001
        yield f"burst-threads-n{n}", [root(), Proc(201, burst)], n, Host(), 1.0
        yield (
            f"busy-threads-2procs-n{n}",
            [root(), *(Proc(201 + i, (Load(cpu=0.21),) * busy) for i in range(2))],
            n,
            Host(),
            1.0,
        )
        yield (
            f"pool-default-n{n}",
            [root()]
            + [
                Proc(
                    201 + i,
                    (Load(cpu=0.2),) * 2,
                    pools=("openblas",),
                    env={"OPENBLAS_CORETYPE": "Haswell"},
                )
                for i in range(2)
            ],
            n,
            Host(),
            1.0,
        )
    # One target, several causes (issue 38): each process judged on its own threads.
    for n in (1, 2, 4):
        for mix in (("polars", "openblas"), ("openblas", "single"), CAUSE_KINDS):
            procs = [root(), *(cause_proc(kind, 201 + i) for i, kind in enumerate(mix))]
            yield f"causes-{'+'.join(mix)}-n{n}", procs, n, Host(), 1.0
    for children in (1, 2):
        yield f"fork-hang-{children}", forked(children, hung=True), 2, Host(), TH.idle_seconds
        yield f"fork-after-threads-{children}", forked(children, hung=False), 2, Host(), 1.0
        orphans = [root(), *(Proc(401 + i, (Load(cpu=0.5),), ppid=999) for i in range(children))]
        yield f"orphan-{children}", orphans, 2, Host(), 1.0
    yield "no-schedstat", [Proc(ROOT, (IDLE,), ppid=1, schedstat=False)], 2, Host(), 1.0


SCENARIOS = list(scenarios())


def judged(procs: Sequence[Proc], n: int, host: Host, dt: float) -> tuple[Interval, Assessment]:
    iv = analyse(procs, n, dt=dt, host=host, thresholds=TH)
    return iv, assess(iv, TH)


def test_the_scenarios_reach_every_rule() -> None:
    fired = {
        f.rule
        for _, procs, n, host, dt in SCENARIOS
        for f in judged(procs, n, host, dt)[1].findings
    }
    assert fired == set(RULES)


# --------------------------------------------------------------------------- findings


ASSIGNMENT = re.compile(r"\bset ((?:[A-Z_]+=\d+)(?: and [A-Z_]+=\d+)*)")


def contradictions(f: Finding, n: int, iv: Interval | None = None) -> list[str]:
    """Statements in the message or fix that disagree with the finding's evidence (and,
    given the interval, with the processes it names)."""
    out: list[str] = []
    text = f"{f.message} {f.fix}"
    for value in re.findall(r"they are (\d+) single-thread process", text):
        if int(value) != f.evidence.get("processes"):
            out.append(f"{value} single-thread processes, evidence {f.evidence['processes']}")
        if f.evidence.get("multi_thread_processes"):
            out.append("single-thread processes, but multi_thread_processes in the evidence")
        named = [] if iv is None else [p for p in iv.processes if p.pid in f.pids]
        for p in named:
            if p.demand > 1.5:  # one thread cannot keep more than one runnable (and a margin)
                out.append(f"pid {p.pid} single-thread, but it keeps {p.demand:.1f} runnable")
    for value in re.findall(r"keeps (\d+\.\d) runnable at once", text):
        if value != f"{f.evidence.get('busiest_process_demand'):.1f}":
            out.append(f"{value} runnable at once, evidence {f.evidence}")
    for value in re.findall(r"with ([\d,]+) threads? in it", text):
        if int(value.replace(",", "")) != f.evidence.get("busiest_process_threads"):
            out.append(f"{value} threads in it, evidence {f.evidence}")
    for value in re.findall(r"\bon (\d+) v?CPUs?\b", text):
        if int(value) != n:
            out.append(f"on {value} CPUs, but N = {n}")
    demand = f.evidence.get("demand")
    for value in re.findall(r"keeps (\d+\.\d) threads runnable", text):
        if isinstance(demand, float) and value != f"{demand:.1f}":
            out.append(f"keeps {value} runnable, evidence demand {demand}")
    threads = f.evidence.get("threads_per_process")
    if isinstance(threads, int):
        for group in ASSIGNMENT.findall(f.fix):
            for assignment in group.split(" and "):
                if int(assignment.split("=")[1]) != threads:
                    out.append(f"set {assignment}, evidence threads_per_process {threads}")
        for call in re.findall(r"(?:set_num_threads|threadpool_limits)\((\d+)\)", f.fix):
            if int(call) != threads:
                out.append(f"a call with {call}, evidence threads_per_process {threads}")
    processes = f.evidence.get("processes")
    for value in re.findall(r"each of the (\d+) busy processes", f.fix):
        if int(value) != processes:
            out.append(f"each of the {value} busy processes, evidence processes {processes}")
    return out


@pytest.mark.parametrize(
    ("procs", "n", "host", "dt"),
    [pytest.param(procs, n, host, dt, id=name) for name, procs, n, host, dt in SCENARIOS],
)
def test_every_finding_reads_true(procs: Sequence[Proc], n: int, host: Host, dt: float) -> None:
    iv, assessment = judged(procs, n, host, dt)
    assert assessment.findings
    for f in assessment.findings:
        text = f"{f.message} || {f.fix}"
        assert problems(text) == [], text
        assert contradictions(f, n, iv) == [], text


def already_set(pools: tuple[str, ...], env: Mapping[str, str]) -> list[Proc]:
    """Two busy processes on 2 CPUs (T = 1) whose variables already say 1 thread."""
    return busy_workers(2, 2, delay=0.5, pools=pools, env=env)


ALREADY_SET = [
    pytest.param(("libgomp",), {"OMP_NUM_THREADS": "1"}, id="omp"),
    pytest.param(
        ("libgomp", "openblas"), {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}, id="blas"
    ),
    pytest.param(
        (),
        dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), "1"),
        id="no-pool",
    ),
]


@pytest.mark.parametrize(("pools", "env"), ALREADY_SET)
def test_a_fix_never_asks_for_a_value_already_set(
    pools: tuple[str, ...], env: Mapping[str, str]
) -> None:
    # Issue 11 item 1 (done in issue 12): `OMP_NUM_THREADS=1 oversub check -- oversub stress
    # --procs 2 --threads 2` said "set OMP_NUM_THREADS=1 ... before the processes start";
    # after a DataLoader fix, busy-threads-exceed asked for variables already at 1.
    contending = already_set(pools, env)  # over budget and waiting, on 2 CPUs: T = 1
    busy = [  # busy but not waiting, on 1 CPU: T = 1
        root(),
        *(Proc(201 + i, (Load(cpu=0.3),) * 2, env=dict(env), pools=pools) for i in range(2)),
    ]
    for procs, n, expected in ((contending, 2, Verdict.OVERSUBSCRIBED), (busy, 1, Verdict.AT_RISK)):
        _, assessment = judged(procs, n, Host(), 1.0)
        assert assessment.verdict is expected, assessment
        for f in assessment.findings:
            assert problems(f"{f.message} {f.fix}") == [], f
            for var, value in env.items():
                assert f"set {var}={value}" not in f.fix, f.fix
                assert f"{var}={value} (and" not in f.fix, f.fix
                assert f"{var}={value} in them" not in f.fix, f.fix


# --------------------------------------------------------------------------- reports


def summaries() -> Iterator[tuple[str, object]]:
    """Summaries for every renderer: each scenario's findings, singular and plural totals,
    not judged, a preflight."""
    for name, procs, n, host, dt in SCENARIOS[::3]:
        _, assessment = judged(procs, n, host, dt)
        budget = make_budget(vcpus=n, affinity=tuple(range(n)), limited_by="affinity")
        yield (
            name,
            make_summary(budget=budget, verdict=assessment.verdict, findings=assessment.findings),
        )
    one = make_totals(processes=1, threads=1, active_threads=1, busy_processes=1)
    single = make_summary(
        samples=1,
        totals=one,
        totals_peak=one,
        processes=(make_process_summary(threads=1, active_threads_peak=1),),
        budget=make_budget(vcpus=1, affinity=(0,), limited_by="affinity"),
    )
    yield "singular", single
    yield (
        "not-judged",
        make_summary(verdict=None, not_judged="nothing was measured", samples=0, findings=()),
    )
    for n in (1, 2):
        for procs, threads, workers in ((1, 1, 0), (2, 2, 0), (2, 1, 2), (1, 1, 1), (3, 1, 0)):
            a = preflight(synthetic_budget(n), procs, threads, workers)
            s = unmeasured_summary(
                synthetic_budget(n), 0, note="static preflight: nothing was sampled", assessment=a
            )
            yield f"preflight-{n}-{procs}x{threads}+{workers}", s._replace(preflight=True)


@pytest.mark.parametrize(("summary"), [pytest.param(s, id=name) for name, s in summaries()])
def test_every_report_reads_true(summary: object) -> None:
    from oversub.core.results import Summary

    assert isinstance(summary, Summary)
    texts = {
        "plain": summary_text(summary),
        "terminal": terminal(summary_renderable(summary)),
        "narrow": terminal(summary_renderable(summary), width=40),
        "markdown": summary_markdown(
            summary,
            command=["python", "train.py"],
            exit_status=1,
            command_status=0,
            gate=gate(summary, FailOn.OVERSUBSCRIBED),
        ),
        "junit": summary_junit(summary, gate(summary, FailOn.OVERSUBSCRIBED)),
    }
    for name, text in texts.items():
        assert problems(text) == [], (name, text)
    headline = texts["plain"].splitlines()[0]
    if summary.verdict is None:
        assert headline.startswith("oversub: not judged (")
    elif summary.preflight:
        assert "tree" not in texts["plain"] and "runnable" not in texts["plain"], texts["plain"]


@pytest.mark.parametrize(
    ("procs", "n", "host", "dt"), [pytest.param(*s[1:], id=s[0]) for s in SCENARIOS[::4]]
)
def test_every_live_frame_reads_true(procs: Sequence[Proc], n: int, host: Host, dt: float) -> None:
    iv, assessment = judged(procs, n, host, dt)
    budget = make_budget(vcpus=n, affinity=tuple(range(n)), limited_by="affinity")
    for samples in (1, 2):
        for width in (100, 40):
            text = terminal(
                watch_renderable(iv, assessment, budget, elapsed=1.0, samples=samples), width
            )
            assert problems(text) == [], text


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"command": ["x"], "command_status": 0},
        {"command": ["x"], "command_status": 3},
        {"command": ["x"], "command_status": -9},
        {"interrupted": True},
        {"static": True},
    ],
)
def test_every_closing_line_reads_true(kwargs: dict[str, object]) -> None:
    for n in (1, 2):
        err = io.StringIO()
        summary = unmeasured_summary(
            synthetic_budget(n), 42, note="a note", assessment=Assessment(Verdict.OK, ())
        )
        report(CheckOutcome(summary=summary, **kwargs), CheckOptions(), err=err, environ={})  # type: ignore[arg-type]
        assert problems(err.getvalue()) == [], err.getvalue()


# --------------------------------------------------------------------------- plans, budgets


@pytest.mark.parametrize("n", [1, 2, 3, 8])
@pytest.mark.parametrize("measured", [True, False])
def test_every_plan_reads_true(n: int, measured: bool) -> None:
    budget = synthetic_budget(n)
    if measured:
        budget = budget._replace(pid=4242, notes=())
    for procs in (1, 2, 3, 9):
        for workers in (0, 1, 2):
            plan = make_plan(budget, procs, workers)
            text = plan_text(plan, width=100) + "\n".join(plan.warnings)
            assert problems(text) == [], text
            assert not re.search(r"(?<![\w-])-\d", text), text  # no negative count
            assert " 0 workers" not in text and "at most 0" not in text, text
            if not measured:
                assert "taskset" not in text, text
            if plan.leftover < 0:
                assert "leftover" not in text and f"over by   {-plan.leftover}" in text, text


@pytest.mark.parametrize("n", [1, 2, 4])
def test_every_preflight_reads_true(n: int) -> None:
    for procs in (1, 2, 3):
        for threads in (1, 2, 4):
            for workers in (0, 1, 2, 3):
                for f in preflight(synthetic_budget(n), procs, threads, workers).findings:
                    text = f"{f.message} || {f.fix}"
                    assert f.rule in PREFLIGHT_RULES
                    assert problems(text) == [], text
                    assert " 0 " not in f" {f.fix} ", text
                    total = f.evidence["total_threads"]
                    assert f"{total} thread" in f.message, text
                    assert f"on {n} vCPU" in f.message, text


def budgets() -> Iterator[Budget]:
    for n in (1, 2):
        yield make_budget(vcpus=n, affinity=tuple(range(n)), limited_by="affinity")
        yield make_budget(vcpus=n, cpuset=make_cpuset(cpus=tuple(range(n))), limited_by="cpuset")
        for cpus in (0.5, 1.0, 1.5, 2.0):
            if max(1, int(cpus)) == n:
                yield make_budget(vcpus=n, quota=make_quota(cpus=cpus), limited_by="quota")
        yield make_budget(vcpus=n, logical=n, limited_by="none")
        yield make_budget(vcpus=n, limited_by="launcher", launcher=f"SLURM_CPUS_PER_TASK={n}")
        yield synthetic_budget(n)


@pytest.mark.parametrize("budget", list(budgets()), ids=budget_limit_line)
def test_every_budget_line_reads_true(budget: Budget) -> None:
    line = budget_limit_line(budget)
    assert problems(line) == [], line
    assert line.startswith(f"N = {budget.vcpus} usable vCPU")
    assert ("no limit" in line) == (budget.limited_by == "none" and budget.pid != 0), line


def test_totals_lines_agree_in_number() -> None:
    for processes, threads in ((1, 1), (1, 2), (2, 1), (0, 0)):
        line = totals_line(
            make_totals(processes=processes, threads=threads, active_threads=threads), 1
        )
        assert problems(line) == [], line
