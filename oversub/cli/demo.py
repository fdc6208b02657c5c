"""`make demo`: oversub on this machine, from budget to a red and then a green CI gate.

Every number is computed from this machine's budget N: the oversubscribed run gives each of
M processes N busy threads (what a native pool sized by default does), the fixed run gives
each the recommended floor(N/M). Each step runs the real CLI, so what you see is what a
user gets.

The gate is `--fail-on oversubscribed` (any oversubscription): the stress threads are the
application's own (they hash, no native pool spins), a warning that the default
`--fail-on costly` passes; the closing line says what the default makes of the red run.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from oversub.analysis.plans import threads_for
from oversub.core.plural import count
from oversub.probe.budget import read_budget

SECONDS = 6.0
"""Length of each stress run: warm-up (1 s) plus several 0.5 s intervals."""


def _run(args: list[str]) -> int:
    shown = "oversub " + " ".join(shlex.quote(a) for a in args)
    print(f"\n\033[1m$ {shown}\033[0m" if sys.stdout.isatty() else f"\n$ {shown}", flush=True)
    return subprocess.call([sys.executable, "-m", "oversub", *args])


def plans_line(counts: list[int], n: int) -> str:
    """One line for `recommend --procs M` over several M, from the real CLI's JSON: the
    table and the exports once (for the M the demo runs), not one near-identical block each."""
    parts = []
    for m in counts:
        done = subprocess.run(
            [sys.executable, "-m", "oversub", "recommend", "--procs", str(m), "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            plan = json.loads(done.stdout)
        except ValueError:
            parts.append(f"M = {m}: no plan (exit {done.returncode})")
            continue
        if plan.get("oversubscribed"):
            parts.append(f"M = {m}: over budget even at 1 thread, run at most {n}")
        else:
            parts.append(f"M = {m}: {count(plan['threads_per_process'], 'thread')}")
    return f"\nthreads per process for M processes on N = {n}: " + "; ".join(parts) + "."


def _gate(args: list[str], report: Path) -> tuple[int, str | None, list[str]]:
    """Run `check` with a JSON report; (exit status, verdict or None when not judged, the
    rules of its critical findings)."""
    code = _run([*args[:1], "--json", str(report), *args[1:]])
    try:
        doc = json.loads(report.read_text("utf-8"))
        verdict = doc.get("verdict")
        critical = [f["rule"] for f in doc.get("findings", []) if f["severity"] == "critical"]
    except (OSError, ValueError, TypeError, KeyError):
        verdict, critical = None, []
    return code, verdict, critical


def costly_words(critical: list[str]) -> str:
    """What the default gate, `--fail-on costly`, makes of a judged run's findings."""
    if not critical:
        return "no costly (critical) finding, so the default --fail-on costly passes it"
    rules = ", ".join(dict.fromkeys(critical))
    return f"{count(len(critical), 'costly finding')} ({rules}): --fail-on costly fails it too"


def outcome_line(
    name: str, code: int, verdict: str | None, critical: list[str] | None = None
) -> str:
    """What a run showed, in words that match the report above it; with `critical` (the
    rules of its critical findings), also what the default gate makes of it."""
    if verdict is None:
        return f"{name} run exit {code}: not judged (see the report above)"
    if code == 1:
        line = f"{name} run exit {code}: the gate failed, verdict {verdict}"
        return line if critical is None else f"{line}; {costly_words(critical)}"
    if code == 0 and verdict == "ok":
        return f"{name} run exit {code}: the gate passed, verdict ok (healthy)"
    if code == 0:
        # Starved or at-risk pass the demo's --fail-on oversubscribed: say why, or the words
        # "healthy" would sit under a STARVED banner on a busy machine.
        return (
            f"{name} run exit {code}: the gate passed, but the verdict is {verdict}: other "
            "load on this machine took CPUs from the job (it fails only with --fail-on "
            f"{verdict})"
        )
    return f"{name} run exit {code}: see the report above"


TOUR = "oversub check -- python examples/numpy_matmul.py --procs 2 --seconds 6"
"""The tour's first judged run (README.md, "A 60-second tour"), the demo's next step."""


def next_step(prefix: str, base_prefix: str, path: str, cwd: Path, shell: str) -> str:
    """What to type next, as lines to paste: in a venv whose `bin` is not on PATH (`make
    demo` runs `.venv/bin/python`), first the line that activates it for the user's shell,
    then the tour's first judged run."""
    lines = ["oversub demo: next, the README's 60-second tour:"]
    bindir = Path(prefix, "bin")
    on_path = any(
        entry and Path(cwd, entry).resolve() == bindir.resolve() for entry in path.split(":")
    )
    if prefix != base_prefix and not on_path:
        here = cwd.resolve()
        try:  # relative where the venv is below the working directory (`make demo`'s .venv)
            shown = str(bindir.resolve().relative_to(here)) if here != Path("/") else str(bindir)
        except ValueError:
            shown = str(bindir)
        script = {"fish": "activate.fish", "csh": "activate.csh", "tcsh": "activate.csh"}.get(
            Path(shell).name, "activate"
        )
        activate = "source " + shlex.quote(f"{shown}/{script}")
        lines.append(f"  {activate}    # puts oversub on PATH in this shell")
    lines.append(f"  {TOUR}")
    return "\n".join(lines)


def main() -> int:
    n = read_budget().vcpus
    procs = min(2, n)
    # A pool sized by default takes all N CPUs; with N = 1 use 2 so that it still oversubscribes.
    bad_threads = max(2, n)
    good_threads = threads_for(n, procs)
    stress = ["stress", "--procs", str(procs), "--seconds", str(SECONDS)]
    gate = ["check", "--fail-on", "oversubscribed", "--interval", "0.5", "--warmup", "1", "--"]

    print(f"oversub demo: this machine's budget is N = {count(n, 'vCPU')}.")
    _run(["cpus"])
    print(plans_line(sorted({1, 2, 4, 2 * n}), n), flush=True)
    _run(["recommend", "--procs", str(procs)])

    print(
        f"\n1) {count(procs, 'process')} x {count(bad_threads, 'busy thread')} on "
        f"{count(n, 'vCPU')}: expect a red gate at --fail-on oversubscribed (any "
        "oversubscription)."
    )
    with tempfile.TemporaryDirectory(prefix="oversub-demo-") as tmp:
        red, red_verdict, red_critical = _gate(
            [*gate, sys.executable, "-m", "oversub", *stress, "--threads", str(bad_threads)],
            Path(tmp, "red.json"),
        )
        print(
            f"\n2) the recommended {count(good_threads, 'thread')} per process: expect a green "
            "gate (exit 0; on a busy machine the verdict may still be starved)."
        )
        green, green_verdict, _ = _gate(
            [*gate, sys.executable, "-m", "oversub", *stress, "--threads", str(good_threads)],
            Path(tmp, "green.json"),
        )

    print(
        f"\noversub demo: {outcome_line('red', red, red_verdict, red_critical)}; "
        f"{outcome_line('green', green, green_verdict)}."
    )
    print(
        "\n"
        + next_step(
            sys.prefix,
            sys.base_prefix,
            os.environ.get("PATH", ""),
            Path.cwd(),
            os.environ.get("SHELL", ""),
        )
    )
    return 0 if (red, green) == (1, 0) else 1


if __name__ == "__main__":
    sys.exit(main())
