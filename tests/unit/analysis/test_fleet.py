"""Many targets at once: the state each exports (`analysis.fleet.state`), never an ok for a
target oversub could not see whole (issue 19 item 14, for `serve` and `watch --all`)."""

from __future__ import annotations

from oversub.analysis.fleet import NOT_JUDGED, STATES, rank, state
from oversub.core.names import Signal, Verdict
from oversub.core.rules import Rule
from tests.support.builders import make_assessment, make_finding, make_interval

OK = make_assessment(verdict=Verdict.OK, findings=())


def test_an_ok_of_a_target_not_seen_whole_is_not_judged() -> None:
    seen = make_interval()
    unseen = make_interval(unavailable=(Signal.PROCESSES,))
    assert state(OK, seen) == "ok"
    assert state(OK, unseen) == NOT_JUDGED
    assert rank("/job", unseen, OK)[0] == STATES.index(NOT_JUDGED)


def test_what_was_seen_still_stands_when_part_of_the_tree_was_hidden() -> None:
    """An oversubscribed (or starved, at-risk) verdict on what was seen is true anyway."""
    unseen = make_interval(unavailable=(Signal.PROCESSES,))
    for verdict in (Verdict.OVERSUBSCRIBED, Verdict.STARVED, Verdict.AT_RISK):
        assert state(make_assessment(verdict=verdict), unseen) == verdict.value


def test_an_ok_without_run_delay_is_not_judged_either() -> None:
    no_schedstat = make_assessment(
        verdict=Verdict.OK, findings=(make_finding(rule=Rule.NO_SCHEDSTAT),)
    )
    assert state(no_schedstat) == NOT_JUDGED
    assert state(no_schedstat, make_interval()) == NOT_JUDGED
    assert state(OK) == "ok"
