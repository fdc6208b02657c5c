"""A run's episodes in words, shared by the human formats (the text report, Markdown, HTML,
JUnit): the totals per verdict against the rule, then the episodes grouped by cause, the
worst first, each with its times, figures, busy processes (and who started them), cause
and fix.

Pure and without rich. The words are plain: every sink escapes them (`escape.terminal`,
`escape.markdown`, `escape.html`, XML), since labels come from the watched processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from oversub.core.plural import count, noun
from oversub.core.results import Ancestor, Episode, EpisodeProcess, EpisodeTotal, Summary
from oversub.render.phrases import percent, process_label

MAX_GROUPS = 5
"""Causes shown in the text report; the JSON has every episode kept."""
MAX_TIMES = 6
"""Times listed for the other episodes of one cause before "and N more"."""
LABEL = 32
"""Characters of a process label in an episode's line."""


class Group(NamedTuple):
    """Episodes of one verdict with one cause."""

    worst: Episode
    episodes: tuple[Episode, ...]
    """Every episode of the group, in time order (`worst` among them)."""


def _key(e: Episode) -> tuple[object, ...]:
    n = e.nesting
    nested = None if n is None else (n.role, n.inner_role)
    causes = str(e.finding.evidence.get("causes") or "")
    kinds = tuple(sorted({c.partition(":")[2] for c in causes.split(",") if c}))
    return (e.verdict, e.finding.rule, e.finding.severity, kinds, nested, e.counts)


def groups(episodes: Sequence[Episode]) -> list[Group]:
    """`episodes` (the worst first) grouped by cause: same verdict, rule, severity, kinds of
    cause among its busy processes (the finding's `causes`: spin, gil, app, ...) and nested
    parallelism; the group of the worst episode first."""
    by: dict[tuple[object, ...], list[Episode]] = {}
    for e in episodes:
        by.setdefault(_key(e), []).append(e)
    return [
        Group(members[0], tuple(sorted(members, key=lambda e: e.start_s)))
        for members in by.values()
    ]


def when(e: Episode) -> str:
    """ "24.0-27.0 s"."""
    return f"{e.start_s:.1f}-{e.end_s:.1f} s"


def total_text(t: EpisodeTotal) -> str:
    """ "3 oversubscribed, 12.0 s (26% of the time measured): they make the verdict"."""
    if t.counts:
        which = "it makes the verdict" if t.episodes == 1 else "they make the verdict"
    else:
        which = "below the rule, listed"
    return (
        f"{t.episodes} {t.verdict.value}, {t.seconds:.1f} s ({percent(t.share)} of the time "
        f"measured): {which}"
    )


def totals_line(s: Summary) -> str | None:
    """ "episodes: 3 oversubscribed, 12.0 s (26% of the time measured): they make the
    verdict; 1 starved, ...: below the rule, listed (the rule: ...)"; None without any."""
    if not s.episode_totals:
        return None
    parts = "; ".join(total_text(t) for t in s.episode_totals)
    kept = len(s.episodes)
    every = sum(t.episodes for t in s.episode_totals)
    shown = "" if kept == every else f"; the {kept} worst of {every} kept in full"
    return f"episodes: {parts} (the rule: {s.thresholds.episode_rule()}){shown}"


def figures(e: Episode, vcpus: int) -> str:
    """ "peak demand 4.07 on N = 2, delay 38% (peak 45%)"."""
    delay = f"delay {percent(e.run_delay_ratio)}"
    if e.run_delay_ratio_peak is not None and e.intervals > 1:
        delay += f" (peak {percent(e.run_delay_ratio_peak)})"
    return f"peak demand {e.demand_peak:.2f} on N = {vcpus}, {delay}"


def _label(pid: int, name: str, cmdline: str, role: str | None, up: Ancestor | None) -> str:
    if role is not None:
        return role
    return process_label(name, cmdline, None if up is None else up.cmdline, pid, LABEL)


def _parent(p: EpisodeProcess) -> str:
    """ " started by pid 102, a pytest-xdist worker", " started by pid 100 (python -m pytest
    -n 2)"; "" without a known parent."""
    if not p.parents:
        return ""
    a = p.parents[0]
    up = p.parents[1] if len(p.parents) > 1 else None
    what = _label(a.pid, a.name, a.cmdline, a.role, up)
    return f" started by pid {a.pid}" + (f", a {what}" if a.role is not None else f" ({what})")


def busy_text(e: Episode) -> str:
    """The busy processes, by parent: "pid 101: pytest-xdist worker started by pid 100
    (python -m pytest -n 2); pids 120, 121, 122: loky workers started by pid 102, a
    pytest-xdist worker"; processes of one parent that differ are named each ("pid 201
    (python a.py), pid 202 (python b.py) started by pid 100 (python launch.py)"); then how
    many more were busy."""
    by_parent: dict[str, list[tuple[int, str]]] = {}
    for p in e.processes:
        up = p.parents[0] if p.parents else None
        what = _label(p.pid, p.name, p.cmdline, p.role, up)
        by_parent.setdefault(_parent(p), []).append((p.pid, what))
    parts = []
    for parent, members in by_parent.items():
        members.sort()
        kinds = {what for _, what in members}
        if len(kinds) == 1:
            (what,) = kinds
            pids = [pid for pid, _ in members]
            who = ("pid " if len(pids) == 1 else "pids ") + ", ".join(map(str, pids))
            plural = what if len(pids) == 1 or not what.endswith("worker") else what + "s"
            parts.append(f"{who}: {plural}{parent}")
        else:
            parts.append(", ".join(f"pid {pid} ({what})" for pid, what in members) + parent)
    more = e.busy - len(e.processes)
    tail = f"; and {count(more, 'more busy process', 'more busy processes')}" if more > 0 else ""
    return "; ".join(parts) + tail


def cause_text(e: Episode) -> str:
    """What the episode's own intervals say caused it: its nested parallelism when seen,
    else its finding's message; with the rule and severity."""
    f = e.finding
    said = e.nesting.message if e.nesting is not None else f.message
    return f"{said} ({f.rule}, {f.severity.value})"


def others(g: Group) -> str | None:
    """ "also at 10.0-14.0 and 24.0-27.0 s (same cause)" for the group's other episodes."""
    rest = [e for e in g.episodes if e is not g.worst]
    if not rest:
        return None
    times = [f"{e.start_s:.1f}-{e.end_s:.1f}" for e in rest[:MAX_TIMES]]
    more = len(rest) - len(times)
    if more:
        return f"also at {', '.join(times)} s and {more} more (same cause)"
    listed = ", ".join(times[:-1]) + (" and " if len(times) > 1 else "") + times[-1]
    return f"also at {listed} s (same cause)"


def span_text(g: Group) -> str:
    """ "24.0-27.0 s (3.0 s, the worst of 3)", "(1.0 s, a spike below the rule)"."""
    e = g.worst
    n = len(g.episodes)
    of = f", the worst of {n}" if n > 1 else ""
    spike = "" if e.counts else (", below the rule" if n > 1 else ", a spike below the rule")
    return f"{when(e)} ({e.seconds:.1f} s{of}{spike})"


def head_text(g: Group, vcpus: int) -> str:
    """ "oversubscribed at 24.0-27.0 s (3.0 s, the worst of 3): peak demand ..."."""
    return f"{g.worst.verdict.value} at {span_text(g)}: {figures(g.worst, vcpus)}"


def episode_lines(s: Summary, most: int = MAX_GROUPS) -> list[str]:
    """The episodes for the text report: the totals line, then per cause (at most `most`)
    its worst episode, the others' times, busy processes, cause and fix (indented); [] for
    a run without episodes."""
    head = totals_line(s)
    if head is None:
        return []
    lines = [head]
    found = groups(s.episodes)
    for g in found[:most]:
        lines.append(f"- {head_text(g, s.budget.vcpus)}")
        also = others(g)
        if also is not None:
            lines.append(f"  {also}")
        lines.append(f"  busy: {busy_text(g.worst)}")
        lines.append(f"  cause: {cause_text(g.worst)}")
        lines.append(f"  fix: {g.worst.finding.fix}")
    hidden = found[most:]
    if hidden:
        n = sum(len(g.episodes) for g in hidden)
        seconds = sum(e.seconds for g in hidden for e in g.episodes)
        lines.append(
            f"- and {count(n, 'more episode')} with {count(len(hidden), 'other cause')}, "
            f"{seconds:.1f} s in all (--json lists {noun(n, 'it', 'them')})"
        )
    return lines
