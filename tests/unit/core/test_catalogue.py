"""The single catalogues against what is written about them: every rule a finding can carry
and every setting, in the tables of docs/rules.md and docs/cli.md, in `--help`, in
`[tool.oversub]`, in the `assess` docstring and in the JUnit report (issue 11 item 8, issue 13
items 1 and 2)."""

from __future__ import annotations

import inspect
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import pytest

from oversub.analysis import verdict
from oversub.analysis.policy import gate
from oversub.cli.app import command
from oversub.core.names import FailOn
from oversub.core.rules import PREFLIGHT_RULES, RUNTIME_RULES, Rule
from oversub.core.settings import SETTINGS, THRESHOLDS
from oversub.core.thresholds import Thresholds
from oversub.render.junit import summary_junit
from tests.support.builders import make_summary

DOCS = Path(__file__).resolve().parents[3] / "docs"
RULES_DOC = DOCS / "rules.md"
"""The verdicts, the rule tables and the thresholds table."""
CLI_DOC = DOCS / "cli.md"
"""The `[tool.oversub]` example."""
RULE_HEADER = "| rule | severity → verdict | fires when |"


def readme_rule_tables() -> list[list[tuple[str, str]]]:
    """(rule id, "severity → verdict") of each docs/rules.md table under RULE_HEADER, in order."""
    tables: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = None
    for line in RULES_DOC.read_text("utf-8").splitlines():
        if line.strip() == RULE_HEADER:
            current = []
            tables.append(current)
        elif current is not None and line.startswith("|"):
            match = re.match(r"\| `([a-z-]+)` \| ([^|]+) \|", line)
            if match:
                current.append((match.group(1), match.group(2).strip()))
        else:
            current = None
    return tables


def test_readme_documents_every_rule_in_catalogue_order() -> None:
    run_time, static = readme_rule_tables()
    for table, catalogue in ((run_time, RUNTIME_RULES), (static, PREFLIGHT_RULES)):
        assert table == [
            (rule.value, f"{info.severity} → {info.verdict.value}")
            for rule, info in catalogue.items()
        ]


def test_every_rule_id_is_in_exactly_one_catalogue() -> None:
    assert set(RUNTIME_RULES) | set(PREFLIGHT_RULES) == set(Rule)
    assert not set(RUNTIME_RULES) & set(PREFLIGHT_RULES)
    assert all(info.summary for info in [*RUNTIME_RULES.values(), *PREFLIGHT_RULES.values()])


def test_assess_docstring_lists_every_runtime_rule_in_order() -> None:
    # cleandoc: Python 3.13 strips a docstring's indentation at compile time, 3.10-3.12 do not.
    doc = inspect.cleandoc(verdict.assess.__doc__ or "")
    named = re.findall(r"^- ([a-z-]+) \(", doc, flags=re.MULTILINE)
    assert named == [rule.value for rule in RUNTIME_RULES]


@pytest.mark.parametrize("preflight", [False, True], ids=["run", "preflight"])
def test_junit_has_one_testcase_per_rule_of_the_mode(preflight: bool) -> None:
    s = make_summary(preflight=preflight, findings=())
    xml = ET.fromstring(summary_junit(s, gate(s, FailOn.OVERSUBSCRIBED)))
    names = [case.get("name") for case in xml.iter("testcase")]
    assert names == [rule.value for rule in (PREFLIGHT_RULES if preflight else RUNTIME_RULES)]


def readme_settings() -> dict[str, tuple[str, str, str]]:
    """flag -> (key, default, meaning) from the thresholds table of docs/rules.md."""
    rows = {}
    for line in RULES_DOC.read_text("utf-8").splitlines():
        match = re.match(r"\| `(--[a-z-]+)` \| `([a-z-]+)` \| ([0-9.]+) \| (.+) \|$", line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3), match.group(4))
    return rows


def readme_config_keys() -> dict[str, str]:
    """key -> value of the `[tool.oversub]` example in docs/cli.md."""
    text = CLI_DOC.read_text("utf-8")
    block = text[text.index("[tool.oversub]\n") :].split("```", 1)[0]
    return dict(re.findall(r"^([a-z-]+) = (\S+)", block, flags=re.MULTILINE))


def test_readme_threshold_table_is_the_settings_table() -> None:
    rows = readme_settings()
    assert list(rows) == [s.flag for s in THRESHOLDS]
    for setting in THRESHOLDS:
        key, default, meaning = rows[setting.flag]
        assert key == setting.key
        assert float(default) == setting.default == getattr(Thresholds(), setting.name)
        assert meaning == setting.help


def test_readme_config_example_names_every_key() -> None:
    assert set(readme_config_keys()) == {s.key for s in SETTINGS}


def _options(name: str) -> dict[str, click.Option]:
    params = command(name).params
    return {p.opts[0]: p for p in params if isinstance(p, click.Option) and p.opts}


@pytest.mark.parametrize("command", ["watch", "check", "run"])
def test_flags_are_generated_from_the_settings_table(command: str) -> None:
    options = _options(command)
    for setting in SETTINGS:
        if command in setting.commands:
            assert options[setting.flag].help == setting.help_text
            assert options[setting.flag].default is None  # `[tool.oversub]` may still decide
        else:
            assert setting.flag not in options
