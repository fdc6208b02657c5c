"""`oversub serve`'s sampling side: the loop that reads the targets each interval (in the
calling thread, which owns the clock) and keeps what a scrape reads: the latest round and
every target's counters, swapped as one immutable `Exported`.

A scrape never waits for a sample: it reads the last `Exported` whole (`latest`). Counters
add each interval's raw deltas (CPU, run delay, switches, throttled time) and are
forgotten with their target, so a target that comes back starts at 0 (a counter reset, as
Prometheus expects).
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable

from oversub.analysis import fleet
from oversub.core.targets import Counters, Exported, Round, TargetResult
from oversub.run.session import RunResult, SessionOptions, Source


def add(counters: Counters, t: TargetResult) -> Counters:
    """`counters` plus target `t`'s last interval (an unknown delta makes it unknown)."""
    totals, host = t.interval.totals, t.interval.host

    def plus(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + b

    def plus_int(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else a + b

    throttled = host.throttled_s
    return Counters(
        cpu_s=counters.cpu_s + totals.cpu_s,
        delay_s=plus(counters.delay_s, totals.delay_s),
        involuntary=plus_int(counters.involuntary, totals.involuntary_ctx),
        voluntary=plus_int(counters.voluntary, totals.voluntary_ctx),
        throttled_s=counters.throttled_s
        if throttled is None
        else (counters.throttled_s or 0.0) + throttled,
    )


class Exporter:
    """Holds the latest state for scrapes; `run` samples until a stop signal."""

    def __init__(
        self,
        source: Source,
        options: SessionOptions,
        *,
        top: int,
        only_loaded: bool,
        version: str,
        on_update: Callable[[Exported], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.options = options
        self.only_loaded = only_loaded
        self.on_update = on_update
        self._wall = wall
        self._counters: dict[str, Counters] = {}
        self._lock = threading.Lock()
        self._latest = Exported(
            round=None,
            counters={},
            up=False,
            last_sample_unix=None,
            interval_s=options.interval,
            top=top,
            version=version,
            python=platform.python_version(),
        )

    def latest(self) -> Exported:
        with self._lock:
            return self._latest

    def run(self) -> RunResult:
        from oversub.run.session import follow

        return follow(
            self.source,
            self.options,
            on_round=self._round,
            stop_at_exit=False,
            keep_summaries=False,
        )

    def _round(self, r: Round) -> None:
        everything = [*r.targets, *([r.node] if r.node is not None else [])]
        self._counters = {
            t.target: add(self._counters.get(t.target, Counters()), t) for t in everything
        }
        if self.only_loaded:
            loaded = tuple(t for t in r.targets if fleet.holds_load(t.interval, t.assessment))
            r = r._replace(targets=loaded, found=len(loaded))
        state = self.latest()._replace(
            round=r,
            counters=dict(self._counters),
            up=r.up,
            last_sample_unix=self._wall(),
        )
        with self._lock:
            self._latest = state
        if self.on_update is not None:
            self.on_update(state)
