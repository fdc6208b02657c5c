"""Episodes: the stretches of a run in which it was oversubscribed or starved.

A run's verdict is judged on the whole run (`summary`), which averages a bursty run away:
a test suite oversubscribed for 3-5 s at a time, a fifth of the time, can average to
demand within N. An episode is a run of consecutive intervals with the same verdict,
oversubscribed or starved (the verdicts in which threads waited; an at-risk interval lost
no time); each is judged on its own intervals summed, as the whole run is (`verdict.assess`
of the span), so its cause and fix are its own. Its busy processes carry their parent
chain, and nested parallelism among them is named (`nesting`).

The rule (docs/rules.md, "Episodes"): the episodes of one verdict make the run's verdict
when together they fill at least `episode_share` of the time measured and last at least
`episode_seconds`, or when one of them lasts at least `long_episode`; durations are
compared to a tenth of a second (intervals are paced to the millisecond). Below the rule
an episode is still listed, as a spike.

Memory stays bounded over a run of any length: the open episode holds one accumulator per
process in it; a closed one is kept in full only among the `MAX_KEPT` worst (severity x
duration; the worst of each verdict always), and every episode is counted by verdict. Pure:
no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oversub.analysis.accumulators import Span
from oversub.analysis.nesting import NESTED, Seen, nesting, role
from oversub.analysis.rates import BUSY_DEMAND
from oversub.analysis.verdict import assess
from oversub.analysis.wording import rounded, sentence
from oversub.core.names import Verdict
from oversub.core.plural import count
from oversub.core.results import (
    Ancestor,
    Episode,
    EpisodeProcess,
    EpisodeTotal,
    Finding,
    Interval,
    Nesting,
    ProcessRates,
)
from oversub.core.rules import Rule
from oversub.core.thresholds import Thresholds

VERDICTS = (Verdict.OVERSUBSCRIBED, Verdict.STARVED)
"""The verdicts whose intervals make episodes: those in which threads waited."""
MAX_KEPT = 20
"""Episodes kept in full, the worst by severity x duration; the others are only counted."""
MAX_PROCESSES = 8
"""Busy processes listed per episode (the busiest); `Episode.busy` counts them all."""
MAX_PARENTS = 8
"""Parents listed per busy process (its parent first)."""
MAX_DEPTH = 64
"""Ancestors followed at most when looking for the worker a process descends from."""

Lineage = Mapping[int, ProcessRates]
"""pid -> the latest rates of that pid in the run: who each process is and its parent."""


def score(e: Episode) -> tuple[float, int, float]:
    """How bad an episode is: its severity (info 1, warning 2, critical 3) x its seconds,
    then its verdict, then the earlier first."""
    return ((e.finding.severity.rank + 1) * e.seconds, e.verdict.rank, -e.start_s)


@dataclass
class _Tally:
    episodes: int = 0
    seconds: float = 0.0
    longest_s: float = 0.0
    waited_s: float | None = 0.0

    def add(self, e: Episode) -> None:
        self.episodes += 1
        self.seconds += e.seconds
        self.longest_s = max(self.longest_s, e.seconds)
        self.waited_s = (
            None if self.waited_s is None or e.waited_s is None else (self.waited_s + e.waited_s)
        )


class _Open:
    """The episode under way: its intervals folded."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.span = Span()
        self.intervals = 0
        self.root_pid = 0
        self.vcpus = 1
        self.peak = -1.0
        self.peak_finding: Finding | None = None
        """The first finding of its verdict in its interval of highest demand."""

    def add(self, iv: Interval, finding: Finding | None) -> None:
        self.span.add(iv)
        self.intervals += 1
        self.root_pid, self.vcpus = iv.root_pid, iv.vcpus
        if iv.totals.demand > self.peak and finding is not None:
            self.peak, self.peak_finding = iv.totals.demand, finding

    def episode(self, origin: float, th: Thresholds, lineage: Lineage) -> Episode:
        whole, _ = self.span.whole(self.vcpus, self.root_pid)
        judged = assess(whole, th)
        finding = next((f for f in judged.findings if f.verdict is self.verdict), None)
        if finding is None:  # the sum of intervals of one verdict argues for another
            assert self.peak_finding is not None
            finding = self.peak_finding
        busy = [p for p in whole.processes if p.demand >= BUSY_DEMAND and not p.exited]
        if not busy:  # many small processes: the busiest of them
            busy = sorted((p for p in whole.processes if p.demand > 0), key=lambda p: -p.demand)
            busy = busy[:3]
        busy.sort(key=lambda p: (-p.demand, p.pid))
        nested = None
        if self.verdict is Verdict.OVERSUBSCRIBED:
            busy_pids = {p.pid for p in busy}
            seen = [_seen(p, lineage, p.pid in busy_pids, whole.root_pid) for p in whole.processes]
            nested = nesting(seen, whole.vcpus)
            if nested is not None:
                finding = _nested(finding, nested)
        peak = self.span.tree.totals_peak()
        t = whole.totals
        return Episode(
            verdict=self.verdict,
            start_s=whole.t0 - origin,
            end_s=whole.t1 - origin,
            intervals=self.intervals,
            demand=t.demand,
            demand_peak=peak.demand,
            run_delay_ratio=t.run_delay_ratio,
            run_delay_ratio_peak=peak.run_delay_ratio,
            waited_s=t.delay_s,
            finding=finding,
            processes=tuple(_busy(p, lineage, whole.root_pid) for p in busy[:MAX_PROCESSES]),
            busy=len(busy),
            nesting=nested,
        )


def _role(p: ProcessRates, lineage: Lineage) -> str | None:
    parent = lineage.get(p.ppid)
    return role(p.name, p.cmdline, None if parent is None else parent.cmdline)


def _chain(p: ProcessRates, lineage: Lineage, root: int, most: int) -> list[ProcessRates]:
    """Its ancestors in the run, parent first, up to the root (at most `most`)."""
    out: list[ProcessRates] = []
    seen = {p.pid}
    pid = p.ppid
    while pid > 0 and pid not in seen and len(out) < most and p.pid != root:
        parent = lineage.get(pid)
        if parent is None:
            break
        out.append(parent)
        if pid == root:
            break
        seen.add(pid)
        pid = parent.ppid
    return out


def _seen(p: ProcessRates, lineage: Lineage, busy: bool, root: int) -> Seen:
    chain = tuple(a.pid for a in _chain(p, lineage, root, MAX_DEPTH))
    return Seen(p.pid, p.ppid, _role(p, lineage), chain, busy, p.active_threads)


def _busy(p: ProcessRates, lineage: Lineage, root: int) -> EpisodeProcess:
    parents = tuple(
        Ancestor(a.pid, a.name, a.cmdline, _role(a, lineage))
        for a in _chain(p, lineage, root, MAX_PARENTS)
    )
    return EpisodeProcess(
        p.pid, p.name, p.cmdline, p.demand, p.active_threads, _role(p, lineage), parents
    )


def _nested(f: Finding, n: Nesting, where: str = "") -> Finding:
    """An oversubscription finding with the nested parallelism of an episode: the message
    says it, the fix starts with its levers (for single-thread processes they are the fix).
    For a finding of the whole run (`where` the episode was, " (in its episode at 4.0-9.0
    s)"), both end with what the episode adds: the whole run's own words stay first."""
    if where:
        fix = f"{f.fix} {n.fix}"
    elif f.rule is Rule.OVERSUBSCRIBED_PROCESSES:
        fix = n.fix
    else:
        fix = f"{n.fix} {f.fix}"
    evidence = dict(f.evidence) | {
        "nested": n.role,
        "outer_workers": n.workers,
        "inner_processes": n.inner,
    }
    said = n.message.replace(NESTED, NESTED[:-1] + where + ":", 1)
    return f._replace(message=f"{f.message} {said}", fix=fix, evidence=evidence)


def with_nesting(f: Finding, episodes: Sequence[Episode]) -> Finding:
    """The whole run's oversubscription finding with the nested parallelism of its worst
    episode that shows one (`episodes` worst first), when its episodes make its verdict:
    over a whole run, processes busy at different times cannot be said to run at once."""
    nested = next((e for e in episodes if e.verdict is f.verdict and e.counts and e.nesting), None)
    if nested is None or nested.nesting is None or f.verdict is not Verdict.OVERSUBSCRIBED:
        return f
    where = f" (in its episode at {nested.start_s:.1f}-{nested.end_s:.1f} s)"
    return _nested(f, nested.nesting, where)


class Episodes:
    """The episodes of one run, as its intervals come (`summary.RunSummary` holds one)."""

    def __init__(self, thresholds: Thresholds) -> None:
        self._th = thresholds
        self._open: _Open | None = None
        self._kept: list[Episode] = []
        self._tally: dict[Verdict, _Tally] = {}
        self._origin: float | None = None

    def add(
        self, iv: Interval, verdict: Verdict, finding: Finding | None, lineage: Lineage
    ) -> None:
        """One interval (in time order) with its verdict and its worst finding."""
        if self._origin is None:
            self._origin = iv.t0
        # An interval after which nothing of the tree was alive measured nothing.
        kind = verdict if verdict in VERDICTS and iv.totals.processes > 0 else None
        if self._open is not None and kind is not self._open.verdict:
            self._keep(self._open.episode(self._origin, self._th, lineage), self._kept)
            self._open = None
        if kind is None:
            return
        if self._open is None:
            self._open = _Open(kind)
        self._open.add(iv, finding)

    def _keep(
        self, e: Episode, kept: list[Episode], tally: dict[Verdict, _Tally] | None = None
    ) -> None:
        (self._tally if tally is None else tally).setdefault(e.verdict, _Tally()).add(e)
        kept.append(e)
        if len(kept) > MAX_KEPT:
            # The least bad goes, but never the last one of its verdict: the run's finding
            # may come from it.
            kinds = [k.verdict for k in kept]
            kept.remove(min((k for k in kept if kinds.count(k.verdict) > 1), key=score))

    def result(
        self, lineage: Lineage, measured_s: float
    ) -> tuple[tuple[Episode, ...], tuple[EpisodeTotal, ...]]:
        """The episodes so far (the open one included, the run is not changed), the worst
        first, each marked when the episodes of its verdict make the run's verdict, and
        the totals per verdict."""
        kept = list(self._kept)
        tally = {v: _Tally(**vars(t)) for v, t in self._tally.items()}
        if self._open is not None and self._origin is not None:
            self._keep(self._open.episode(self._origin, self._th, lineage), kept, tally)
        totals = tuple(_total(v, tally[v], measured_s, self._th) for v in VERDICTS if v in tally)
        counting = {t.verdict for t in totals if t.counts}
        ordered = sorted(kept, key=score, reverse=True)
        return tuple(e._replace(counts=e.verdict in counting) for e in ordered), totals


def _tenths(seconds: float) -> float:
    """Seconds to a tenth, as the rule compares them (intervals are paced to the ms)."""
    return round(seconds, 1)


def _total(v: Verdict, t: _Tally, measured_s: float, th: Thresholds) -> EpisodeTotal:
    share = t.seconds / measured_s if measured_s > 0 else 0.0
    counts = (share >= th.episode_share and _tenths(t.seconds) >= th.episode_seconds) or _tenths(
        t.longest_s
    ) >= th.long_episode
    return EpisodeTotal(v, t.episodes, t.seconds, min(share, 1.0), t.longest_s, t.waited_s, counts)


def run_finding(total: EpisodeTotal, worst: Episode, measured_s: float, th: Thresholds) -> Finding:
    """The finding that makes the run's verdict from its episodes: the worst episode's own
    (its cause and fix), said of every episode of its verdict."""
    f = worst.finding
    head = (
        f"{sentence(count(total.episodes, f'{total.verdict.value} episode'))} "
        f"{'fills' if total.episodes == 1 else 'fill'} {total.seconds:.1f} s of the "
        f"{measured_s:.1f} s measured ({total.share:.0%}; the rule: {th.episode_rule()})."
    )
    where = f" In the worst, at {worst.start_s:.1f}-{worst.end_s:.1f} s: "
    evidence = dict(f.evidence) | {
        "episodes": total.episodes,
        "episode_seconds": rounded(total.seconds),
        "episode_share": rounded(total.share),
        "episode_start_s": rounded(worst.start_s),
        "episode_end_s": rounded(worst.end_s),
    }
    return f._replace(message=head + where + f.message, evidence=evidence)


def own_wait(f: Finding, over: EpisodeTotal | None, waited_s: float | None) -> Finding:
    """A starved-unattributed finding of the whole run, with the share of its waiting that
    fell in the tree's own oversubscribed episodes (when it had some)."""
    if over is None or not over.waited_s or not waited_s or waited_s <= 0:
        return f
    share = min(1.0, over.waited_s / waited_s)
    said = (
        f" Of that waiting, {share:.0%} ({over.waited_s:.1f} of {waited_s:.1f} CPU-seconds) "
        f"was in the tree's own oversubscribed episodes "
        f"({count(over.episodes, 'episode')}, {over.seconds:.1f} s)."
    )
    evidence = dict(f.evidence) | {"episode_waited_share": rounded(share)}
    return f._replace(message=f.message + said, evidence=evidence)
