"""`oversub check`: the CI gate, in three modes, with reports and a documented exit code.

The command validates its flags (which mode, which flags that mode takes) and resolves
its settings into `CheckOptions`; `cli.check.runners` checks the report paths before
anything runs, runs the mode (`run.checking`) and reports (`cli.check.reports`); the exit
status comes from `analysis.policy`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from oversub.cli.options import (
    CONTEXT,
    COUNT,
    CPUS,
    PID,
    POSITIVE,
    SECONDS,
    procs_option,
    record_options,
    report_options,
    setting_option,
    threshold_options,
)
from oversub.core.errors import ExitStatus, UsageError
from oversub.core.names import CheckMode, FailOn

# check's modes -> the mode-specific flags each accepts, and what to say to someone who
# gives a flag to the wrong mode (a silently ignored flag makes a gate lie).
_MODE_FLAGS: dict[CheckMode, tuple[str, ...]] = {
    CheckMode.COMMAND: ("--timeout", "--warmup", "--interval", "--record", "--metric"),
    CheckMode.PID: ("--duration", "--interval", "--record"),
    CheckMode.STATIC: ("--workers", "--cpus"),
}
_WRONG_MODE_HINT: dict[str, str] = {
    "--duration": "--duration only applies with --pid (use --timeout with a command)",
    "--timeout": "--timeout only applies with a command (-- CMD ARGS...)",
    "--warmup": "--warmup only applies with a command (-- CMD ARGS...)",
    "--interval": "--interval does not apply to the static preflight: it samples nothing",
    "--workers": "--workers only applies to the static preflight (--procs/--threads)",
    "--cpus": "--cpus only applies to the static preflight (--procs/--threads)",
    "--record": "--record does not apply to the static preflight: it samples nothing",
    "--metric": "--metric only applies with a command (-- CMD ARGS...): it reads CMD's stdout",
}


def refuse_flags_of_other_modes(mode: CheckMode, given: dict[str, object]) -> None:
    """UsageError for the first flag given that `check` in `mode` would ignore."""
    for flag, value in given.items():
        if value is not None and flag not in _MODE_FLAGS[mode]:
            raise UsageError(_WRONG_MODE_HINT[flag])


def check_mode(
    command: tuple[str, ...], pid: int | None, procs: int | None, threads: int | None
) -> CheckMode:
    """Which of check's three modes the flags ask for; UsageError unless exactly one is asked
    for, completely."""
    static = procs is not None or threads is not None
    if sum([bool(command), pid is not None and not static, static]) != 1:
        raise UsageError(
            "check needs exactly one of: -- CMD ARGS..., --pid PID, --cgroup PATH, "
            "or --procs M --threads T"
        )
    if static and (procs is None or threads is None):
        raise UsageError("static preflight needs both --procs and --threads")
    if command:
        return CheckMode.COMMAND
    return CheckMode.STATIC if static else CheckMode.PID


@click.command("check", context_settings={**CONTEXT, "ignore_unknown_options": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--pid", type=PID, default=None, help="Attach to this running tree.")
@click.option(
    "--cgroup",
    "cgroup",
    metavar="PATH",
    default=None,
    help="Attach to every process of this cgroup (its path as /proc/PID/cgroup shows it, "
    "or its directory), judged against its own budget.",
)
@click.option("--duration", type=SECONDS, default=None, help="With --pid: seconds to sample.")
@procs_option(
    "Static preflight: processes; with --apply: the cure's (default auto).",
)
@click.option(
    "--threads",
    "-T",
    type=POSITIVE,
    default=None,
    help="Static preflight: threads each; with --apply: threads of each process.",
)
@click.option(
    "--apply",
    "apply_cure",
    is_flag=True,
    help="With a command: run it with `oversub run`'s cure (docs/run.md), then judge it.",
)
@click.option(
    "--workers",
    "-W",
    type=COUNT,
    default=None,
    help="Static preflight: single-thread workers per process [0].",
)
@click.option("--cpus", "ncpus", type=CPUS, default=None, help="Static preflight: N CPUs.")
@setting_option("interval")
@setting_option("warmup")
@setting_option("timeout")
@setting_option("fail_on")
@report_options
@record_options
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="NAME",
    help="With --record and a command: keep the last NAME=<number> CMD prints (for diff).",
)
@threshold_options("check")
def command(
    command: tuple[str, ...],
    pid: int | None,
    cgroup: str | None,
    duration: float | None,
    procs: int | str | None,
    threads: int | None,
    apply_cure: bool,
    workers: int | None,
    ncpus: int | None,
    interval: float | None,
    warmup: float | None,
    timeout: float | None,
    fail_on: str | None,
    json_path: Path | None,
    junit_path: Path | None,
    markdown_path: Path | None,
    record_path: Path | None,
    record_max_mb: float | None,
    metrics: tuple[str, ...],
    **kwargs: Any,
) -> ExitStatus:
    """CI gate: exit 1 when a job's oversubscription costs it time (docs/guarantees.md has
    every exit code). --fail-on costly (the default) fails on a critical finding;
    --fail-on oversubscribed on any oversubscription.

    \b
    Four ways:
      oversub check [options] -- CMD ARGS...     run CMD and sample its whole tree
      oversub check --pid PID --duration S       attach to a running tree
      oversub check --cgroup PATH --duration S   attach to a cgroup's processes
      oversub check --procs M --threads T [--workers W] [--cpus N]   static preflight
    Defaults also come from [tool.oversub] in ./pyproject.toml; flags win.

    \b
    Examples:
      oversub check --timeout 120 --junit oversub.xml -- python train.py --smoke
      oversub check --pid 1234 --duration 20 --fail-on at-risk
      oversub check --procs 4 --threads 8 --cpus 16
      oversub check --record run.ndjson --json r.json -- python train.py --smoke
      oversub check --apply -- python train.py --smoke   the gate with the cure applied
    """
    from oversub.cli.check import runners
    from oversub.cli.check.metric import check_names
    from oversub.cli.config import load_config, resolve, resolve_float, thresholds_from
    from oversub.cli.options import pop_thresholds
    from oversub.cli.target import budget_of, cgroup_target
    from oversub.run.session import SessionOptions

    if pid is not None and cgroup is not None:
        raise UsageError("--pid and --cgroup exclude each other")
    if apply_cure and not command:
        raise UsageError("--apply needs a command: oversub check --apply -- CMD ARGS...")
    if procs == "auto" and not apply_cure:
        raise UsageError("--procs auto only applies with --apply (the static preflight takes M)")
    cure_flags = (procs, threads, workers, ncpus) if apply_cure else (None,) * 4
    if apply_cure:
        procs = threads = workers = ncpus = None
    assert procs is None or isinstance(procs, int)
    # A cgroup is attached to like a pid: the same mode, flags and reports.
    mode = check_mode(command, pid if cgroup is None else 0, procs, threads)
    refuse_flags_of_other_modes(
        mode,
        {
            "--duration": duration,
            "--timeout": timeout,
            "--warmup": warmup,
            "--interval": interval,
            "--workers": workers,
            "--cpus": ncpus,
            "--record": record_path,
            "--metric": metrics or None,
        },
    )
    if ncpus is not None and pid is not None:
        raise UsageError("--pid and --cpus exclude each other")
    if ncpus is not None and cgroup is not None:
        raise UsageError("--cgroup and --cpus exclude each other")
    if metrics and record_path is None:
        raise UsageError("--metric needs --record FILE: the figures are kept in the recording")
    config = load_config(Path.cwd())
    thresholds = thresholds_from(config, pop_thresholds(kwargs))
    limit = resolve("timeout", timeout, config)
    assert limit is None or isinstance(limit, float | int)
    opts = runners.CheckOptions(
        fail_on=FailOn(resolve("fail_on", fail_on, config)),
        session=SessionOptions(
            interval=resolve_float("interval", interval, config),
            duration=duration,
            warmup=resolve_float("warmup", warmup, config) if mode is CheckMode.COMMAND else 0.0,
            thresholds=thresholds,
        ),
        timeout=None if limit is None else float(limit),
        json_path=json_path,
        junit_path=junit_path,
        markdown_path=markdown_path,
        record_path=record_path,
        record_max_mb=resolve_float("record_max_mb", record_max_mb, config),
        metrics=check_names(metrics),
    )
    if mode is CheckMode.STATIC:
        assert procs is not None and threads is not None
        # With --pid or --cgroup the plan is judged against that target's budget.
        budget = cgroup_target(cgroup)[1] if cgroup is not None else budget_of(pid, ncpus)
        return runners.check_static(budget, procs, threads, workers or 0, opts)
    if mode is CheckMode.COMMAND:
        # CMD inherits our affinity and cgroup, so our own budget is its budget (and reading
        # it before CMD starts cannot race with a command that exits at once).
        if apply_cure:
            from oversub.cli.run import make_cure_for

            cure_procs, cure_threads, cure_workers, cure_cpus = cure_flags
            cure = make_cure_for(
                budget_of(None, cure_cpus),
                cure_procs if cure_procs is not None else "auto",
                cure_workers or 0,
                cure_threads,
            )
            return runners.check_command(list(command), budget_of(None), opts, cure=cure)
        return runners.check_command(list(command), budget_of(None), opts)
    if cgroup is not None:
        return runners.check_cgroup(*cgroup_target(cgroup), opts)
    assert pid is not None
    return runners.check_pid(pid, budget_of(pid), opts)
