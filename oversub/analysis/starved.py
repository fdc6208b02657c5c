"""The starved findings: the tree waits for CPUs while its own demand is within its budget N.

Something outside the tree takes the CPUs: the cgroup's quota (`starved-quota`), other
processes or the hypervisor (`starved-outside`), or nothing measured explains the waiting
(`starved-unattributed`, whose words never say "no other load" when some was measured).
docs/rules.md, "Verdicts and rules"; `verdict.assess` decides when they apply. Pure.
"""

from __future__ import annotations

from oversub.analysis.wording import join_and, rounded, sentence
from oversub.core.names import Severity, Verdict
from oversub.core.plural import count
from oversub.core.results import Finding, HostRates, Interval
from oversub.core.rules import Rule
from oversub.core.thresholds import Thresholds

Evidence = dict[str, float | int | str | None]


def starved_findings(
    interval: Interval, th: Thresholds, waiting: bool, base: Evidence, pids: tuple[int, ...]
) -> list[Finding]:
    """The starved findings of `interval` (its demand within N): the quota throttled it,
    other load or the hypervisor took the CPUs while it waited (`waiting`), or nothing
    measured explains the wait. `base`: the verdict's evidence of the interval; `pids`: its
    root, which the findings cite."""
    n = interval.vcpus
    t = interval.totals
    h = interval.host
    found: list[Finding] = []
    throttled_ratio = h.throttled_ratio
    quota = throttled_ratio is not None and throttled_ratio >= th.throttle_ratio
    if throttled_ratio is not None and quota:
        throttled = "" if h.throttled_s is None else f" ({h.throttled_s:.1f} s throttled)"
        found.append(
            Finding(
                rule=Rule.STARVED_QUOTA,
                severity=Severity.WARNING,
                verdict=Verdict.STARVED,
                message=f"The cgroup CPU quota throttled the tree in {throttled_ratio:.0%} of "
                f"its periods{throttled} while it kept {t.demand:.1f} threads runnable.",
                pids=pids,
                evidence=base
                | {"throttled_ratio": rounded(throttled_ratio), "throttled_s": h.throttled_s},
                fix="Raise the cgroup CPU quota, or keep the tree's busy threads within it: at "
                f"most {n} (the quota rounded down; a quota under one CPU throttles even one "
                "busy thread).",
            )
        )
    if not waiting:
        return found
    ratio = t.run_delay_ratio or 0.0
    waited = t.demand * ratio  # CPU-seconds the tree waited per second
    # Other load explains the waiting when it is big in itself, or when it covers at least
    # half of the waiting that the tree's own excess over N (within the margin) does not: a
    # job using exactly N waits past the threshold with ~0.2 CPU of other load. Below
    # min-wait a load is noise, never a cause.
    own = max(0.0, t.demand - n)
    explains = min(th.outside_cpu, max(th.min_wait, 0.5 * (waited - own)))
    outside = h.outside_cpus is not None and h.outside_cpus >= explains
    steal = h.steal_cpus is not None and h.steal_cpus >= explains
    evidence = base | {
        "outside_cpus": rounded(h.outside_cpus),
        "steal_cpus": rounded(h.steal_cpus),
        "psi_some": rounded(h.psi_some),
        "waited_cpus": rounded(waited),
    }
    if outside or steal:
        causes = []
        if outside:
            causes.append(f"other processes used {h.outside_cpus:.2f} CPUs")
        if steal:
            causes.append(f"the hypervisor stole {h.steal_cpus:.2f} CPUs (hypervisor steal)")
        found.append(
            Finding(
                rule=Rule.STARVED_OUTSIDE,
                severity=Severity.WARNING,
                verdict=Verdict.STARVED,
                message=f"{sentence(' and '.join(causes))}; the tree's threads waited "
                f"{ratio:.0%} of their runnable time ({waited:.2f} CPU-seconds per second).",
                pids=pids,
                evidence=evidence,
                fix="Move the other load elsewhere, or pin the job and the other load to "
                "separate CPUs (taskset -c), or accept the slowdown"
                + ("; steal comes from the host, ask for dedicated vCPUs." if steal else "."),
            )
        )
    elif not quota:
        found.append(
            Finding(
                rule=Rule.STARVED_UNATTRIBUTED,
                severity=Severity.INFO,
                verdict=Verdict.STARVED,
                message=f"The tree's threads waited {ratio:.0%} of their runnable time "
                f"({waited:.2f} CPU-seconds per second) with {t.demand:.1f} runnable on "
                f"{count(n, 'CPU')}; {unexplained(h, waited)}.",
                pids=pids,
                evidence=evidence,
                fix="Check what else shares these CPUs (other containers, real-time or niced "
                "tasks, interrupts) and whether the CPU budget N is right.",
            )
        )
    return found


def unexplained(h: HostRates, waited: float) -> str:
    """What was measured besides the tree, in words that never say "no other load" when
    some was measured, nor of a load that could not be read."""
    measured: list[str] = []
    unknown: list[str] = []
    if h.outside_cpus is None:
        unknown.append("CPU use outside the tree")
    else:
        measured.append(f"other processes used {h.outside_cpus:.2f} CPUs")
    if h.steal_cpus is None:
        unknown.append("hypervisor steal")
    else:
        measured.append(f"hypervisor steal was {h.steal_cpus:.2f} CPUs")
    text = ""
    if measured:
        text = f"{join_and(measured)}, less than the {waited:.2f} CPU-seconds per second it waited"
    if unknown:
        text += ("; " if text else "") + f"{join_and(unknown)} could not be read"
    return text
