"""Episodes in a recording (issue 43): the summary record holds them, `report` finds the
same ones again, a coarsened recording's are those of its merged intervals, and a recording
written before episodes is read with their default thresholds and says why its verdict may
now differ."""

from __future__ import annotations

import json

from oversub.analysis.rates import counted, interval
from oversub.core.names import Verdict
from oversub.core.thresholds import Thresholds
from oversub.recording.charts import about_lines
from oversub.recording.replay import merge, parse, reassess
from tests.support.builders import IDLE, ROOT, T0, Host, Load, Proc, recording_lines, tree_pair

TH = Thresholds()
HALF = Load(cpu=0.5, delay=0.5)


def run(bits: str) -> list:
    """A root with two single-thread workers; "1": four processes busy on 2 CPUs."""
    out = []
    for k, bit in enumerate(bits):
        procs = [
            Proc(ROOT, (IDLE,), ppid=1),
            Proc(201, (Load(cpu=0.9),)),
            Proc(202, (Load(cpu=0.9),)),
        ]
        if bit == "1":
            procs = [Proc(ROOT, (IDLE,), ppid=1), *(Proc(201 + i, (HALF,)) for i in range(4))]
        prev, curr = tree_pair(procs, t0=T0 + k, host=Host())
        out.append(counted(interval(prev, curr, 2), TH))
    return out


BITS = "0" * 8 + "1111" + "0" * 8 + "11" + "0" * 6


def test_the_summary_record_holds_the_episodes_and_report_finds_them_again() -> None:
    lines = recording_lines(run(BITS))
    record = json.loads(lines[-1])
    assert record["type"] == "summary"
    recorded = [(e["verdict"], e["start_s"], e["end_s"], e["counts"]) for e in record["episodes"]]
    assert recorded == [("oversubscribed", 8.0, 12.0, True), ("oversubscribed", 20.0, 22.0, True)]
    assert record["episode_totals"][0]["episodes"] == 2
    replay = reassess(parse(lines))
    again = [(e.verdict.value, e.start_s, e.end_s, e.counts) for e in replay.summary.episodes]
    assert again == recorded


def test_a_coarsened_recording_has_the_episodes_of_its_merged_intervals() -> None:
    ivs = run(BITS)
    pairs = [merge(ivs[i], ivs[i + 1]) for i in range(0, len(ivs), 2)]
    s = reassess(parse(recording_lines(pairs))).summary
    # Intervals of 2 s: the 4-s burst is one episode of 4 s; the 2-s one too, as it fell
    # on a pair's boundaries.
    assert [(e.start_s, e.end_s) for e in s.episodes] == [(8.0, 12.0), (20.0, 22.0)]
    shifted = run("0" + BITS[:-1])  # the 2-s burst now straddles two pairs
    pairs = [merge(shifted[i], shifted[i + 1]) for i in range(0, len(shifted), 2)]
    s = reassess(parse(recording_lines(pairs))).summary
    assert all(e.seconds % 2 == 0 for e in s.episodes)


def test_a_recording_from_before_episodes_is_read_with_their_defaults() -> None:
    lines = recording_lines(run("0" * 8 + "111" + "0" * 9))
    header = json.loads(lines[0])
    for key in ("episode_share", "episode_seconds", "long_episode"):
        del header["thresholds"][key]
    summary = json.loads(lines[-1])
    summary["verdict"] = "ok"  # what the whole run's average said, before episodes
    lines = [json.dumps(header), *lines[1:-1], json.dumps(summary)]
    rec = parse(lines)
    assert rec.header.thresholds == TH and not rec.header.episodes
    replay = reassess(rec)
    assert replay.summary.verdict is Verdict.OVERSUBSCRIBED
    assert (
        "verdict: oversubscribed (recorded: ok, by an oversub that did not judge episodes)"
        in about_lines(replay)
    )
    assert parse(recording_lines(run("0000"))).header.episodes
