"""`make demo`: oversub on this machine, from budget to a red and then a green CI gate.

Every number is computed from this machine's budget N: the oversubscribed run gives each of
M processes `oversub stress`'s team of N threads (sized by default, as an OpenMP team is;
its waiting threads spin), the fixed run sets the variable the finding names,
OMP_NUM_THREADS, to the recommended floor(N/M). Each step runs the real CLI under the
default gate, `--fail-on costly`, so what you see is what a user gets.
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
from oversub.run.stressload import TEAM_VARIABLE

SECONDS = 6.0
"""Length of each stress run: warm-up (1 s) plus several 0.5 s intervals."""


def _run(args: list[str], env: dict[str, str] | None = None) -> int:
    """Run `oversub ARGS` with the variables `env` added, shown as the user would type it."""
    given = env or {}
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in given.items())
    shown = prefix + "oversub " + " ".join(shlex.quote(a) for a in args)
    print(f"\n\033[1m$ {shown}\033[0m" if sys.stdout.isatty() else f"\n$ {shown}", flush=True)
    return subprocess.call([sys.executable, "-m", "oversub", *args], env={**os.environ, **given})


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


def _gate(
    args: list[str], report: Path, env: dict[str, str] | None = None
) -> tuple[int, str | None, list[str]]:
    """Run `check` with a JSON report; (exit status, verdict or None when not judged, the
    rules of its critical findings)."""
    code = _run([*args[:1], "--json", str(report), *args[1:]], env)
    try:
        doc = json.loads(report.read_text("utf-8"))
        verdict = doc.get("verdict")
        critical = [f["rule"] for f in doc.get("findings", []) if f["severity"] == "critical"]
    except (OSError, ValueError, TypeError, KeyError):
        verdict, critical = None, []
    return code, verdict, critical


def costly_words(critical: list[str]) -> str:
    """The critical findings that failed the default gate, `--fail-on costly`."""
    if not critical:
        return "no costly (critical) finding"
    rules = ", ".join(dict.fromkeys(critical))
    return f"{count(len(critical), 'costly finding')} ({rules})"


def outcome_line(
    name: str, code: int, verdict: str | None, critical: list[str] | None = None
) -> str:
    """What a run showed, in words that match the report above it; with `critical` (the
    rules of its critical findings), also which ones failed the gate."""
    if verdict is None:
        return f"{name} run exit {code}: not judged (see the report above)"
    if code == 1:
        line = f"{name} run exit {code}: the gate failed, verdict {verdict}"
        return line if critical is None else f"{line}, {costly_words(critical)}"
    if code == 0 and verdict == "ok":
        return f"{name} run exit {code}: the gate passed, verdict ok (healthy)"
    if code == 0:
        # Starved or at-risk pass the default gate (costly): say why, or the words
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
    # A team sized by default takes all N CPUs; with N = 1 use 2 so that it still oversubscribes.
    bad_threads = max(2, n)
    good_threads = threads_for(n, procs)
    stress = ["stress", "--procs", str(procs), "--seconds", str(SECONDS)]
    bad = stress if n >= 2 else [*stress, "--threads", str(bad_threads)]
    gate = ["check", "--interval", "0.5", "--warmup", "1", "--"]
    # The job's own environment decides both runs: a variable the user exported earlier
    # would size the red run's teams too.
    os.environ.pop(TEAM_VARIABLE, None)

    print(f"oversub demo: this machine's budget is N = {count(n, 'vCPU')}.")
    _run(["cpus"])
    print(plans_line(sorted({1, 2, 4, 2 * n}), n), flush=True)
    _run(["recommend", "--procs", str(procs)])

    print(
        f"\n1) {count(procs, 'process')} x a team of {count(bad_threads, 'thread')} on "
        f"{count(n, 'vCPU')} (its waiting threads spin, as an OpenMP team's): expect a red "
        "gate, a costly finding whose fix names the variable that sizes the team."
    )
    with tempfile.TemporaryDirectory(prefix="oversub-demo-") as tmp:
        red, red_verdict, red_critical = _gate(
            [*gate, sys.executable, "-m", "oversub", *bad], Path(tmp, "red.json")
        )
        print(
            f"\n2) the fix: {TEAM_VARIABLE}={good_threads}, the recommended "
            f"{count(good_threads, 'thread')} per process: expect a green gate (exit 0; on a "
            "busy machine the verdict may still be starved)."
        )
        green, green_verdict, _ = _gate(
            [*gate, sys.executable, "-m", "oversub", *stress],
            Path(tmp, "green.json"),
            {TEAM_VARIABLE: str(good_threads)},
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
