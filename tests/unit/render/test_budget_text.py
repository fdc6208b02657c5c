"""`oversub cpus` in text: plain lines laid out by oversub (no rich: start-up), colours by
hand only when asked, the value column wrapped to the terminal, cgroup paths escaped."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from oversub.render.budget_text import BINDS, GREEN, budget_text
from tests.support.builders import make_budget, make_cpuset, make_quota, make_quota_budget


def test_plain_text_has_no_escape_codes_and_colour_marks_the_binding_row() -> None:
    b = make_quota_budget(cpuset=make_cpuset())
    plain = budget_text(b)
    assert "\x1b" not in plain and plain.endswith("\n")
    header, rule = plain.splitlines()[:2]
    assert header.split() == ["Limit", "Value", "Binds"] and set(rule.strip()) <= {"─", " "}
    coloured = budget_text(b, colour=True)
    quota = next(line for line in coloured.splitlines() if "cgroup quota" in line)
    assert f"\x1b[1m\x1b[32m{BINDS}\x1b[0m" in quota and quota.startswith("  \x1b[1m")
    assert GREEN not in next(line for line in coloured.splitlines() if "Affinity" in line)
    # Stripped of its codes, the coloured text is the plain one.
    assert re.sub("\x1b\\[[0-9;]*m", "", coloured) == plain


@pytest.mark.parametrize("width", [50, 64, 80])
def test_the_value_column_wraps_to_the_terminal_and_nothing_is_lost(width: int) -> None:
    long_path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice"
    b = make_budget(
        vcpus=1,
        limited_by="quota",
        quota=make_quota(cgroup=long_path),
        cpuset=make_cpuset(cgroup=long_path),
    )
    out = budget_text(b, width=width)
    table = out.split("\n\n")[0].splitlines()
    assert max(len(line) for line in table) <= width, "\n".join(table)
    # The value column starts after the widest label (20) and two gaps; the rows' cut pieces
    # joined give each path whole again.
    values = "".join(line.replace(BINDS, "")[24:].strip() for line in table)
    assert values.count(long_path) == 2, "\n".join(table)
    # Off a terminal (no width) nothing is wrapped: one line per limit, for grep.
    unwrapped = budget_text(b)
    assert sum(long_path in line for line in unwrapped.splitlines()) == 2


def test_a_hostile_cgroup_path_is_escaped() -> None:
    b = make_budget(vcpus=1, limited_by="quota", quota=make_quota(cgroup="/x\x1b]0;owned\x07"))
    out = budget_text(b, colour=True)
    assert "\x07" not in out and "\\x1b]0;owned\\x07" in out
    assert "\x1b]" not in out


def test_cpus_text_imports_no_rich() -> None:
    """The start-up goal (<= 1.2 x `import click, psutil`) leaves no room for rich."""
    probe = (
        "import sys\n"
        "from oversub.cli.app import main\n"
        "try:\n"
        "    main(['cpus'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(str(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stderr.strip() == "[]" and "N = " in out.stdout, out.stderr


def test_a_budget_without_topology_still_lays_out() -> None:
    out = budget_text(make_budget(physical=None, cores=(), numa={}), width=40)
    assert "unknown" in out and "not reported" in out
