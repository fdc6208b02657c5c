"""The `NAME=<number>` reader of `check --metric` and `tune --metric`: what counts as a figure,
long lines, hostile tokens (linear time), and the running mean of every figure."""

from __future__ import annotations

import os
import sys
import time

import pytest

from oversub.cli.check.metric import MAX_LINE, MAX_NAMES, StdoutMetrics, scan


def figures(line: str, names: tuple[str, ...] | None = ("steps",)) -> list[tuple[str, float]]:
    return list(scan(line.encode(), None if names is None else frozenset(names)))


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("steps=1.5 loss=3", [("steps", 1.5)]),
        ("epoch 2 steps=2.25 other=9 steps=3", [("steps", 2.25), ("steps", 3.0)]),
        (
            "steps=1. steps=.5 steps=-2 steps=+4e2 steps=1E-3",
            [("steps", 1.0), ("steps", 0.5), ("steps", -2.0), ("steps", 400.0), ("steps", 0.001)],
        ),
        ("\tsteps=7\r", [("steps", 7.0)]),
        ("steps=7\x1csteps=8", [("steps", 7.0), ("steps", 8.0)]),  # str.split's blanks
        ("nosteps=100 steps=oops steps==5 steps= steps=5x steps=1e steps=. steps=0x1", []),
        ("steps=1e400 steps=nan steps=inf steps=-1e999", []),  # finite figures only
        (
            "steps=1e308 steps=-1e308 steps=5e-324",
            [("steps", 1e308), ("steps", -1e308), ("steps", 5e-324)],
        ),
        ("steps=\u0663", []),  # an Arabic-Indic digit is not an ASCII figure
    ],
)
def test_what_counts_as_a_figure(line: str, found: list[tuple[str, float]]) -> None:
    assert figures(line) == found


def test_any_name_when_none_is_asked_for() -> None:
    got = figures("proc=0 matmuls_per_s=12.5 bad-name=3 =4 x.y=5", names=None)
    assert got == [("proc", 0.0), ("matmuls_per_s", 12.5), ("x.y", 5.0)]


def test_a_long_line_is_read_on_its_whole_tokens_at_its_end() -> None:
    # The last MAX_LINE bytes start with "steps=1", cut from "xsteps=1": not a figure.
    tail = "steps=1 " + "b" * (MAX_LINE - 16) + " steps=2"
    assert len(tail) == MAX_LINE
    assert figures("a" * 100 + " x" + tail) == [("steps", 2.0)]
    # A cut that falls just after a blank keeps the token after it.
    assert figures("a" * 100 + " " + tail) == [("steps", 1.0), ("steps", 2.0)]
    assert figures(tail) == [("steps", 1.0), ("steps", 2.0)]


def _hostile(count: int) -> bytes:
    """Lines of one 4 KiB token `m=111...1x`: digits not followed by a blank."""
    return (b"m=" + b"1" * (MAX_LINE - 3) + b"x\n") * count


def test_the_reader_is_linear_in_a_hostile_token() -> None:
    # The former pattern ([0-9]+\.?[0-9]*... then a look-ahead for a blank) tried every split
    # of the digits between its two digit runs: about 0.4 s of CPU per 4 KiB line, 10^5 times
    # a plain split of the same bytes (the floor). The reader costs about 5 times the floor.
    lines = _hostile(40).split(b"\n")[:-1]
    names = frozenset({"m"})

    def reader() -> float:
        start = time.perf_counter()
        for line in lines:
            assert list(scan(line, names)) == []
        return time.perf_counter() - start

    def floor() -> float:
        start = time.perf_counter()
        for line in lines:
            line.decode("utf-8", "replace").split()
        return time.perf_counter() - start

    took = min(reader() for _ in range(3))
    plain = min(floor() for _ in range(3))
    assert took < 50 * plain + 0.01, (took, plain)


def test_hostile_lines_do_not_hold_the_pump(capfd: pytest.CaptureFixture[str]) -> None:
    # 30 hostile lines then a figure: the pump has read everything by the time the context
    # exits (which waits for it 2 s at most). The quadratic pattern took ~15 s for them.
    with StdoutMetrics(["m"]) as got:
        os.write(1, _hostile(30) + b"m=7\n")
    assert got.values == {"m": 7.0}
    out, _ = capfd.readouterr()
    assert out.endswith("x\nm=7\n") and out.count("\n") == 31


def test_the_mean_of_huge_figures_stays_finite(capfd: pytest.CaptureFixture[str]) -> None:
    with StdoutMetrics(["m"]) as got:
        os.write(1, b"m=1.7e308 m=1.7e308\nm=1.7e308 m=-1e308 m=1e-300\n")
    assert got.counts == {"m": 5} and got.values == {"m": 1e-300}
    assert got.means["m"] == pytest.approx(1.7e308 / 5 * 3 - 1e308 / 5, rel=1e-12)
    capfd.readouterr()


def test_any_name_keeps_the_first_names_seen(capfd: pytest.CaptureFixture[str]) -> None:
    many = " ".join(f"n{i}={i}" for i in range(MAX_NAMES + 5))
    with StdoutMetrics(None) as got:
        os.write(1, (many + "\nn0=9\n").encode())
        sys.stdout.flush()
    assert list(got.values) == [f"n{i}" for i in range(MAX_NAMES)]
    assert got.values["n0"] == 9.0 and got.counts["n0"] == 2
    capfd.readouterr()
