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
