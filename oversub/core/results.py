"""Analysis results: rates over an interval, findings, verdicts and the run summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from oversub.core.errors import ExitStatus
from oversub.core.model import Budget
from oversub.core.names import FailOn, Severity, Signal, Verdict, WaitKind
from oversub.core.origin import NodeIdentity
from oversub.core.pcprofile import WaitShare
from oversub.core.rules import Rule
from oversub.core.thresholds import Thresholds


class OwnerCount(NamedTuple):
    """The threads of one owner (`oversub.core.runtimes`) in one process over an interval (or a
    whole run: `analysis.ownercounts.RunOwners`)."""

    owner: str
    """A `runtimes` key, or "unattributed"."""
    threads: int
    busy: int
    """Threads active (runnable at least `active_cpu` of the interval)."""
    ran: int
    """Threads that ran or waited for a CPU at all: 0 = the pool sat idle."""
    runnable_s: float
    """Seconds its threads were running or waiting for a CPU, summed."""
    yielding_s: float | None = None
    """Of `runnable_s`, the seconds of its threads that gave up the CPU more often than they
    were preempted (voluntary switches above involuntary ones): threads that wait for
    something other than a CPU, a lock such as the GIL. None when the switches were not
    counted."""


class ProcessRates(NamedTuple):
    """One process over one interval (or over the whole run, for summaries)."""

    pid: int
    ppid: int
    name: str
    cmdline: str
    threads: int
    """Threads at the end of the interval."""
    active_threads: int
    """Threads runnable (running or waiting for a CPU) at least `active_cpu` of the interval."""
    cpu_percent: float
    """CPU use, 100 = one vCPU."""
    demand: float
    """Average runnable threads: (Δcpu + Δrun_delay) / Δt."""
    run_delay_ratio: float | None
    """Δrun_delay / (Δrun_delay + Δcpu); None without schedstat or without any runnable time."""
    involuntary_ctx_per_s: float | None
    voluntary_ctx_per_s: float | None
    pools: tuple[str, ...] | None
    thread_env: Mapping[str, str] | None
    exited: bool = False
    """The process was gone by the end of the interval (its last counters were kept)."""
    wait: WaitKind | None = None
    """What it was blocked in at the end, for single-thread OpenMP processes (`samples`)."""
    seconds: float | None = None
    """How long it was observed, when shorter than or apart from the interval (a whole-run
    summary); None: the whole interval."""
    start_ticks: int | None = None
    """Start time (clock ticks after boot): with `pid`, the process's identity (pids are
    reused); None when unknown."""
    live_pools: Mapping[str, int] | None = None
    """Pool key -> threads it is set to now, read from the process's memory; None = unknown."""
    live_threads: Mapping[str, int] | None = None
    """Pool key -> threads those pools run now beside the calling thread; None = unknown."""
    cpu_s: float = 0.0
    """Raw delta: CPU-seconds used over the time observed (the source of `cpu_percent`)."""
    delay_s: float | None = None
    """Raw delta: seconds its threads were runnable but waiting for a CPU; None unknown."""
    involuntary_ctx: int | None = None
    """Raw delta: involuntary context switches; None when unknown."""
    voluntary_ctx: int | None = None
    """Raw delta: voluntary context switches; None when unknown."""
    thread_runnable_s: tuple[float, ...] = ()
    """Raw delta per thread: seconds running or waiting for a CPU (what makes a thread
    active under `Thresholds.active_cpu`); empty over a whole run."""
    thread_ids: tuple[int, ...] = ()
    """The thread id of each entry of `thread_runnable_s` (a recording merges two intervals
    thread by thread); empty over a whole run."""
    thread_switches: tuple[tuple[int, int], ...] = ()
    """Raw delta per thread of `thread_ids`: (voluntary, involuntary) context switches;
    empty when any was not counted, and over a whole run."""
    parent_threads_at_start: int | None = None
    """Threads of its parent that had started before this process did (and were still
    there when sampled; the most seen): the parent's threads when it forked this one. None
    when unknown (no parent in the tree, a start time unreadable)."""
    owners: Mapping[int, str] | None = None
    """tid -> owner of every thread at the end (`samples.ProcessSample.owners`); None when
    not read."""
    owner_counts: tuple[OwnerCount, ...] | None = None
    """Threads by owner (`analysis.ownercounts.owner_counts`), most runnable first; None when the
    owners were not read."""
    wait_share: WaitShare | None = None
    """Where its busy threads' CPU went, sampled (`samples.ProcessSample.wait_share`; over a
    run, every window summed); None = never measured."""


class HostRates(NamedTuple):
    """Host context over an interval."""

    outside_cpus: float | None
    """CPUs used by processes outside the tree (host busy minus tree), averaged over Δt."""
    steal_cpus: float | None
    """CPUs stolen by the hypervisor."""
    psi_some: float | None
    """Share of the interval in which some task on the host waited for a CPU (PSI)."""
    throttled_ratio: float | None
    """Share of cgroup periods in the interval that were throttled."""
    throttled_s: float | None
    """Seconds of throttling in the interval."""

    @classmethod
    def unknown(cls) -> HostRates:
        """No host context at all (nothing was measured)."""
        return cls(None, None, None, None, None)


class Totals(NamedTuple):
    """The tree as a whole over an interval."""

    processes: int
    threads: int
    active_threads: int
    cpu_percent: float
    demand: float
    run_delay_ratio: float | None
    involuntary_ctx_per_s: float | None
    voluntary_ctx_per_s: float | None
    involuntary_ctx_per_cpu_s: float | None
    """Involuntary switches per CPU-second used: the normalised contention signal."""
    busy_processes: int = 0
    """Processes that kept at least half a thread runnable (demand >= 0.5) at the same time:
    the M among which N is shared (for a run: the number sustained for a quarter of it)."""
    pool_threads: int = 0
    """Threads the tree's multi-thread native pools run at once, summed over processes (per
    process its largest pool that exists: `analysis.poolsize`); compare with N."""
    pool_processes: int = 0
    """Processes with such a pool (a pool of more than one thread)."""
    cpu_s: float = 0.0
    """Raw delta: CPU-seconds the tree used (0 in a peak: peaks carry no raw deltas)."""
    delay_s: float | None = None
    """Raw delta: seconds the tree's threads waited for a CPU; None when unknown."""
    involuntary_ctx: int | None = None
    """Raw delta: involuntary context switches of the tree; None when unknown."""
    voluntary_ctx: int | None = None
    """Raw delta: voluntary context switches of the tree; None when unknown."""

    @classmethod
    def empty(cls) -> Totals:
        """Nothing measured: no process, no thread, rates unknown."""
        return cls(0, 0, 0, 0.0, 0.0, None, None, None, None)


class Interval(NamedTuple):
    """What a tree did between two consecutive samples: the pure result of
    `analysis.rates.interval`.

    Words: a *sample* is one reading of the tree at an instant (`samples.TreeSample`); an
    *interval* is the span between two samples, and everything measured is an interval's.
    Each process and the totals carry the raw deltas (`cpu_s`, `delay_s`, switch counts)
    beside the rates derived from them, so a run summary sums them directly and a recorded
    interval can be assessed again. (`Summary.samples`, the JSON key `samples`, counts the
    intervals measured: the name is public and kept.)"""

    t0: float
    t1: float
    root_pid: int
    vcpus: int
    processes: tuple[ProcessRates, ...]
    """Sorted by CPU use, highest first."""
    totals: Totals
    host: HostRates
    unavailable: tuple[Signal, ...] = ()

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


class Finding(NamedTuple):
    """One rule that fired, with its evidence and the fix."""

    rule: Rule
    """Stable rule id, e.g. "oversubscribed-pools" (`oversub.core.rules`, docs/rules.md)."""
    severity: Severity
    verdict: Verdict
    """The verdict this finding argues for (hazards may argue for at-risk)."""
    message: str
    """One sentence."""
    pids: tuple[int, ...]
    evidence: Mapping[str, float | int | str | None]
    """The numbers that triggered the rule."""
    fix: str
    """What to change, concretely."""


class Assessment(NamedTuple):
    """Verdict and findings for an interval or a run."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    """Worst first."""


class ProcessSummary(NamedTuple):
    """One process over the whole run: mean and peak of each metric."""

    pid: int
    ppid: int
    name: str
    cmdline: str
    threads: int
    """Peak thread count."""
    cpu_percent: float
    cpu_percent_peak: float
    demand: float
    demand_peak: float
    run_delay_ratio: float | None
    run_delay_ratio_peak: float | None
    involuntary_ctx_per_s: float | None
    involuntary_ctx_per_s_peak: float | None
    voluntary_ctx_per_s: float | None
    voluntary_ctx_per_s_peak: float | None
    active_threads_peak: int
    pools: tuple[str, ...] | None
    thread_env: Mapping[str, str] | None
    exited: bool
    seconds: float
    """How long the process was observed."""
    live_pools: Mapping[str, int] | None = None
    """Pool key -> threads it was last set to, read from its memory; None = unknown."""
    owners: tuple[OwnerCount, ...] | None = None
    """Threads by owner over the run (`analysis.ownercounts.RunOwners`); None = not read."""


class Ancestor(NamedTuple):
    """A process on the way from a busy process up to the root of the tree: who started it."""

    pid: int
    name: str
    cmdline: str
    role: str | None
    """What kind of worker it is ("pytest-xdist worker", "loky worker", `analysis.nesting`);
    None: not a worker oversub knows."""


class EpisodeProcess(NamedTuple):
    """A process busy during an episode (its demand over the episode at least half a
    thread), with its parent chain."""

    pid: int
    name: str
    cmdline: str
    demand: float
    """Runnable threads on average over the episode."""
    active_threads: int
    """Threads active for at least a quarter of the episode (`accumulators.sustained`)."""
    role: str | None
    """What kind of worker it is (`Ancestor.role`)."""
    parents: tuple[Ancestor, ...]
    """Its parent first, then the parent's parent, up to the root of the tree (bounded:
    `analysis.episodes.MAX_PARENTS`)."""


class Nesting(NamedTuple):
    """Nested parallelism seen in an episode: the busy processes descend from several
    workers of one pool, and at least one of those workers started processes of its own
    (`analysis.nesting`)."""

    role: str
    """What the outer workers are ("pytest-xdist worker")."""
    parent: int
    """The pid that started the outer workers (the pool's owner)."""
    workers: int
    """Outer workers present in the episode."""
    inner: int
    """The most busy processes under one outer worker (not counting the worker itself)."""
    inner_role: str | None
    """What those inner processes are ("loky worker"); None: not a worker oversub knows."""
    message: str
    """One sentence: "Nested parallelism: pid A (a pytest-xdist worker) runs beside 3
    processes started by pid B (another pytest-xdist worker); ..."."""
    fix: str
    """The levers, as fits what was seen."""


class Episode(NamedTuple):
    """Consecutive intervals of a run with the same verdict, oversubscribed or starved,
    judged on their own intervals (`analysis.episodes`)."""

    verdict: Verdict
    start_s: float
    """Its first interval's start, in seconds after the run's first sample."""
    end_s: float
    """Its last interval's end, in seconds after the run's first sample."""
    intervals: int
    demand: float
    """The tree's runnable threads on average over the episode."""
    demand_peak: float
    """The most of any of its intervals."""
    run_delay_ratio: float | None
    """Share of the tree's runnable time spent waiting over the episode; None unknown."""
    run_delay_ratio_peak: float | None
    waited_s: float | None
    """CPU-seconds the tree's threads waited for a CPU during the episode; None unknown."""
    finding: Finding
    """The cause and fix judged on the episode's own intervals summed (`verdict.assess`, as
    the run's are), with the nested parallelism (`nesting`) in its message and fix."""
    processes: tuple[EpisodeProcess, ...]
    """The busy processes, the busiest first (at most `analysis.episodes.MAX_PROCESSES`)."""
    busy: int
    """Busy processes in all (`processes` may list fewer)."""
    nesting: Nesting | None = None
    counts: bool = False
    """The episodes of its verdict make the run's verdict (docs/rules.md, "Episodes"); else
    it is listed below the rule (a spike)."""

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


class EpisodeTotal(NamedTuple):
    """Every episode of one verdict in a run, those kept in full and those only counted."""

    verdict: Verdict
    episodes: int
    seconds: float
    share: float
    """`seconds` over the time the tree was measured."""
    longest_s: float
    waited_s: float | None
    """CPU-seconds the tree waited in them; None when a wait was unknown."""
    counts: bool
    """They make the run's verdict (docs/rules.md, "Episodes")."""


class Summary(NamedTuple):
    """A whole `watch`/`check` run (the `--format json` object)."""

    root_pid: int
    budget: Budget
    verdict: Verdict | None
    """The run's verdict; None when the run was not judged (`not_judged` says why)."""
    findings: tuple[Finding, ...]
    processes: tuple[ProcessSummary, ...]
    totals: Totals
    """Tree totals over the whole run (means)."""
    totals_peak: Totals
    """Peak of each total over the intervals."""
    host: HostRates
    """Host context over the whole run."""
    samples: int
    """Intervals measured (the JSON key `samples`: public, so not renamed)."""
    duration_s: float
    target_exited: bool
    unavailable: tuple[Signal, ...] = ()
    notes: tuple[str, ...] = ()
    thresholds: Thresholds = Thresholds()
    """The thresholds the run was judged with (renderers need `min_wait` to tell a delay
    ratio of almost nothing from real waiting)."""
    preflight: bool = False
    """A static preflight (`check --procs M --threads T`): a plan judged, nothing sampled."""
    not_judged: str | None = None
    """Why the run has no verdict (nothing measured, the command failed, ...); None when
    judged. Findings may still be present: they describe what was measured."""
    episodes: tuple[Episode, ...] = ()
    """The run's episodes kept in full, the worst first (severity x duration; at most
    `analysis.episodes.MAX_KEPT`); `episode_totals` counts them all."""
    episode_totals: tuple[EpisodeTotal, ...] = ()
    """Per verdict (oversubscribed first), every episode of the run; none without one."""

    @property
    def judged(self) -> bool:
        """The run has a verdict: something was measured (or planned, for a preflight) and
        nothing made the measurement meaningless."""
        return self.verdict is not None


class CheckOutcome(NamedTuple):
    """How a `check` run ended: what `analysis.policy` judges and the reports show."""

    summary: Summary
    command: tuple[str, ...] | None = None
    """`check -- CMD`: the command as text for reports (None for --pid and the preflight)."""
    command_status: int | None = None
    """The command's exit status; negative = killed by that signal."""
    timed_out: bool = False
    """`--timeout` ended the command (not a failure)."""
    interrupted: bool = False
    """A stop signal ended the run (exit 130)."""
    static: bool = False
    """A preflight: no sample is expected."""


class Gate(NamedTuple):
    """A judged run against `--fail-on` (`analysis.policy.gate`): what fails the build."""

    fail_on: FailOn
    failing: tuple[Finding, ...]
    """The findings that fail at `fail_on` (critical ones for `costly`, else those whose
    verdict is at or above it); none when the run was not judged."""

    def fails(self, finding: Finding) -> bool:
        return finding in self.failing


class CheckDecision(NamedTuple):
    """`check`'s answer, decided once (`analysis.policy.decide`): what every report of the
    run says, the stderr report, the files, the job summary and the recording alike."""

    outcome: CheckOutcome
    """The run, judged (`analysis.policy.judge`: why it is not judged, when it is not)."""
    status: ExitStatus
    """The exit status the process returns."""
    gate: Gate
    identity: NodeIdentity | None = None
    """This node and the launcher's ids, for the --json report."""
    problems: tuple[str, ...] = ()
    """What could not be written (a report file, the recording): each one made the exit 3."""

    def unwritten(self, problem: str | None) -> CheckDecision:
        """The answer once `problem` (a file that could not be written) is known: exit 3,
        unless a stop signal ended the run (130 stands)."""
        if problem is None:
            return self
        status = self.status
        if status is not ExitStatus.INTERRUPTED:
            status = ExitStatus.UNOBSERVABLE
        return self._replace(status=status, problems=(*self.problems, problem))
