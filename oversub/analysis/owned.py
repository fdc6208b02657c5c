"""Oversubscription findings whose cause is read from the threads' owners (`causes`).

The finding names the runtime whose threads are busy and only that runtime's knob; its
severity follows what oversubscribing that runtime was measured to cost (docs/pools.md):
spinning waiters (OpenMP teams, OpenBLAS, ONNX Runtime) are critical, pools whose threads
sleep (polars, Arrow, numexpr, numba) a warning that says the cost is low; the GIL and
communication threads get no thread cap at all. Pure string building.
"""

from __future__ import annotations

from collections.abc import Sequence

from oversub.analysis.causes import Blame, Cause
from oversub.analysis.fixes import app_thread_fix
from oversub.analysis.wording import join_and, sentence, verb, who
from oversub.core.names import Severity, Verdict
from oversub.core.plural import count, noun
from oversub.core.results import Finding, ProcessRates
from oversub.core.rules import Rule
from oversub.core.runtimes import RUNTIMES_BY_KEY, UNATTRIBUTED, describe

Evidence = dict[str, float | int | str | None]


def spin_cost(pools: Sequence[str]) -> str:
    """ "; threads of native pools spin while they wait, which is costly (OpenBLAS: 3-80x
    slower scikit-learn fits, measured)." with the measured cost of each pool that has one."""
    costs = [
        f"{RUNTIMES_BY_KEY[k].label}: {RUNTIMES_BY_KEY[k].measured}"
        for k in pools
        if k in RUNTIMES_BY_KEY and RUNTIMES_BY_KEY[k].measured
    ]
    return "; threads of native pools spin while they wait, which is costly" + (
        f" ({'; '.join(costs)}, measured)." if costs else "."
    )


def unattributed_note(procs: Sequence[ProcessRates]) -> str:
    """ " Their busy threads could not be attributed (pid 11: unattributed: 2 busy, ...): the
    pools named are the ones they map, sized above the target." when the owners were read and
    busy threads stayed unattributed; "" otherwise (owners not read at all say nothing)."""
    unknown = [
        p for p in procs if any(c.owner == UNATTRIBUTED and c.busy for c in p.owner_counts or ())
    ]
    if not unknown:
        return ""
    owners = "; ".join(f"pid {p.pid}: {describe(p.owner_counts or ())}" for p in unknown)
    return (
        f" {verb(len(unknown), 'Its', 'Their')} busy threads could not be attributed to a "
        f"runtime ({owners}): the pools named are the ones mapped and sized above the target, "
        "not observed running."
    )


def cheap_finding(
    pools: Sequence[str],
    procs: Sequence[ProcessRates],
    pids: tuple[int, ...],
    head: str,
    evidence: Evidence,
    fix: str,
) -> Finding:
    """The finding of pools whose threads sleep, named from the mapped libraries of `procs`
    (owners unknown or unattributed: `unattributed_note`): a warning that says the cost is
    low."""
    labels = join_and(RUNTIMES_BY_KEY[k].label for k in pools)
    costs = "; ".join(f"{RUNTIMES_BY_KEY[k].label}: {RUNTIMES_BY_KEY[k].measured}" for k in pools)
    return Finding(
        Rule.OVERSUBSCRIBED_THREADS,
        Severity.WARNING,
        Verdict.OVERSUBSCRIBED,
        f"{head}the busy processes run {labels} above the target; its waiting threads "
        f"sleep, so this costs little ({costs}, measured with 2 processes on 2 CPUs)."
        + unattributed_note(procs),
        pids,
        evidence,
        "The gain is small; to take it: " + fix[0].lower() + fix[1:],
    )


def _code(b: Blame, procs: Sequence[ProcessRates]) -> str | None:
    """The in-code knob of a blamed pool: torch's own call for the OpenMP team of a process
    running PyTorch (it sizes that team), else the runtime's."""
    runtime = RUNTIMES_BY_KEY[b.owner]
    torch = any(p.pid in b.pids and p.pools is not None and "torch" in p.pools for p in procs)
    if b.owner == "libgomp" and torch:
        return "torch.set_num_threads({t})"
    return runtime.code


def knob_fix(b: Blame, threads: int, procs: Sequence[ProcessRates]) -> str:
    """ "ONNX Runtime intra-op pool in 2 processes (pids 11, 12): set
    SessionOptions.intra_op_num_threads = 1 (environment variables do not reach it)"."""
    runtime = RUNTIMES_BY_KEY[b.owner]
    code = _code(b, procs)
    call = None if code is None else code.format(t=threads)
    where = f"{runtime.label} in {who(b.pids)}"
    if not runtime.variables:
        assert call is not None  # every runtime with a pool has one knob at least
        return f"{where}: {call} (environment variables do not reach it)"
    var = runtime.variables[0]
    env = [p.thread_env or {} for p in procs if p.pid in b.pids]
    if env and all(e.get(var, "").strip() == str(threads) for e in env):
        # The variable is already at the target, yet the pool runs more: it was set after
        # the library read it (os.environ after import). Only code, or an earlier export.
        late = f"{var}={threads} is set but did not reach it (set after the library started)"
        return f"{where}: {late} -> export it before the process starts" + (
            f", or {call} in each" if call else ""
        )
    text = f"{where}: set {var}={threads} before the process starts"
    if b.owner == "polars":
        text += " (read once, when polars is imported)"
    return text + (f", or {call} in each, before the work starts" if call else "")


def owned_finding(
    cause: Cause,
    procs: Sequence[ProcessRates],
    pids: tuple[int, ...],
    head: str,
    evidence: Evidence,
    m: int,
    n: int,
    threads: int,
) -> Finding:
    """The finding of an oversubscription whose cause the owners give."""
    evidence = evidence | {"owners": cause.owners, "cause": cause.kind}
    many = f"each of the {m} busy processes" if m > 1 else "the busy process"
    tail = f"; and run at most {count(n, 'busy process')} at a time" if m > n else ""
    if cause.kind in ("spin", "sleep"):
        labels = join_and(RUNTIMES_BY_KEY[b.owner].label for b in cause.blamed)
        evidence |= {
            "threads_per_process": threads,
            "pools": ",".join(b.owner for b in cause.blamed),
        }
        fix = f"Give {many} {count(threads, 'thread')} ({count(n, 'CPU')} / {m}): "
        fix += "; ".join(knob_fix(b, threads, procs) for b in cause.blamed) + tail + "."
        sizes = join_and(f"{RUNTIMES_BY_KEY[b.owner].label}: {b.size}" for b in cause.blamed)
        said = (
            f"{head}the busy threads belong to {labels}, which "
            f"{verb(len(cause.blamed), 'runs', 'run')} more than {threads} at once per process "
            f"({sizes}): {cause.owners}. "
        )
        if cause.kind == "spin":
            spin = [b for b in cause.blamed if RUNTIMES_BY_KEY[b.owner].waits == "spin"]
            costs = [
                f"{RUNTIMES_BY_KEY[b.owner].label}: {RUNTIMES_BY_KEY[b.owner].measured}"
                for b in spin
                if RUNTIMES_BY_KEY[b.owner].measured
            ]
            said += (
                f"The waiting threads of {join_and(RUNTIMES_BY_KEY[b.owner].label for b in spin)} "
                "spin instead of sleeping, so sharing the CPUs is costly"
                + (f" ({'; '.join(costs)}, measured)" if costs else "")
                + "."
            )
            rule, severity = Rule.OVERSUBSCRIBED_POOLS, Severity.CRITICAL
        else:
            costs = [
                f"{RUNTIMES_BY_KEY[b.owner].label}: {RUNTIMES_BY_KEY[b.owner].measured}"
                for b in cause.blamed
            ]
            said += (
                f"{verb(len(cause.blamed), 'Its', 'Their')} waiting threads sleep, so this costs "
                f"little ({'; '.join(costs)}, measured with 2 processes on 2 CPUs)."
            )
            fix = "The gain is small; to take it: " + fix[0].lower() + fix[1:]
            rule, severity = Rule.OVERSUBSCRIBED_THREADS, Severity.WARNING
        return Finding(rule, severity, Verdict.OVERSUBSCRIBED, said, pids, evidence, fix)
    evidence |= {"threads_per_process": None, "pools": None}
    if cause.kind == "gil":
        most = max(p.cpu_percent for p in procs) / 100
        said = (
            f"{head}the busy threads are the Python interpreter's, and no process uses more "
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
            f"{head}the busy pools ({labels}) already run at most {threads} "
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
            f"{head}the extra busy threads are torch.distributed's gloo communication "
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
            f"{head}the busy threads are the application's own Python threads "
            f"({cause.owners}): task threads or executors, not a native pool's."
        )
        fix = sentence(app_thread_fix(n, multi, m)) + "."
    return Finding(
        Rule.OVERSUBSCRIBED_THREADS,
        Severity.WARNING,
        Verdict.OVERSUBSCRIBED,
        said,
        pids,
        evidence,
        fix,
    )
