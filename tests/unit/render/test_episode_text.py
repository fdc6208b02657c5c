"""A run's episodes in the text report of watch, check and report (issue 43): the totals
against the rule, a line per cause, the worst first, spikes said as such."""

from __future__ import annotations

import re

from oversub.analysis.rates import counted, interval
from oversub.analysis.summary import RunSummary
from oversub.core.names import Verdict
from oversub.core.results import Interval, Summary
from oversub.core.thresholds import Thresholds
from oversub.render.episodeview import MAX_GROUPS, episode_lines, groups
from oversub.render.finalreport import summary_text
from tests.support.builders import (
    CAUSE_KINDS,
    IDLE,
    ROOT,
    T0,
    Host,
    Load,
    Proc,
    budget,
    cause_proc,
    tree_pair,
)

TH = Thresholds()
XD = "python -u -c import sys;exec(eval(sys.stdin.readline()))"
HALF = Load(cpu=0.5, delay=0.5, involuntary=100.0)


def steps(
    bits: str, inner_cmd: str = "python -m loky.backend.popen_loky_posix {i}"
) -> list[Interval]:
    out = []
    for k, bit in enumerate(bits):
        procs = [
            Proc(ROOT, (IDLE,), ppid=1, cmdline="python -m pytest -n 2 tests"),
            Proc(101, (HALF if bit == "1" else Load(cpu=0.9),), cmdline=XD),
            Proc(102, (IDLE if bit == "1" else Load(cpu=0.9),), cmdline=XD),
        ]
        if bit == "1":
            procs += [
                Proc(120 + i, (HALF,), ppid=102, cmdline=inner_cmd.format(i=i)) for i in range(3)
            ]
        prev, curr = tree_pair(procs, t0=T0 + k, host=Host(outside=0.02))
        out.append(counted(interval(prev, curr, 2), TH))
    return out


def summary(bits: str, **kw: str) -> Summary:
    run = RunSummary(ROOT, TH)
    for iv in steps(bits, **kw):
        run.add(iv)
    return run.result(budget(2), TH, target_exited=True)


BURSTY = "0" * 10 + "111" + "0" * 10 + "1111" + "0" * 10 + "1" + "0" * 10


def test_the_text_report_lists_episodes_by_cause_the_worst_first() -> None:
    s = summary(BURSTY)
    lines = episode_lines(s)
    assert lines[0] == (
        "episodes: 3 oversubscribed, 8.0 s (17% of the time measured): they make the verdict "
        "(the rule: at least 10% of the time measured and 3 s together, or one episode of 30 s)"
    )
    assert lines[1] == (
        "- oversubscribed at 23.0-27.0 s (4.0 s, the worst of 3): peak demand 4.00 on N = 2, "
        "delay 50% (peak 50%)"
    )
    assert lines[2] == "  also at 10.0-13.0 and 37.0-38.0 s (same cause)"
    assert lines[3] == (
        "  busy: pid 101: pytest-xdist worker started by pid 100 (python -m pytest -n 2 tests); "
        "pids 120, 121, 122: loky workers started by pid 102, a pytest-xdist worker"
    )
    assert lines[4].startswith("  cause: Nested parallelism: pid 101 (a pytest-xdist worker)")
    assert lines[4].endswith("(oversubscribed-processes, warning)")
    assert lines[5].startswith("  fix: Keep pytest-xdist workers x inner processes within 2 CPUs")
    assert "\n".join(lines) in summary_text(s)


def test_a_spike_below_the_rule_is_listed_as_such() -> None:
    s = summary("0" * 12 + "1" + "0" * 12)
    assert s.verdict is not Verdict.OVERSUBSCRIBED
    lines = episode_lines(s)
    assert "below the rule, listed" in lines[0]
    assert lines[1].startswith("- oversubscribed at 12.0-13.0 s (1.0 s, a spike below the rule)")


def test_a_run_without_episodes_prints_as_before() -> None:
    s = summary("0" * 10)
    assert s.episodes == () and episode_lines(s) == []
    assert "episode" not in summary_text(s)


def test_many_causes_are_grouped_and_the_rest_counted() -> None:
    # Bursts of eight different causes, each twice: a line per cause, at most MAX_GROUPS.
    root = Proc(ROOT, (IDLE,), ppid=1)
    quiet = [root, Proc(201, (Load(cpu=0.9),))]
    causes = [[root, *(cause_proc(kind, 201 + i) for i in range(3))] for kind in CAUSE_KINDS]
    causes += [[root, *(Proc(201 + i, (HALF,)) for i in range(4))]]
    causes += [[root, Proc(201, (Load(cpu=0.7, delay=0.3),))]]  # starved, with outside load
    run = RunSummary(ROOT, TH)
    t = 0
    for cause in causes * 2:
        for procs in (quiet, quiet, cause, cause):
            host = Host(outside=1.5) if len(procs) == 2 and procs is not quiet else Host()
            prev, curr = tree_pair(procs, t0=T0 + t, host=host)
            run.add(counted(interval(prev, curr, 2), TH))
            t += 1
    s = run.result(budget(2), TH, target_exited=True)
    found = groups(s.episodes)
    assert len(found) > MAX_GROUPS
    lines = episode_lines(s)
    heads = [line for line in lines if line.startswith("- ")]
    assert len(heads) == MAX_GROUPS + 1
    assert all("the worst of" in h for h in heads[:-1])
    assert all(line.startswith(("- ", "  ")) for line in lines[1:])
    rest = re.fullmatch(
        r"- and ([0-9]+) more episodes with ([0-9]+) other causes?, ([0-9.]+) s in all "
        r"\(--json lists them\)",
        heads[-1],
    )
    assert rest is not None
    hidden = found[MAX_GROUPS:]
    assert (int(rest[1]), int(rest[2])) == (sum(len(g.episodes) for g in hidden), len(hidden))


def test_the_terminal_report_indents_each_episode_line_under_its_text() -> None:
    from rich.console import Console

    from oversub.render.finalreport import summary_renderable

    console = Console(width=80, record=True, force_terminal=False)
    console.print(summary_renderable(summary(BURSTY)))
    out = console.export_text()
    start = out.index("\nepisodes: ") + 1
    block = out[start : out.index("  fix: Keep", start)]
    rows = block.splitlines()
    assert rows[0].startswith("episodes: 3 oversubscribed")
    assert rows[1].startswith(" " * len("episodes: ")) and rows[1].strip()
    busy = next(i for i, row in enumerate(rows) if row.startswith("  busy: "))
    assert rows[busy + 1].startswith(" " * len("  busy: ")) and rows[busy + 1].strip()
    assert all(len(row) <= 80 for row in out.splitlines())


def test_the_other_episodes_of_a_cause_are_listed_then_counted() -> None:
    s = summary("01" * 10)
    lines = episode_lines(s)
    assert lines[2] == (
        "  also at 3.0-4.0, 5.0-6.0, 7.0-8.0, 9.0-10.0, 11.0-12.0, 13.0-14.0 s and 3 more "
        "(same cause)"
    )
