"""The rule catalogue: every rule a finding can carry is documented in the README, and the
JUnit report lists exactly the rules of the mode that ran (issue 11 item 8)."""

from __future__ import annotations

import re
from pathlib import Path

from oversub.analysis.preflight import PREFLIGHT_RULES
from oversub.analysis.verdict import RULES

README = Path(__file__).resolve().parent.parent / "README.md"
RULE_HEADER = "| rule | severity → verdict | fires when |"


def readme_rule_tables() -> list[list[str]]:
    """The rule ids of each README table under RULE_HEADER, in order."""
    tables: list[list[str]] = []
    current: list[str] | None = None
    for line in README.read_text("utf-8").splitlines():
        if line.strip() == RULE_HEADER:
            current = []
            tables.append(current)
        elif current is not None and line.startswith("|"):
            match = re.match(r"\| `([a-z-]+)` \|", line)
            if match:
                current.append(match.group(1))
        else:
            current = None
    return tables


def test_readme_documents_every_rule_in_catalogue_order() -> None:
    run_time, static = readme_rule_tables()
    assert run_time == list(RULES)
    assert static == list(PREFLIGHT_RULES)


def test_rule_ids_are_unique_across_modes() -> None:
    assert not set(RULES) & set(PREFLIGHT_RULES)
    assert all(RULES.values()) and all(PREFLIGHT_RULES.values())


def readme_thresholds() -> dict[str, tuple[str, str, str]]:
    """flag -> (key, default, meaning) from the README's thresholds table."""
    rows = {}
    for line in README.read_text("utf-8").splitlines():
        match = re.match(r"\| `(--[a-z-]+)` \| `([a-z-]+)` \| ([0-9.]+) \| (.+) \|$", line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3), match.group(4))
    return rows


def test_threshold_help_is_the_readme_word_for_word() -> None:
    # Issue 11 item 9: `--active-cpu` said "CPU share" in --help, "runnable share" in README.
    import click

    from oversub.cli import watch
    from oversub.cli_options import THRESHOLD_HELP, THRESHOLD_KEYS
    from oversub.model import Thresholds

    rows = readme_thresholds()
    assert len(rows) == len(THRESHOLD_KEYS)
    options = {
        opt.opts[0]: opt for opt in watch.params if isinstance(opt, click.Option) and opt.opts
    }
    for key in THRESHOLD_KEYS:
        flag = "--" + key.replace("_", "-")
        readme_key, default, meaning = rows[flag]
        assert readme_key == flag[2:]
        assert float(default) == getattr(Thresholds(), key)
        assert meaning == THRESHOLD_HELP[key]
        assert options[flag].help == f"{meaning} [{getattr(Thresholds(), key)}]."
