"""No finding contradicts itself or the data it cites (issue 41, item 5).

Every finding of every recording under tests/ (the render fixtures, and the real-library runs
of tests/unit/analysis/recordings/: `oversub check --record` of examples/libraries.py with 2
processes on 2 CPUs, made with .venv-real) and of a grid of synthetic targets (every mix of
cause kinds, pools read live above and below the target, idle or busy, owners
read or not, costs measured to spin, to work, or not at all) is rendered, and each
clause that bears a number is checked against the interval it judges: "at most 1 thread"
never beside a pool "at 2 threads" that is not said to be idle, the sizes of "runs more than
T" above T, the ratio of "D threads runnable on N CPUs (Rx)", each pid cited in the tree,
the measured share and samples as the evidence holds them, and the words of the cost as the
severity says it ("costly" only where critical, "costs little" or "real work" never).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from oversub.analysis.verdict import assess
from oversub.core.names import Severity
from oversub.core.pcprofile import WaitShare
from oversub.core.results import Finding, Interval
from oversub.core.thresholds import Thresholds
from oversub.recording.replay import parse, reassess
from tests.support.builders import CAUSE_KINDS, IDLE, ROOT, Load, Proc, analyse, cause_proc

TESTS = Path(__file__).resolve().parents[2]
RECORDINGS = sorted(TESTS.rglob("*.ndjson"))
LIBRARIES = sorted((Path(__file__).parent / "recordings").glob("*.ndjson"))

SHARES = {
    "unmeasured": None,
    "spin": WaitShare(1200, 1100, "libgomp", 30.0),
    "work": WaitShare(1200, 30, "libgomp", 30.0),
    "refused": WaitShare(0, 0, None, 30.0, 1, "perf-paranoid", "kernel.perf_event_paranoid is 3"),
}

NUMBER = r"(\d+(?:\.\d+)?)"


def contradictions(f: Finding, iv: Interval | None) -> list[str]:
    """What in `f` disagrees with itself or with `iv` (the interval it judges; None over a
    whole run, whose processes are the summary's)."""
    out: list[str] = []
    text = f"{f.message} {f.fix}"
    ev = f.evidence
    # "at most K thread(s) (... X at S threads ...)": every pool named above K is idle.
    for m in re.finditer(r"at most (\d+) threads?[^(.;]*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text):
        k = int(m.group(1))
        for size in re.finditer(r" at (\d+) threads?(, read live)?(, idle)?", m.group(2)):
            if int(size.group(1)) > k and not size.group(3):
                out.append(f"'at most {k}' beside a pool at {size.group(1)}: {m.group(0)!r}")
    # "runs more than T at once per process (X: S, Y: S2)": each size above T.
    for m in re.finditer(r"runs? more than (\d+) at once per process \(([^)]*)\)", text):
        t = int(m.group(1))
        for size in re.findall(r": (\d+)\b", m.group(2)):
            if int(size) <= t:
                out.append(f"size {size} is not more than {t}: {m.group(0)!r}")
    # "D threads runnable on N CPUs (Rx)".
    for m in re.finditer(NUMBER + r" threads runnable on (\d+) CPUs? \(" + NUMBER + r"x\)", text):
        d, n, r = float(m.group(1)), int(m.group(2)), float(m.group(3))
        if abs(r - d / n) > 0.05 + 0.05 / n + 1e-9:
            out.append(f"{d} / {n} is not {r}x")
    # "Give each of the M busy processes T threads (N CPUs / M)".
    give = r"Give each of the (\d+) busy processes (\d+) threads? \((\d+) CPUs? / (\d+)\)"
    for m in re.finditer(give, text):
        procs, t, n, m2 = (int(g) for g in m.groups())
        if procs != m2 or t != max(1, n // procs):
            out.append(f"{t} threads is not {n} CPUs / {procs}: {m.group(0)!r}")
    # "at most N busy processes at a time": N is the budget.
    for m in re.finditer(r"at most (\d+) busy process(?:es)? at a time", text):
        if "vcpus" in ev and int(m.group(1)) != ev["vcpus"]:
            out.append(f"{m.group(0)!r} on {ev['vcpus']} CPUs")
    # The measured cost, as the evidence holds it; its words as the severity says.
    share, samples = ev.get("wait_share"), ev.get("wait_samples")
    for m in re.finditer(r"Measured here, (<1|>99|\d+) % of [^(]*\(([\d,]+) samples\)", text):
        if share is None or not _same_percent(m.group(1), float(share)):
            out.append(f"{m.group(0)!r} but wait_share {share}")
        if samples != int(m.group(2).replace(",", "")):
            out.append(f"{m.group(0)!r} but wait_samples {samples}")
    work = r"spent (<1|>99|\d+) % of their CPU on real work \((<1|>99|\d+) % waiting"
    for m in re.finditer(work, text):
        if share is None or not _same_percent(m.group(2), float(share)):
            out.append(f"{m.group(0)!r} but wait_share {share}")
        if not _same_percent(m.group(1), 1 - float(share or 0)):
            out.append(f"{m.group(0)!r}: the two shares do not add up")
    single = "more than one cause" not in f.message
    if single and "which is costly" in f.message and f.severity is not Severity.CRITICAL:
        out.append(f"'costly' in a {f.severity.value} finding")
    if single and f.severity is Severity.CRITICAL:
        for cheap in ("costs little", "on real work"):
            if cheap in f.message:
                out.append(f"{cheap!r} in a critical finding")
    if "Cost not measured here" in f.message and ev.get("cost") not in ("unmeasured", None):
        out.append(f"'Cost not measured here' but cost {ev.get('cost')}")
    # Plurals: "1 threads", "2 thread " are a number said wrong.
    for m in re.finditer(r"(?<![\d.,])1 (threads|processes|CPUs|samples)\b", text):
        out.append(f"plural after 1: {m.group(0)!r}")
    for m in re.finditer(r"(?<![\d.,])([02-9]|\d\d+) (thread|process|CPU)(?![\w(-])", text):
        out.append(f"singular after {m.group(1)}: {m.group(0)!r}")
    # Every pid cited is one of the tree's.
    if iv is not None:
        known = {p.pid for p in iv.processes} | {iv.root_pid}
        for m in re.finditer(r"\bpids? ((?:\d+(?:, | and )?)+)", text):
            for pid in re.findall(r"\d+", m.group(1)):
                if int(pid) not in known:
                    out.append(f"pid {pid} cited, not in the tree")
    return out


def _same_percent(said: str, x: float) -> bool:
    if said == "<1":
        return 0 < x < 0.005
    if said == ">99":
        return 0.995 <= x < 1
    return round(100 * x) == int(said)


# --------------------------------------------------------------------------- the findings


def recorded(path: Path) -> Iterator[tuple[Finding, Interval | None]]:
    replay = reassess(parse(path.read_text(encoding="utf-8").splitlines()))
    for iv, a in zip(replay.intervals, replay.assessments, strict=True):
        for f in a.findings:
            yield f, iv
    for f in replay.summary.findings:
        yield f, None
    for e in replay.summary.episodes:
        yield e.finding, None


HALF = Load(cpu=0.5, delay=0.5, involuntary=200.0)


def _pool_proc(
    pid: int, pools: tuple[str, ...], live: int | None, busy: bool, owners: bool
) -> Proc:
    """A busy process with a default or live-sized pool, its threads busy or idle."""
    pool = pools[0]
    loads = (HALF, HALF, HALF if busy else IDLE)
    who = ("python", "unattributed", pool if owners else "unattributed")
    return Proc(
        pid,
        loads,
        pools=pools,
        live=None if live is None else {pool: live},
        live_threads=None if live is None else {pool: max(0, live - 1)},
        owners=who if owners else None,
    )


def synthetic() -> Iterator[tuple[str, Interval]]:
    root = Proc(ROOT, (IDLE,), ppid=1, cmdline="python launch.py")
    for a, b in itertools.combinations_with_replacement(CAUSE_KINDS, 2):
        yield f"mix {a}+{b}", analyse([root, cause_proc(a, 201), cause_proc(b, 202)], 2)
    for pools, live, busy, owners, n, m in itertools.product(
        [("openblas",), ("libgomp",), ("polars",)],
        [None, 1, 2, 4],
        [True, False],
        [True, False],
        [2, 4],
        [2, 3],
    ):
        procs = [root, *(_pool_proc(201 + i, pools, live, busy, owners) for i in range(m))]
        yield f"{pools[0]} live={live} busy={busy} owners={owners} n={n} m={m}", analyse(procs, n)


def _with_share(iv: Interval, share: WaitShare | None) -> Interval:
    return iv._replace(processes=tuple(p._replace(wait_share=share) for p in iv.processes))


CASES = [
    pytest.param(name, cost, id=f"{name} cost={cost}") for name, _ in synthetic() for cost in SHARES
]
_SYNTHETIC = dict(synthetic())


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_no_recorded_finding_contradicts_itself(path: Path) -> None:
    found = list(recorded(path))
    assert found or path.name == "steady-starved.ndjson", "a recording with no finding"
    for f, iv in found:
        assert contradictions(f, iv) == [], f
    assert len(RECORDINGS) >= 7  # the render fixtures and the four real libraries


@pytest.mark.parametrize(("name", "cost"), CASES)
def test_no_synthetic_finding_contradicts_itself(name: str, cost: str) -> None:
    iv = _with_share(_SYNTHETIC[name], SHARES[cost])
    for f in assess(iv, Thresholds()).findings:
        assert contradictions(f, iv) == [], f


def test_the_real_libraries_are_judged_by_what_they_cost() -> None:
    """The recordings of the table of issue 41: XGBoost's team spins (critical), faiss's,
    tokenizers' and OpenCV's threads work (not critical), each by its measured share."""
    severities = {}
    for path in LIBRARIES:
        findings = [f for f, iv in recorded(path) if iv is None and "wait_share" in f.evidence]
        assert findings, path.name
        f = findings[0]
        severities[path.name.split("-")[0]] = (f.severity, f.evidence["cost"])
    assert severities == {
        "xgboost": (Severity.CRITICAL, "spin"),
        "faiss": (Severity.WARNING, "work"),
        "tokenizers": (Severity.WARNING, "work"),
        "opencv": (Severity.WARNING, "work"),
    }


def test_the_checker_finds_what_issue_41_found() -> None:
    """The OpenCV finding of issue 41, and other clauses that disagree with their data."""
    bad = Finding(
        "oversubscribed-threads",  # type: ignore[arg-type]
        Severity.CRITICAL,
        None,  # type: ignore[arg-type]
        "The tree keeps 4.0 threads runnable on 2 CPUs (1.5x); the busy threads belong to "
        "OpenBLAS, which runs more than 2 at once per process (OpenBLAS: 2). Measured here, "
        "their busy threads spent 97 % of their CPU on real work (4 % waiting, 1 samples).",
        (4711,),
        {"vcpus": 2, "wait_share": 0.04, "wait_samples": 1, "cost": "work"},
        "their native pools already run at most 1 thread (OpenBLAS at 2 threads, read live), "
        "so ...; run at most 3 busy processes at a time, pid 999",
    )
    found = contradictions(bad, analyse([Proc(4711, (HALF,), ppid=1)], 2))
    assert len(found) == 8, found
    ok = bad._replace(
        fix="their native pools run at most 1 thread or sit idle (OpenBLAS at 2 threads, read "
        "live, idle)"
    )
    assert not any("at most 1" in c for c in contradictions(ok, None))
