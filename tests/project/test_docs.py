"""The README and docs/ as a user finds them (issue 20): a README of one screen's worth that
links every docs page, links and anchors that resolve, and facts stated in one place.

Links are read as GitHub renders them: `[text](target)` and `![alt](target)` outside code,
relative to the file; an anchor is the GitHub slug of a heading of the target (lowercase,
punctuation dropped, spaces to hyphens, `-1`, `-2` for repeated headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, ROOT / "CHANGELOG.md", *DOCS]
MAX_README_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where nothing is a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in HEADING.finditer(FENCE.sub("", page.read_text("utf-8"))):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page.read_text("utf-8")))


def test_slugs_follow_github() -> None:
    watch = "oversub-watch-pid-verdict-with-evidence"
    assert slug("`oversub watch PID`: verdict with evidence") == watch
    assert (
        slug("Summary JSON (`watch --format json`, `check --json`)")
        == "summary-json-watch---format-json-check---json"
    )
    assert slug("Configuration: `[tool.oversub]`") == "configuration-tooloversub"
    assert slug("node_exporter textfile") == "node_exporter-textfile"


def test_readme_is_at_most_250_lines() -> None:
    lines = README.read_text("utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_readme_shows_the_pictures_and_the_tour_in_its_first_100_lines() -> None:
    head = "\n".join(README.read_text("utf-8").splitlines()[:100])
    assert "](docs/watch.png)" in head and "](docs/report.png)" in head
    assert "## A 60-second tour" in head
    for image in ("watch.png", "report.png"):
        data = (ROOT / "docs" / image).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 150_000, image


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t.split("#", 1)[0]).resolve() for t in links(README)}
    missing = [page.name for page in DOCS if page.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"
    assert (ROOT / "CHANGELOG.md").resolve() in linked


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor in {file.name}")
    assert not broken, broken


STATED_ONCE = {
    "never a traceback": "guarantees.md",
    "never opened for a blocking": "guarantees.md",
}
"""A fact the docs used to repeat (issue 20: 4 and 6 times) -> the one page that states it."""


@pytest.mark.parametrize("phrase", list(STATED_ONCE))
def test_a_repeated_fact_is_stated_once(phrase: str) -> None:
    where = [
        (page.name, n)
        for page in [README, *DOCS]
        for n in [page.read_text("utf-8").lower().count(phrase)]
        if n
    ]
    assert where == [(STATED_ONCE[phrase], 1)], where


def test_fifos_are_explained_in_one_place() -> None:
    # The rule for files oversub is given (regular files only, never a blocking open) is in
    # guarantees.md; the hostile-process page may speak of FIFOs a process plants.
    pages = {page.name for page in [README, *DOCS] if "FIFO" in page.read_text("utf-8")}
    assert pages <= {"guarantees.md", "security.md"}, pages
