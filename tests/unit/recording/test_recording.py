"""The recording format: written, read back, merged at the size bound, judged again.

Synthetic intervals (tests/support/builders.py) go through the encoder, the decoder and the replay;
the replay must give what the live fold gives (`RunSummary` over the same intervals), to the
bit. The real runs are in tests/system/test_record_integration.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oversub.analysis.fields import BadRecord, loads
from oversub.analysis.rates import counted
from oversub.analysis.summary import RunSummary
from oversub.analysis.verdict import assess
from oversub.cli.record.writer import Recorder, summary_record
from oversub.core.names import Verdict
from oversub.core.results import Interval
from oversub.core.thresholds import Thresholds
from oversub.recording.format import Decoder, Encoder, dumps
from oversub.recording.replay import CUT_NOTE, merge, parse, reassess
from tests.support.builders import budget, oversubscribed_run, recording_lines

TH = Thresholds()
BUDGET = budget(2)


def run_of(n: int) -> list[Interval]:
    return oversubscribed_run(n)


def lines_of(intervals: list[Interval], th: Thresholds = TH, *, ending: bool = True) -> list[str]:
    return recording_lines(intervals, thresholds=th, ending=ending)


def live_summary(intervals: list[Interval], th: Thresholds):  # type: ignore[no-untyped-def]
    run = RunSummary(root_pid=100)
    for iv in intervals:
        run.add(counted(iv, th))
    return run.result(BUDGET, th, target_exited=True)


def test_an_interval_comes_back_with_the_same_rates_bit_for_bit() -> None:
    for iv in run_of(4):
        back, stamp = Decoder().interval(loads(dumps(Encoder().interval(iv, "T"))))
        assert stamp == "T"
        assert counted(back, TH) == counted(iv, TH)._replace(
            processes=counted(back, TH).processes,
        )
        for a, b in zip(
            sorted(counted(iv, TH).processes, key=lambda p: p.pid),
            sorted(counted(back, TH).processes, key=lambda p: p.pid),
            strict=True,
        ):
            # Idle threads are not stored (never active, whatever the threshold).
            kept = [i for i, r in enumerate(a.thread_runnable_s) if r > 0]
            assert b == a._replace(
                thread_ids=tuple(a.thread_ids[i] for i in kept),
                thread_runnable_s=tuple(a.thread_runnable_s[i] for i in kept),
                thread_switches=tuple(a.thread_switches[i] for i in kept),
            )
            assert not kept or len(b.thread_switches) == len(kept)  # the switches came back


@pytest.mark.parametrize("th", [TH, Thresholds(active_cpu=0.9), Thresholds(margin=2.0)])
def test_the_replay_is_the_live_fold_under_any_thresholds(th: Thresholds) -> None:
    intervals = run_of(7)
    replay = reassess(parse(lines_of(intervals)), th)
    assert replay.summary == live_summary(intervals, th)
    assert list(replay.assessments) == [assess(counted(iv, th), th) for iv in intervals]


def test_looser_thresholds_change_the_verdict_as_the_rules_say() -> None:
    recording = parse(lines_of(run_of(6)))
    own = reassess(recording)
    assert own.summary.verdict is Verdict.OVERSUBSCRIBED
    assert own.summary.verdict.value == recording.ending.verdict  # type: ignore[union-attr]
    # Demand is ~6.5 on N = 2: a margin of 3 (N x 4 = 8) lets it pass as not oversubscribed,
    # and a delay ratio above the waiting seen makes it no longer "wait".
    loose = reassess(recording, Thresholds(margin=3.0, delay_ratio=0.95))
    assert loose.summary.verdict is not Verdict.OVERSUBSCRIBED
    assert not any(f.rule.startswith("oversubscribed") for f in loose.summary.findings)


def test_merging_keeps_every_sum_and_counts_threads_over_the_merged_interval() -> None:
    a, b = run_of(2)
    m = merge(a, b)
    assert (m.t0, m.t1) == (a.t0, b.t1)
    assert m.totals.cpu_s == pytest.approx(a.totals.cpu_s + b.totals.cpu_s)
    assert m.totals.delay_s == pytest.approx(a.totals.delay_s + b.totals.delay_s)  # type: ignore[operator]
    assert m.totals.involuntary_ctx == a.totals.involuntary_ctx + b.totals.involuntary_ctx  # type: ignore[operator]
    assert m.host.outside_cpus == pytest.approx(
        (a.host.outside_cpus * a.seconds + b.host.outside_cpus * b.seconds) / m.seconds  # type: ignore[operator]
    )
    p = next(p for p in counted(m, Thresholds(active_cpu=0.33)).processes if p.pid == 150)
    # Over the merged second thread 1 was runnable 0.15 + 0.15 s, thread 2 0.175 + 0.175 s:
    # at 33 % only thread 2 is active.
    assert p.active_threads == 1
    # The run's means do not change when intervals are merged.
    whole = reassess(parse(lines_of([a, b]))).summary.totals
    merged = reassess(parse(lines_of([m]))).summary.totals
    assert merged.demand == pytest.approx(whole.demand)
    assert merged.run_delay_ratio == pytest.approx(whole.run_delay_ratio)


def test_the_recorder_stays_under_its_bound_by_getting_coarser(tmp_path: Path) -> None:
    path = tmp_path / "r.ndjson"
    intervals = run_of(64)
    bound = 12_000
    rec = Recorder(path, bound).open(
        mode="watch", pid=100, command=None, interval=0.5, budget=BUDGET, thresholds=TH
    )
    sizes = []
    for iv in intervals:
        rec.interval(iv, "2026-01-01T00:00:00.000Z")
        sizes.append(path.stat().st_size)
    live = RunSummary(root_pid=100)
    for iv in intervals:
        live.add(iv)
    rec.finish(summary_record(live.result(BUDGET, TH, target_exited=True)))
    assert rec.factor >= 4  # it was coarsened at least twice
    assert max(sizes) <= bound + 2_000  # one interval may pass it until the next rewrite
    recording = parse(path.read_text().splitlines())
    # The whole time span is kept, in fewer, longer intervals.
    assert recording.intervals[0].t0 == intervals[0].t0
    assert recording.intervals[-1].t1 == intervals[-1].t1
    assert len(recording.intervals) < len(intervals) / 3
    replayed = reassess(recording).summary
    expected = live_summary(intervals, TH)
    assert replayed.totals.demand == pytest.approx(expected.totals.demand)
    assert replayed.totals.cpu_percent == pytest.approx(expected.totals.cpu_percent)
    assert replayed.verdict == expected.verdict


def test_a_cut_recording_is_read_up_to_the_cut(tmp_path: Path) -> None:
    lines = lines_of(run_of(3), ending=False)
    recording = parse(lines, cut=True)
    assert recording.ending is None and len(recording.intervals) == 3
    replay = reassess(recording)
    assert CUT_NOTE in replay.summary.notes and replay.summary.verdict is not None


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ([], "empty file"),
        (["hello"], "line 1: not JSON"),
        (["[1, 2]"], "line 1: not a JSON object"),
        (['{"type": "interval"}'], "not an oversub recording"),
        (
            [json.dumps({"type": "header", "format": "oversub-recording", "version": 2})],
            "format version 2",
        ),
    ],
)
def test_what_is_not_a_recording_is_refused_naming_the_line(lines: list[str], problem: str) -> None:
    from oversub.core.errors import ExitStatus, NotARecording

    with pytest.raises(NotARecording, match=problem) as caught:
        parse(lines)
    assert caught.value.status is ExitStatus.USAGE


def mutate(line: str, **changes: object) -> str:
    record = json.loads(line)
    record.update(changes)
    return json.dumps(record)


@pytest.mark.parametrize(
    "changes",
    [
        {"t1": 0},  # before t0
        {"vcpus": 0},
        {"vcpus": True},
        {"p": [{"pid": 5}]},
        {"p": "x"},
        {"totals": {"cpu_s": "1"}},
        {"unavailable": ["nonsense"]},
        {"type": "other"},
        {"host": {"outside_cpus": -1}},
    ],
)
def test_a_corrupt_interval_is_refused(changes: dict[str, object]) -> None:
    from oversub.core.errors import NotARecording

    lines = lines_of(run_of(2))
    lines[2] = mutate(lines[2], **changes)
    with pytest.raises(NotARecording, match="line 3"):
        parse(lines)


def test_infinities_and_huge_strings_are_refused() -> None:
    from oversub.core.errors import NotARecording

    lines = lines_of(run_of(1))
    with pytest.raises(NotARecording):
        parse([lines[0], lines[1].replace('"t0":', '"t0":Infinity,"x":')])
    with pytest.raises(NotARecording, match="at most"):
        parse([mutate(lines[0], host="x" * 10_000), *lines[1:]])


def test_thread_switches_come_back_and_merged_intervals_sum_them() -> None:
    def with_switches(iv: Interval, k: int) -> Interval:
        procs = tuple(
            p._replace(thread_switches=tuple((k * (i + 1), k) for i in range(len(p.thread_ids))))
            for p in iv.processes
        )
        return iv._replace(processes=procs)

    a, b = (with_switches(iv, k) for iv, k in zip(run_of(2), (10, 20), strict=True))
    back, _ = Decoder().interval(loads(dumps(Encoder().interval(a, "T"))))
    p = next(p for p in back.processes if p.pid == 150)
    assert p.thread_switches == ((10, 10), (20, 10))
    m = next(p for p in merge(a, b).processes if p.pid == 150)
    assert m.thread_switches == tuple((30 * (i + 1), 30) for i in range(len(m.thread_ids)))
    # An interval without them makes the merged switches unknown, never a partial sum.
    bare = b._replace(processes=tuple(q._replace(thread_switches=()) for q in b.processes))
    assert next(p for p in merge(a, bare).processes if p.pid == 150).thread_switches == ()


@pytest.mark.parametrize("sw", [[[1, 2]], [[1], [2]], "x", [[1, -1], [1, 1]]])
def test_malformed_switches_are_refused(sw: object) -> None:
    record = loads(dumps(Encoder().interval(run_of(1)[0], "T")))
    for p in record["p"]:
        if "run" in p and len(p["run"]) == 2:
            p["sw"] = sw
    with pytest.raises(BadRecord):
        Decoder().interval(record)


@pytest.mark.parametrize(
    ("key", "value"), [("live_pools", {"": 0}), ("live_threads", {"x": 1}), ("pools", ["nope"])]
)
def test_pools_outside_the_catalogue_are_refused(key: str, value: object) -> None:
    """A report indexes the catalogue by these keys: an unknown one is bad input, never a
    KeyError (found by the field fuzz)."""
    record = loads(dumps(Encoder().interval(run_of(1)[0], "T")))
    for p in record["p"]:
        if "d" in p:
            p["d"][key] = value
    with pytest.raises(BadRecord, match="unknown pool"):
        Decoder().interval(record)
