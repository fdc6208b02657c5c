"""serve's state between scrapes, on scripted readings (no /proc, no clock): counters add
each interval's raw deltas and are forgotten with their target, only targets that hold load
are exported in node mode, `--top` cuts worst first, labels are bounded, and every family
follows docs/metrics.md."""

from __future__ import annotations

from oversub.core.names import TargetKind
from oversub.core.samples import TreeSample
from oversub.render.prometheus import exported_targets, families, label
from oversub.run.exporter import Exporter
from oversub.run.session import Reading, SessionOptions
from tests.support.builders import IDLE, Load, Proc, budget, tree_pair
from tests.support.metrics_contract import documented_metrics

LONG = "/kubepods/" + "x" * 300 + "/pod-end"


def _three(procs: list[Proc]) -> list[TreeSample]:
    """The tree at t0, t0 + 1 and t0 + 2, every thread doing the same each second."""
    first, second = tree_pair(procs, dt=1.0, root_pid=0)
    return [first, second, tree_pair(procs, dt=2.0, root_pid=0)[1]]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Scripted:
    """Readings given in advance: target -> its three samples, present at some readings."""

    kind = TargetKind.CGROUP
    node_budget = None

    def __init__(self, targets: dict[str, tuple[list[TreeSample], set[int]]]) -> None:
        self.targets = targets
        self.read_count = 0

    def read(self) -> Reading:
        i = self.read_count
        self.read_count += 1
        present = {
            name: (samples[i], budget(1, pid=0)._replace(cgroup=name))
            for name, (samples, at) in self.targets.items()
            if i in at
        }
        return Reading(1000.0 + i, present, None, True)

    def cgroup_of(self, target: str) -> str:
        return target

    def measure_cost(self, target: str, interval: object, assessment: object) -> None:
        pass

    def exiting(self) -> bool:
        return False

    def wait(self, seconds: float) -> None:
        raise AssertionError("the run sleeps in the clock given")

    def close(self) -> None:
        pass


def _run(source: Scripted, *, top: int = 20) -> Exporter:
    clock = Clock()
    exporter = Exporter(
        source,
        SessionOptions(interval=1.0, max_intervals=2),
        top=top,
        only_loaded=True,
        version="test",
        wall=lambda: 1.7e9,
    )
    from oversub.run.session import follow

    follow(
        source,
        exporter.options,
        on_round=exporter._round,
        stop_at_exit=False,
        keep_summaries=False,
        sleep=clock.sleep,
        clock=clock,
    )
    return exporter


OVER = [Proc(10, (Load(cpu=0.5, delay=0.5),) * 2, ppid=1)]
"""Two threads, each running half the time and waiting the other half, on N = 1."""


def test_counters_add_intervals_and_forget_a_target_that_left() -> None:
    source = Scripted(
        {
            "/a": (_three(OVER), {0, 1, 2}),
            "/idle": (_three([Proc(20, (IDLE,), ppid=1)]), {0, 1, 2}),
            "/left": (_three(OVER), {0, 1}),
            "/late": (_three(OVER), {2}),
        }
    )
    state = _run(source).latest()
    assert state.round is not None
    assert state.counters["/a"].cpu_s == 2.0  # 2 threads x 0.5 CPU x 2 intervals
    assert state.counters["/a"].delay_s == 2.0
    assert "/idle" in state.counters  # present: counted, though not exported
    assert "/left" not in state.counters  # gone at the last reading: forgotten
    assert "/late" not in state.counters  # one reading is no interval yet
    exported = [name for name, _ in exported_targets(state)]
    assert exported == ["/a"]  # /idle holds no load
    assert state.round.found == 1
    assert state.up and state.last_sample_unix == 1.7e9


def test_top_cuts_worst_first_and_labels_are_bounded() -> None:
    calm = [Proc(30, (Load(cpu=0.9),), ppid=1)]
    source = Scripted(
        {
            "/calm": (_three(calm), {0, 1, 2}),
            LONG: (_three(OVER), {0, 1, 2}),
        }
    )
    state = _run(source, top=1).latest()
    ((name, target),) = exported_targets(state)
    assert target.state == "oversubscribed"
    assert name == label(LONG) and len(name) == 256 and name.endswith("/pod-end")
    fams = {f.name: f for f in families(state)}
    assert fams["oversub_targets"].samples == (((), 2.0),)
    verdicts = dict(fams["oversub_verdict"].samples)
    assert verdicts[(name, "oversubscribed")] == 1.0
    assert sum(v for (t, _), v in verdicts.items() if t == name) == 1.0


def test_families_are_the_documented_ones() -> None:
    source = Scripted({"/a": (_three(OVER), {0, 1, 2})})
    fams = families(_run(source).latest())
    documented = documented_metrics()
    assert [f.name + ("_total" if f.kind == "counter" else "") for f in fams] == list(documented)
    for f in fams:
        spec = documented[f.name + ("_total" if f.kind == "counter" else "")]
        assert f.labels == spec.labels
        assert f.kind == ("gauge" if spec.type == "info" else spec.type)
        for labels, value in f.samples:
            assert len(labels) == len(f.labels) and value == value


def test_non_utf8_path_bytes_become_escapes() -> None:
    assert label("/a\udcff/b") == "/a\\xff/b"


def test_nothing_measured_yet_is_down() -> None:
    exporter = Exporter(Scripted({}), SessionOptions(), top=20, only_loaded=True, version="test")
    fams = {f.name: f for f in families(exporter.latest())}
    assert fams["oversub_up"].samples == (((), 0.0),)
    assert fams["oversub_verdict"].samples == ()
    assert "oversub_last_sample_timestamp_seconds" not in fams
