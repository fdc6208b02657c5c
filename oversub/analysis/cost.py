"""What a target's oversubscription costs, from this run: the severity rule and its words.

While a target is oversubscribed, `run.waitcost` samples its busy processes' busiest
threads for a moment (perf events, user space only) and `analysis.spin` splits their
samples into a runtime's wait or spin code and real work: each process's `WaitShare`. A
group of busy processes (`causes.groups`) costs what its measured processes show, summed:

- spin (at least `SPIN_SHARE` of the samples in wait code): the waiting threads burn the
  CPUs the work wants; critical (OpenMP teams of XGBoost, scikit-learn's HGB, LightGBM:
  0.85-0.99 waiting, 3-5x slower, docs/pools.md);
- work (less): the threads share the CPUs and lose only their share; a warning, never
  critical (faiss, tokenizers, OpenCV: 0.00-0.05 waiting, 1.02-1.18x);
- not measured (no perf events: a container's seccomp profile, `perf_event_paranoid` 3,
  another user's process without root; a process whose reads were abandoned; no window
  yet): the severity falls back to what the owners show (a catalogued runtime that spins,
  seen running the busy threads: critical; one whose threads sleep: a warning), and for
  busy threads no runtime was seen running, never to a pool that is merely mapped: a
  warning, with "cost not measured here" and `oversub tune` to measure it.

docs/rules.md, "What oversubscription costs". Pure: functions of `ProcessRates`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from oversub.core.pcprofile import SPIN_SHARE, WaitShare
from oversub.core.results import ProcessRates

CostKind = Literal["spin", "work", "unmeasured"]

SPIN_LABELS = {
    "libgomp": "GNU OpenMP's",
    "libomp": "LLVM OpenMP's",
    "openblas": "OpenBLAS's",
    "rayon": "rayon's",
    "yield": "the C library's yield",
    "spin-hint": "a spin loop's",
}
"""Whose wait code (`analysis.spin.SPIN_CODE` keys) in words."""

TUNE = "`oversub tune -- CMD` measures what fewer threads gain"


class Cost(NamedTuple):
    """What a group of busy processes' waiting costs, as this run measured it."""

    kind: CostKind
    samples: int
    """User-space samples of their busy threads, summed over the processes measured."""
    waiting: int
    """Of those, in wait or spin code."""
    runtime: str | None
    """Whose wait code holds most of the waiting (`WaitShare.runtime`)."""
    measured: int
    """Processes measured."""
    why: str = ""
    """Why not measured: the first reason given, or that no window was taken (`watch
    --once`, a recording made before, perf never tried: a fake tree, no /proc)."""

    @property
    def share(self) -> float | None:
        return self.waiting / self.samples if self.samples and self.measured else None


def cost_of(procs: Sequence[ProcessRates]) -> Cost:
    """The cost of the busy processes `procs` from their measured shares, summed (a process
    whose share is not measured adds nothing)."""
    shares = [p.wait_share for p in procs if p.wait_share is not None]
    measured = [w for w in shares if w.share is not None]
    if not measured:
        return Cost("unmeasured", 0, 0, None, 0, _why(shares))
    samples = sum(w.samples for w in measured)
    waiting = sum(w.waiting for w in measured)
    by: dict[str, int] = {}
    for w in measured:
        if w.runtime is not None:
            by[w.runtime] = by.get(w.runtime, 0) + w.waiting
    runtime = max(by, key=by.__getitem__) if by else None
    kind: CostKind = "spin" if waiting >= SPIN_SHARE * samples else "work"
    return Cost(kind, samples, waiting, runtime, len(measured))


OPAQUE = {
    "stress": "oversub stress's team waits by hashing, which sampled code cannot tell from work",
    "openblas": (
        "OpenBLAS's threads wait partly in sched_yield, in the kernel, where user-space "
        "samples do not look"
    ),
}
"""Runtimes whose waiting threads spin in code no sample can tell from work: their catalogue
kind stands, measured or not (`cost_for`)."""


def cost_for(procs: Sequence[ProcessRates], owners: Sequence[str]) -> Cost:
    """`cost_of`, unless one of `owners` waits in code that looks like work (`OPAQUE`):
    then not measured, saying why."""
    opaque = next((OPAQUE[k] for k in owners if k in OPAQUE), None)
    if opaque is not None:
        return Cost("unmeasured", 0, 0, None, 0, opaque)
    return cost_of(procs)


def _why(shares: Sequence[WaitShare]) -> str:
    if not shares:
        return "no window taken in this run"
    return next((w.why for w in shares if w.why), "")


def cost_evidence(c: Cost) -> dict[str, float | int | str | None]:
    """The JSON evidence of a finding's cost: `wait_share` (0-1, null when not measured),
    `wait_samples`, `wait_runtime`, `cost` ("spin", "work", "unmeasured")."""
    share = c.share
    return {
        "cost": c.kind,
        "wait_share": None if share is None else round(share, 3),
        "wait_samples": c.samples,
        "wait_runtime": c.runtime,
    }


def cost_said(c: Cost, whose: str = "their") -> str:
    """The sentence that says what the cost is, measured here or not:
    "Measured here, 93 % of their busy threads' CPU went to GNU OpenMP's wait code (1,204
    samples): their waiting takes the CPUs from the work, which is costly."
    "Measured here, their busy threads spent 97 % of their CPU on real work (3 % waiting,
    1,204 samples), so sharing the CPUs costs little beyond their share."
    "Cost not measured here (kernel.perf_event_paranoid is 3: ...): `oversub tune -- CMD`
    measures what fewer threads gain." """
    share = c.share
    if c.kind == "unmeasured" or share is None:
        why = f" ({c.why})" if c.why else ""
        return f"Cost not measured here{why}: {TUNE}."
    pct = _percent(share)
    samples = f"{c.samples:,} samples"
    if c.kind == "spin":
        code = SPIN_LABELS.get(c.runtime or "", "a runtime's")
        return (
            f"Measured here, {pct} of {whose} busy threads' CPU went to {code} wait code "
            f"({samples}): {whose} waiting takes the CPUs from the work, which is costly."
        )
    return (
        f"Measured here, {whose} busy threads spent {_percent(1 - share)} of their CPU on "
        f"real work ({pct} waiting, {samples}), so sharing the CPUs costs little beyond "
        "their share."
    )


def _percent(x: float) -> str:
    """ "93 %"; "<1 %" and ">99 %" rather than a rounded 0 or 100 that the data deny."""
    if 0 < x < 0.005:
        return "<1 %"
    if 0.995 <= x < 1:
        return ">99 %"
    return f"{round(100 * x)} %"
