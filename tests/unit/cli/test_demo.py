"""`make demo`'s closing words match what the reports above them showed (issue 11 item 9)."""

from __future__ import annotations

from pathlib import Path

from oversub.cli.demo import outcome_line, plans_line
from oversub.core.plural import count
from oversub.probe.budget import read_budget


def test_a_green_run_that_was_starved_is_not_called_healthy() -> None:
    # On a busy machine the second run printed STARVED and pass, then "(0 = healthy)".
    text = outcome_line("green", 0, "starved")
    assert "healthy" not in text
    assert "passed" in text and "starved" in text and "--fail-on starved" in text


def test_each_outcome_names_its_verdict() -> None:
    assert outcome_line("green", 0, "ok").endswith("verdict ok (healthy)")
    assert outcome_line("red", 1, "oversubscribed").endswith("failed, verdict oversubscribed")
    assert "not judged" in outcome_line("red", 3, None)


def test_the_plans_are_one_line_from_the_real_cli() -> None:
    # issue 20: one line for several M instead of one near-identical export block each.
    n = read_budget().vcpus
    line = plans_line([1, n + 1], n)
    assert len(line.strip().splitlines()) == 1
    assert f"M = 1: {count(n, 'thread')};" in line
    assert f"M = {n + 1}: over budget even at 1 thread, run at most {n}." in line


def test_the_red_line_names_the_costly_findings_that_failed_the_gate() -> None:
    # Issue 39: the demo gates at the default, --fail-on costly; its red run is stress's
    # spinning team, a critical finding, and the closing words name its rule.
    line = outcome_line("red", 1, "oversubscribed", ["oversubscribed-pools"])
    assert line == (
        "red run exit 1: the gate failed, verdict oversubscribed, "
        "1 costly finding (oversubscribed-pools)"
    )
    assert outcome_line("red", 1, "oversubscribed", []).endswith("no costly (critical) finding")


def test_the_demo_ends_with_the_next_step_for_this_shell(tmp_path: Path) -> None:
    # Issue 39: `make demo` ended without saying that `oversub` is not on PATH yet.
    from oversub.cli.demo import TOUR, next_step

    venv = tmp_path / ".venv"
    lines = next_step(str(venv), "/usr", "/usr/bin:/bin", tmp_path, "/bin/bash").splitlines()
    assert lines == [
        "oversub demo: next, the README's 60-second tour:",
        "  source .venv/bin/activate    # puts oversub on PATH in this shell",
        f"  {TOUR}",
    ]
    fish = next_step(str(venv), "/usr", "/usr/bin", tmp_path / "elsewhere", "/usr/bin/fish")
    assert f"source {venv}/bin/activate.fish" in fish
    spaced = tmp_path / "my job" / ".venv"
    assert f"source '{spaced}/bin/activate'" in next_step(str(spaced), "/usr", "", Path("/"), "")


def test_no_activation_is_asked_where_it_is_not_needed(tmp_path: Path) -> None:
    from oversub.cli.demo import TOUR, next_step

    venv = tmp_path / ".venv"
    activated = next_step(str(venv), "/usr", ".venv/bin:/usr/bin", tmp_path, "/bin/bash")
    assert "source" not in activated and activated.endswith(TOUR)
    no_venv = next_step("/usr", "/usr", "/usr/bin", tmp_path, "/bin/bash")
    assert "source" not in no_venv and no_venv.endswith(TOUR)
