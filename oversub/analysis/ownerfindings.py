"""Oversubscription findings whose cause is read from the threads' owners (`causes`).

The finding names the runtime whose threads are busy and only that runtime's knob; its
severity follows what oversubscribing that runtime was measured to cost (docs/pools.md):
spinning waiters (OpenMP teams, OpenBLAS, ONNX Runtime) are critical, pools whose threads
sleep (polars, Arrow, numexpr, numba) a warning that says the cost is low; the GIL and
communication threads get no thread cap at all.

A target's one finding is made of parts, one per group of its busy processes
(`causes.groups`, each process judged on its own threads): alone, a part reads as the whole
finding; beside others, each names its processes, and the finding takes the worst part's
severity and rule (`target_finding`). Pure string building.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from oversub.analysis.causes import Blame, Cause
from oversub.analysis.cost import cost_evidence, cost_for, cost_of, cost_said
from oversub.analysis.fixes import app_thread_fix, library_levers
from oversub.analysis.wording import join_and, pids_of, sentence, share, verb, who
from oversub.core.names import Severity, Verdict
from oversub.core.plural import count, noun
from oversub.core.results import Finding, ProcessRates
from oversub.core.rules import Rule
from oversub.core.runtimes import RUNTIMES_BY_KEY, UNATTRIBUTED, describe

Evidence = dict[str, float | int | str | None]


def figure(blame: Blame, procs: Sequence[ProcessRates]) -> str:
    """The cost measured for `blame`'s runtime, where its processes are the situation it was
    measured in (`Runtime.measured_with`: torch's figure for torch's team only); ""."""
    runtime = RUNTIMES_BY_KEY[blame.owner]
    need = runtime.measured_with
    mine = [p for p in procs if p.pid in blame.pids] or list(procs)
    if need and not all(p.pools is not None and need in p.pools for p in mine):
        return ""
    return runtime.measured


def spin_cost(pools: Sequence[str], procs: Sequence[ProcessRates] = ()) -> str:
    """ "; threads of native pools spin while they wait, which is costly (PyTorch's team:
    10.6x slower, measured)." with the measured cost of each pool measured in the situation
    of `procs` (`figure`)."""
    costs = [
        f"{RUNTIMES_BY_KEY[k].label}: {c}"
        for k in pools
        if k in RUNTIMES_BY_KEY and (c := figure(Blame(k, (), 0), procs))
    ]
    return "; threads of native pools spin while they wait, which is costly" + (
        f" ({'; '.join(costs)}, measured)." if costs else "."
    )


def unattributed_note(procs: Sequence[ProcessRates], named: bool = True) -> str:
    """ " Their busy threads could not be attributed (pid 11: unattributed: 2 busy, ...): the
    pools named are the ones mapped and sized above the target." ("2 of their 3 busy
    threads" when others were) when the owners were read and busy threads stayed
    unattributed; without the pools' clause when none is `named`; "" otherwise (owners not
    read at all say nothing)."""
    unknown = [p for p in procs if _busy_unattributed(p)]
    if not unknown:
        return ""
    owners = "; ".join(f"pid {p.pid}: {describe(p.owner_counts or ())}" for p in unknown)
    some = sum(_busy_unattributed(p) for p in unknown)
    busy = sum(c.busy for p in unknown for c in p.owner_counts or ())
    whose = verb(len(unknown), "its", "their")
    threads = f"{whose} busy threads" if some == busy else f"{some} of {whose} {busy} busy threads"
    pools = ": the pools named are the ones mapped and sized above the target, not observed"
    return f" {sentence(threads)} could not be attributed to a runtime ({owners})" + (
        f"{pools} running." if named else "."
    )


def _busy_unattributed(p: ProcessRates) -> int:
    """Busy threads of `p` that no evidence names."""
    return sum(c.busy for c in p.owner_counts or () if c.owner == UNATTRIBUTED)


def cheap_said(pools: Sequence[str], procs: Sequence[ProcessRates], subject: str, runs: str) -> str:
    """What pools whose threads sleep do, named from the mapped libraries of `procs` (owners
    unknown or unattributed: `unattributed_note`), said of `subject` ("the busy processes",
    "1 process (pid 11)") with its verb `runs` ("run", "runs"): the cost is low."""
    labels = join_and(RUNTIMES_BY_KEY[k].label for k in pools)
    costs = "; ".join(f"{RUNTIMES_BY_KEY[k].label}: {RUNTIMES_BY_KEY[k].measured}" for k in pools)
    return (
        f"{subject} {runs} {labels} above the target; its waiting threads "
        f"sleep, so this costs little ({costs}, measured with 2 processes sharing 2 CPUs)."
        + unattributed_note(procs)
    )


def _code(blame: Blame, procs: Sequence[ProcessRates]) -> str | None:
    """The in-code knob of a blamed pool: torch's own call for the OpenMP team of a process
    running PyTorch (it sizes that team), else the runtime's."""
    runtime = RUNTIMES_BY_KEY[blame.owner]
    torch = any(p.pid in blame.pids and p.pools is not None and "torch" in p.pools for p in procs)
    if blame.owner == "libgomp" and torch:
        return "torch.set_num_threads({t})"
    return runtime.code


def knob_fix(
    blame: Blame, threads: int, procs: Sequence[ProcessRates], n: int = 0, m: int = 0
) -> str:
    """ "ONNX Runtime intra-op pool in 2 processes (pids 11, 12): set
    SessionOptions.intra_op_num_threads = 1 (environment variables do not reach it)"; for a
    library oversub has no row for, the levers of any runtime (`fixes.library_levers`, `m`
    busy processes on `n` CPUs)."""
    runtime = RUNTIMES_BY_KEY[blame.owner]
    if runtime.waits == "unknown":
        return library_levers(blame.owner, blame.pids, threads, n, m)
    code = _code(blame, procs)
    call = None if code is None else code.format(t=threads)
    where = f"{runtime.label} in {who(blame.pids)}"
    if not runtime.variables:
        assert call is not None  # every runtime with a pool has one knob at least
        return f"{where}: {call} (environment variables do not reach it)"
    var = runtime.variables[0]
    env = [p.thread_env or {} for p in procs if p.pid in blame.pids]
    if env and all(e.get(var, "").strip() == str(threads) for e in env):
        # The variable is already at the target, yet the pool runs more: it was set after
        # the library read it (os.environ after import). Only code, or an earlier export.
        late = f"{var}={threads} is set but did not reach it (set after the library started)"
        return f"{where}: {late} -> export it before the process starts" + (
            f", or {call} in each" if call else ""
        )
    text = f"{where}: set {var}={threads} before the process starts"
    if blame.owner == "polars":
        text += " (read once, when polars is imported)"
    return text + (f", or {call} in each, before the work starts" if call else "")


class Part(NamedTuple):
    """One group of a target's busy processes (`causes.Group`) in the target's finding."""

    rule: Rule
    severity: Severity
    said: str
    """Alone in the finding: what follows its head ("the busy threads belong to ...")."""
    fix: str
    """Alone in the finding: the whole fix."""
    scoped: str
    """Beside other groups: sentences that name its processes."""
    scoped_fix: str
    """Beside other groups: the fix of its processes, sentences that name them (without
    "run at most N busy processes at a time" nor, for pools, the size to give them: the
    finding says those once)."""
    evidence: Evidence
    sized: bool = False
    """Its fix sizes pools (to T threads per process)."""


def in_who(pids: Sequence[int], text: str) -> str:
    """ "In 1 process (pid 11), the busy threads ..." from "the busy threads ..."."""
    return f"In {who(pids)}, {text}"


def owned_part(
    cause: Cause,
    procs: Sequence[ProcessRates],
    m: int,
    n: int,
    threads: int,
) -> Part:
    """The part of the busy processes `procs` whose cause the owners give (every one of them
    judged on its own threads: `causes.groups`), among `m` busy processes on `n` CPUs."""
    pids = pids_of(procs)
    evidence: Evidence = {"owners": cause.owners, "cause": cause.kind}
    many = f"each of the {m} busy processes" if m > 1 else "the busy process"
    tail = f"; and run at most {count(n, 'busy process')} at a time" if m > n else ""
    if cause.kind in ("spin", "sleep", "library"):
        labels = join_and(RUNTIMES_BY_KEY[b.owner].label for b in cause.blamed)
        evidence |= {
            "threads_per_process": threads,
            "pools": ",".join(b.owner for b in cause.blamed),
        }
        each = f"{count(threads, 'thread')} ({share(n, m)})"
        knobs = "; ".join(knob_fix(b, threads, procs, n, m) for b in cause.blamed)
        if any(RUNTIMES_BY_KEY[b.owner].waits == "unknown" for b in cause.blamed):
            tail = ""  # its levers lead with fewer processes
        fix = f"Give {many} {each}: {knobs}{tail}."
        scoped_fix = f"{sentence(knobs)}."
        sizes = join_and(f"{RUNTIMES_BY_KEY[b.owner].label}: {b.size}" for b in cause.blamed)
        # Busy threads no evidence names may be anything: only the named ones are the pools'.
        named = "" if not any(_busy_unattributed(p) for p in procs) else " named"
        said = (
            f"the busy threads{named} belong to {labels}, which "
            f"{verb(len(cause.blamed), 'runs', 'run')} more than {threads} at once per process "
            f"({sizes}): {cause.owners}. "
        )
        cost = cost_for(procs, [b.owner for b in cause.blamed])
        evidence |= cost_evidence(cost)
        if cause.kind == "spin" and cost.kind == "unmeasured":
            # Not measured here: the catalogue's word (a spinning runtime seen running them).
            spin = [b for b in cause.blamed if RUNTIMES_BY_KEY[b.owner].waits == "spin"]
            costs = [
                f"{RUNTIMES_BY_KEY[b.owner].label}: {c}" for b in spin if (c := figure(b, procs))
            ]
            said += (
                f"The waiting threads of {join_and(RUNTIMES_BY_KEY[b.owner].label for b in spin)} "
                "spin instead of sleeping, so sharing the CPUs is costly"
                + (f" ({'; '.join(costs)}, measured)" if costs else "")
                + f". {cost_said(cost)}"
            )
            rule, severity = Rule.OVERSUBSCRIBED_POOLS, Severity.CRITICAL
        elif cause.kind == "spin" or (cause.kind == "sleep" and cost.kind == "spin"):
            # Measured here: the severity follows where their CPU went, whatever the kind
            # (a pool whose threads sleep, measured to work, keeps its own words below).
            said += cost_said(cost)
            if cost.kind == "spin":
                rule, severity = Rule.OVERSUBSCRIBED_POOLS, Severity.CRITICAL
            else:
                rule, severity = Rule.OVERSUBSCRIBED_THREADS, Severity.WARNING
        elif cause.kind == "library":
            rowless = [b for b in cause.blamed if RUNTIMES_BY_KEY[b.owner].waits == "unknown"]
            named = join_and(RUNTIMES_BY_KEY[b.owner].label for b in rowless)
            said += (
                f"oversub has no row for {named} (named by the object "
                f"{verb(len(rowless), 'its', 'their')} threads run in): no knob of "
                f"{verb(len(rowless), 'its', 'their')} own is known."
            )
            rule, severity = Rule.OVERSUBSCRIBED_THREADS, Severity.WARNING
        else:
            costs = [f"{RUNTIMES_BY_KEY[b.owner].label}: {figure(b, procs)}" for b in cause.blamed]
            said += (
                f"{verb(len(cause.blamed), 'Its', 'Their')} waiting threads sleep, so this costs "
                f"little ({'; '.join(costs)}, measured with 2 processes sharing 2 CPUs). "
                f"{cost_said(cost)}"
            )
            fix = "The gain is small; to take it: " + fix[0].lower() + fix[1:]
            scoped_fix = f"The gain is small; to take it: {knobs}."
            rule, severity = Rule.OVERSUBSCRIBED_THREADS, Severity.WARNING
        scoped = in_who(pids, said)
        return Part(rule, severity, said, fix, scoped, scoped_fix, evidence, sized=True)
    evidence |= {"threads_per_process": None, "pools": None}
    if cause.kind == "gil":
        most = max(p.cpu_percent for p in procs) / 100
        said = (
            f"the busy threads are the Python interpreter's, and no process uses more "
            f"than {most:.1f} {noun(round(most, 1), 'CPU')} while several of "
            "its threads are busy, most of which give up the CPU more often than they are "
            f"preempted: they take turns on the GIL ({cause.owners}). That is not CPU "
            "oversubscription, and a thread cap does not help (1 thread per process "
            "measured 0.93x)."
        )
        fix = (
            "For CPU-bound Python code use processes instead of threads "
            f"(ProcessPoolExecutor or multiprocessing, at most {count(n, 'process')} busy at "
            "a time), or a free-threaded Python (3.13t or later); capping the threads does "
            "not help."
        )
    elif cause.kind == "fitted":
        labels = join_and(RUNTIMES_BY_KEY[b.owner].label for b in cause.blamed)
        said = (
            f"the busy pools ({labels}) already run at most {threads} "
            f"{verb(threads, 'thread', 'threads')} per process ({cause.owners}): the other "
            "busy thread is each process's caller, working beside its pool."
        )
        fix = (
            f"Nothing left to cap: {labels} already {verb(len(cause.blamed), 'runs', 'run')} "
            f"{threads} per process. What still waits is each process's calling thread beside "
            "its pool, which costs little; only fewer busy processes at a time remove it."
        )
    elif cause.kind == "comm":
        said = (
            f"the extra busy threads are torch.distributed's gloo communication "
            f"threads ({cause.owners}): they run while the ranks exchange data, and no "
            "thread cap reaches them."
        )
        fix = (
            "Nothing to cap: gloo's communication threads belong to the collectives. Keep "
            f"each rank's compute threads at {threads} (torchrun exports "
            "OMP_NUM_THREADS=1 unless it is set), or run fewer ranks per node."
        )
    else:
        multi = sum(1 for p in procs if p.active_threads >= 2)
        said = (
            f"the busy threads are the application's own Python threads "
            f"({cause.owners}): task threads or executors, not a native pool's."
        )
        fix = sentence(app_thread_fix(n, multi, m)) + "."
    scoped_fix = f"In {who(pids)}: {fix[0].lower()}{fix[1:]}"
    return Part(
        Rule.OVERSUBSCRIBED_THREADS,
        Severity.WARNING,
        said,
        fix,
        in_who(pids, said),
        scoped_fix,
        evidence,
    )


COSTED = frozenset({"library", "app"})
"""Causes whose part does not weigh its cost itself (`owned_part` does for spin and sleep;
the GIL, gloo and fitted pools are no thread cap's): `costed` adds it."""


def costed(part: Part, procs: Sequence[ProcessRates]) -> Part:
    """`part` with what its busy threads were measured to cost (`analysis.cost`): critical
    when they spin, never when they work, as it was when not measured (a warning: no
    runtime that spins was seen running them); the cost said either way."""
    cost = cost_of(procs)
    said = cost_said(cost)
    rule, severity = part.rule, part.severity
    if cost.kind == "spin":
        rule, severity = Rule.OVERSUBSCRIBED_POOLS, Severity.CRITICAL
    elif cost.kind == "work" and severity is Severity.CRITICAL:
        rule, severity = Rule.OVERSUBSCRIBED_THREADS, Severity.WARNING
    return part._replace(
        rule=rule,
        severity=severity,
        said=f"{part.said} {said}",
        scoped=f"{part.scoped} {said}",
        evidence=dict(part.evidence) | cost_evidence(cost),
    )


_RULE_RANK = {Rule.OVERSUBSCRIBED_POOLS: 0, Rule.OVERSUBSCRIBED_THREADS: 1}


def target_finding(
    parts: Sequence[Part],
    procs: Sequence[ProcessRates],
    head: str,
    evidence: Evidence,
    m: int,
    n: int,
    threads: int,
) -> Finding:
    """The one oversubscription finding of a target whose busy processes `procs` make up
    `parts` (each judged on its own threads, `causes.groups`): alone, the part's own words;
    beside others, each part names its processes, the worst first, and the finding takes
    the worst severity and rule of its parts, so a cheap cause in one process never hides a
    costly one in another. Every busy process is in some part."""
    pids = pids_of(procs)
    ordered = sorted(parts, key=lambda p: (-p.severity.rank, _RULE_RANK.get(p.rule, 2)))
    worst = ordered[0]
    if len(ordered) == 1:
        return Finding(
            worst.rule,
            worst.severity,
            Verdict.OVERSUBSCRIBED,
            head + worst.said,
            pids,
            evidence | worst.evidence,
            worst.fix,
        )
    merged: Evidence = {}
    for part in reversed(ordered):  # the worst part's values last: its own win
        merged |= part.evidence
    per_process = [p.evidence.get("threads_per_process") for p in ordered]
    pools = [k for p in ordered for k in str(p.evidence.get("pools") or "").split(",") if k]
    owners = "; ".join(f"pid {p.pid}: {describe(p.owner_counts)}" for p in procs if p.owner_counts)
    merged |= {
        "threads_per_process": next((t for t in per_process if t is not None), None),
        "pools": ",".join(dict.fromkeys(pools)) or None,
        "owners": owners or None,
        "cause": worst.evidence.get("cause"),  # the worst part's; None: from mapped pools
    }
    said = head + "its busy threads have more than one cause. "
    said += " ".join(p.scoped for p in ordered)
    fix = " ".join(p.scoped_fix for p in ordered)
    if any(p.sized for p in ordered):  # pools come first among equals (`causes.groups`)
        fix = f"Size the pools to {count(threads, 'thread')} per process ({share(n, m)}). {fix}"
    fewer = f"at most {count(n, 'busy process')} at a time"
    if m > n and fewer not in fix:
        fix += f" Run {fewer}."
    return Finding(
        worst.rule,
        worst.severity,
        Verdict.OVERSUBSCRIBED,
        said,
        pids,
        evidence | merged,
        fix,
    )
