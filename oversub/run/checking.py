"""`oversub check`'s three ways to run: start a command, attach to a pid, or plan statically.

Each returns a `CheckOutcome` (what ran, how it ended, the run's summary); judging it and
writing reports is the CLI's (`analysis.policy`, `cli.check.reports`). A command started here is
stopped with its whole tree before `run_command` returns, whatever happens; its own
stdout and stderr pass through. What `check` says while it runs goes to a `Progress`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from oversub.core.results import Assessment, CheckOutcome, Interval
from oversub.core.targets import Target
from oversub.run import stopsignals
from oversub.run.session import RunResult, SessionOptions, each_interval

if TYPE_CHECKING:
    import subprocess

    from oversub.core.model import Budget
    from oversub.probe.cgroup_target import CgroupRef
    from oversub.run.runner import TreeReaper


class Progress(Protocol):
    """What a run says while it goes (`cli.check.progress.CheckProgress` writes it to stderr)."""

    def started(
        self, pid: int, command: tuple[str, ...], session: SessionOptions, timeout: float | None
    ) -> None: ...

    def attached(self, pid: int, session: SessionOptions) -> None: ...

    def interval(
        self, iv: Interval, assessment: Assessment, intervals: int, elapsed: float
    ) -> None: ...

    def close(self) -> None: ...


class Silent:
    """A `Progress` that says nothing: `run`'s (CMD's own output is what the user watches)
    and each of `tune`'s trials' (tune says its own progress, once per trial)."""

    def started(self, *args: object) -> None: ...

    def attached(self, *args: object) -> None: ...

    def interval(self, *args: object) -> None: ...

    def close(self) -> None: ...


class Tapped:
    """A `Progress` that passes everything on to `inner`, each interval to `tap` first (the
    recording of `check --record`, the verification of `check --apply`)."""

    def __init__(
        self, inner: Progress, tap: Callable[[Interval, Assessment, int, float], None]
    ) -> None:
        self.inner = inner
        self.tap = tap

    def started(
        self, pid: int, command: tuple[str, ...], session: SessionOptions, timeout: float | None
    ) -> None:
        self.inner.started(pid, command, session, timeout)

    def attached(self, pid: int, session: SessionOptions) -> None:
        self.inner.attached(pid, session)

    def interval(
        self, iv: Interval, assessment: Assessment, intervals: int, elapsed: float
    ) -> None:
        self.tap(iv, assessment, intervals, elapsed)
        self.inner.interval(iv, assessment, intervals, elapsed)

    def close(self) -> None:
        self.inner.close()


def report_command(argv: list[str]) -> tuple[str, ...]:
    """`argv` as text for reports: bytes that are not UTF-8 (surrogate escapes) become U+FFFD.

    JSON and Markdown are UTF-8 files; an argument from a Latin-1 file name would otherwise
    make writing the report fail.
    """
    return tuple(os.fsencode(arg).decode("utf-8", "replace") for arg in argv)


def run_command(
    argv: list[str],
    budget: Budget,
    session: SessionOptions,
    progress: Progress,
    *,
    timeout: float | None = None,
    grace: float = 3.0,
) -> CheckOutcome:
    """Start `argv`, sample its tree until it exits or `timeout` ends it, stop what is left.

    SIGINT, SIGTERM and SIGHUP end the run like Ctrl-C (`interrupted`); once the tree is
    being stopped they only mark it interrupted, so a second signal cannot leave it
    running. While it runs, oversub is the child subreaper: orphans of the tree are
    re-parented to it, counted as the command's, stopped with it and reaped. `grace` is
    the time between SIGTERM and SIGKILL when the tree is stopped.
    """
    from oversub.run.runner import child_subreaper

    with child_subreaper() as adopting:
        return _run_command(
            argv, budget, session, progress, timeout, grace, os.getpid() if adopting else None
        )


def _run_command(
    argv: list[str],
    budget: Budget,
    session: SessionOptions,
    progress: Progress,
    timeout: float | None,
    grace: float,
    adopter: int | None,
) -> CheckOutcome:
    from oversub.run.runner import TreeReaper, start_command
    from oversub.run.session import follow
    from oversub.run.sources import attach

    proc: subprocess.Popen[bytes] | None = None
    reaper: TreeReaper | None = None
    result: RunResult | None = None
    timed_out = False
    late_interrupt = False
    with stopsignals.interrupt():
        try:
            # The start is atomic for stop signals: one that lands between the fork and the
            # moment the child is held stays pending until then, so it can never leave a
            # command nobody stops. Inside the try: it then stops the tree.
            with stopsignals.blocked():
                proc = start_command(argv)
                reaper = TreeReaper(proc, adopter=adopter)
            ends = None if timeout is None else time.monotonic() + timeout
            progress.started(proc.pid, report_command(argv), session, timeout)

            def should_stop() -> bool:
                nonlocal timed_out
                assert proc is not None
                if proc.poll() is not None:
                    return True
                if ends is not None and time.monotonic() >= ends:
                    timed_out = True
                    return True
                return False

            def observe(iv: Interval, a: Assessment, intervals: int, elapsed: float) -> None:
                assert reaper is not None
                reaper.observe(p.pid for p in iv.processes)
                reaper.reap_adopted()
                progress.interval(iv, a, intervals, elapsed)

            target = Target.tree(proc.pid, adopter=adopter)
            with contextlib.closing(attach(target, budget)) as source:

                def sleep(seconds: float) -> None:
                    # The command's exit ends the source's wait (its root's pidfd); the
                    # timeout must end it too.
                    if ends is not None:
                        seconds = min(seconds, ends - time.monotonic())
                    source.wait(max(0.0, seconds))

                result = follow(
                    source,
                    session,
                    on_round=each_interval(observe),
                    should_stop=should_stop,
                    sleep=sleep,
                )
        except KeyboardInterrupt:
            result = None
        finally:
            progress.close()
            if proc is not None:
                late_interrupt = _stop_tree(proc, reaper, grace)
    assert proc is not None  # start_command either returned or raised out of this function
    if result is not None:
        summary = result.summary
    else:
        from oversub.analysis.summary import unmeasured_summary

        summary = unmeasured_summary(
            budget, proc.pid, session.thresholds, note="interrupted before a sample"
        )
    return CheckOutcome(
        summary=summary,
        command=report_command(argv),
        command_status=proc.returncode,
        timed_out=timed_out,
        interrupted=result is None or result.interrupted or late_interrupt,
    )


def _stop_tree(proc: subprocess.Popen[bytes], reaper: TreeReaper | None, grace: float) -> bool:
    """Stop the command's whole tree with stop signals deferred; True if one came meanwhile
    or just before.

    Inside `stopsignals.interrupt` only the first stop signal raises, so when it lands
    between the end of the run and the moment signals are deferred, the second attempt
    cannot be interrupted and the tree is still stopped.
    """
    from oversub.run.runner import TreeReaper

    try:
        with stopsignals.deferred() as during:
            (reaper or TreeReaper(proc)).terminate(grace)
    except KeyboardInterrupt:
        with stopsignals.deferred():
            (reaper or TreeReaper(proc)).terminate(grace)
        return True
    return during.received


def run_pid(pid: int, budget: Budget, session: SessionOptions, progress: Progress) -> CheckOutcome:
    """Attach to a running tree for `session.duration` seconds (or until it exits)."""
    return _run_attached(Target.tree(pid), budget, session, progress)


def run_cgroup(
    ref: CgroupRef, budget: Budget, session: SessionOptions, progress: Progress
) -> CheckOutcome:
    """Attach to a cgroup's processes for `session.duration` seconds (or until the cgroup is
    removed); processes that join or leave meanwhile are normal."""
    return _run_attached(Target.of_cgroup(ref.path), budget, session, progress)


def _run_attached(
    target: Target, budget: Budget, session: SessionOptions, progress: Progress
) -> CheckOutcome:
    from oversub.run.session import follow
    from oversub.run.sources import attach

    with stopsignals.interrupt(), contextlib.closing(attach(target, budget)) as source:
        progress.attached(target.pid, session)
        try:
            result = follow(source, session, on_round=each_interval(progress.interval))
        finally:
            progress.close()
    return CheckOutcome(summary=result.summary, interrupted=result.interrupted)


def run_static(budget: Budget, procs: int, threads: int, workers: int) -> CheckOutcome:
    """Would M processes x (T threads + W workers) oversubscribe the budget? Samples nothing."""
    from oversub.analysis.preflight import preflight
    from oversub.analysis.summary import unmeasured_summary

    assessment = preflight(budget, procs, threads, workers)
    summary = unmeasured_summary(
        budget, 0, note="static preflight: nothing was sampled", assessment=assessment
    )
    return CheckOutcome(summary=summary._replace(preflight=True), static=True)
