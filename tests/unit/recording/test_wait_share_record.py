"""A process's measured wait share (`core.pcprofile.WaitShare`) in a recording: written with
the interval that carries it, read back the same, refused when it does not add up."""

from __future__ import annotations

import json

import pytest

from oversub.core.pcprofile import WaitShare
from oversub.recording.format import Decoder, Encoder, dumps
from tests.support.builders import oversubscribed_run

MEASURED = WaitShare(1200, 1130, "libgomp", 31.5, 2)
REFUSED = WaitShare(0, 0, None, 2.0, 1, "perf-paranoid", "kernel.perf_event_paranoid is 3")


def _with(share: WaitShare):  # type: ignore[no-untyped-def]
    iv = oversubscribed_run(1)[0]
    return iv._replace(processes=tuple(p._replace(wait_share=share) for p in iv.processes))


@pytest.mark.parametrize("share", [MEASURED, REFUSED])
def test_a_wait_share_comes_back_the_same(share: WaitShare) -> None:
    back, _ = Decoder().interval(json.loads(dumps(Encoder().interval(_with(share), "T"))))
    assert {p.wait_share for p in back.processes} == {share}


@pytest.mark.parametrize(
    ("key", "value"),
    [("w", 5000), ("rt", "evil\x1b[31m"), ("no", "because"), ("k", 0), ("n", -1), ("at", "x")],
)
def test_a_wait_share_that_does_not_add_up_is_refused(key: str, value: object) -> None:
    from oversub.analysis.fields import BadRecord

    record = json.loads(dumps(Encoder().interval(_with(MEASURED), "T")))
    for p in record["p"]:
        p["ws"][key] = value
    with pytest.raises(BadRecord):
        Decoder().interval(record)
