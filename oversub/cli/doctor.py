"""`oversub doctor`: before any job, how many threads each installed runtime starts under a
budget, what it sized itself from, and whether M processes of it oversubscribe."""

from __future__ import annotations

import os
import shutil
import sys

import click

from oversub.cli.options import CONTEXT, POSITIVE, SECONDS, Number, format_option
from oversub.core.checkups import CHECKUPS, Checkup, Measurement, RunKind, Status
from oversub.core.errors import ExitStatus, UsageError
from oversub.render import DoctorFormat

DEFAULT_TIMEOUT_S = 120.0
"""Seconds one child may take: torch imports in 2-4 s here, numba compiles its loop in
1-3 s; under a small quota everything is slower."""


def default_python() -> str:
    """The activated virtual environment's interpreter when one is active and it is not
    the one oversub runs in (oversub installed with pipx, run in a venv), else oversub's own."""
    venv = os.environ.get("VIRTUAL_ENV")
    if venv and os.path.realpath(venv) != os.path.realpath(sys.prefix):
        candidate = os.path.join(venv, "bin", "python")
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def _interpreter(given: str | None) -> str:
    if given is None:
        return default_python()
    if not given:
        raise UsageError("--python: an empty path names no interpreter")
    path = given if os.sep in given else shutil.which(given)
    if path is None:
        raise UsageError(f"--python {given}: not found on PATH")
    if not os.path.isfile(path):
        raise UsageError(f"--python {given}: no such file")
    if not os.access(path, os.X_OK):
        raise UsageError(f"--python {given}: not executable")
    return os.path.abspath(path)


def _cpuset(text: str | None, affinity: tuple[int, ...]) -> tuple[int, ...] | None:
    if text is None:
        return None
    from oversub.core.cpulist import format_cpulist, parse_cpulist

    try:
        cpus = parse_cpulist(text)
    except ValueError as error:
        raise UsageError(f"--cpuset {text!r}: {error}") from None
    if not cpus:
        raise UsageError("--cpuset: an empty list leaves no CPU")
    outside = sorted(set(cpus) - set(affinity))
    if outside:
        raise UsageError(
            f"--cpuset: {format_cpulist(outside)} not in the CPUs oversub may use "
            f"({format_cpulist(affinity)})"
        )
    return cpus


def _progress(checkup: Checkup, kind: RunKind, m: Measurement) -> None:
    from oversub.render.escape import terminal

    what = f"{sum(m.started.values())} new threads" if m.status is Status.MEASURED else m.status
    click.echo(
        f"oversub doctor: {checkup.key} ({kind}): {terminal(str(what))}, {m.seconds:.1f} s",
        err=True,
    )


@click.command("doctor", context_settings=CONTEXT)
@click.option(
    "--python",
    "python",
    metavar="PATH",
    default=None,
    help="The interpreter whose packages to check [default: the active venv's, else oversub's].",
)
@click.option(
    "--cpus",
    "cpus",
    type=Number(0.01, None),
    default=None,
    metavar="CPUS",
    help="A CPU quota, as `docker run --cpus` sets (a child cgroup: needs root).",
)
@click.option(
    "--cpuset",
    metavar="LIST",
    default=None,
    help="These CPUs only (affinity), as `--cpuset-cpus`: 0-3,8.",
)
@click.option(
    "--procs",
    "-M",
    type=POSITIVE,
    default=None,
    help="Processes of the job [default: N of the budget, one per usable CPU].",
)
@click.option(
    "--runtime",
    "-r",
    "only",
    multiple=True,
    type=click.Choice([c.key for c in CHECKUPS]),
    help="Check this runtime only (repeat for more) [default: every one installed].",
)
@click.option(
    "--timeout",
    type=SECONDS,
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds one runtime's child may take under one budget.",
)
@click.option(
    "--without-thread-vars",
    is_flag=True,
    help="Start the children without OMP_NUM_THREADS & co: what each runtime does by itself.",
)
@click.option("--fail", is_flag=True, help="Exit 1 when a runtime oversubscribes at M.")
@format_option(DoctorFormat, DoctorFormat.TEXT)
def command(
    python: str | None,
    cpus: float | None,
    cpuset: str | None,
    procs: int | None,
    only: tuple[str, ...],
    timeout: float,
    without_thread_vars: bool,
    fail: bool,
    fmt: str,
) -> ExitStatus:
    """Start each installed runtime in a fresh process under a budget and count its threads.

    \b
    For NumPy, SciPy, torch, ONNX Runtime, polars, pyarrow, numexpr, numba, scikit-learn,
    DuckDB, OpenCV, XGBoost and LightGBM (those installed): the threads one small parallel
    operation starts under the budget, and under the host's and smaller budgets, which says
    what each sized itself from (affinity, a CPU quota, the machine's CPUs), whether M
    processes of it oversubscribe N, and its knob.

    \b
    Examples:
      oversub doctor
      oversub doctor --cpus 1.5              # as in `docker run --cpus 1.5` (root)
      oversub doctor --cpuset 0 --procs 2
      oversub doctor --python .venv/bin/python --format json
    """
    from oversub.cli.output import emit_text
    from oversub.render import render_doctor
    from oversub.run.doctoring import plan_runs, run_doctor

    if sys.platform != "linux":
        raise UsageError("doctor needs Linux (/proc, sched_setaffinity, cgroups)")
    interpreter = _interpreter(python)
    affinity = tuple(sorted(os.sched_getaffinity(0)))
    online = os.cpu_count() or len(affinity)
    if cpus is not None and cpus > online:
        raise UsageError(f"--cpus {cpus:g}: this machine has {online} CPUs online")
    chosen = [c for c in CHECKUPS if not only or c.key in only]
    specs = plan_runs(affinity, cpus, _cpuset(cpuset, affinity))
    report = run_doctor(
        interpreter,
        chosen,
        specs,
        procs=procs,
        timeout=timeout,
        clean_env=without_thread_vars,
        progress=_progress if sys.stderr.isatty() else None,
    )
    emit_text(render_doctor(report, DoctorFormat(fmt)))
    if fail and any(r.oversubscribes for r in report.rows):
        return ExitStatus.FOUND
    return ExitStatus.OK
