"""Escaping of untrusted text, one function per kind of text sink.

A watched process chooses its name (`comm`), its command line and its thread-variable
values, and a CI user chooses paths and the command `check` runs. Any of them may hold an
escape sequence (which drives a terminal: clear the screen, set the window title, hide
text), a newline (which forges a line of a CI log: `::error::…` is a GitHub workflow
command, `oversub check: pass` a fake verdict), or HTML (`<script>` in a job summary).
Renderers pass every composed string through the function of their sink, so that wording
added later is covered too:

- `terminal`: text for a terminal or a plain log (the live view, the stderr report, error
  lines): every character that is not printable is shown escaped, as Python writes it in a
  string (`\\x1b`, `\\n`, `\\u202e`), so one line stays one line and draws nothing.
- `github_data` / `github_property`: a workflow command's message and property values: the
  runner's own escaping of `%`, CR and LF (and `:` `,` in properties), then `terminal` for
  anything else that is not printable, so nothing can start a new line.
- `markdown`: Markdown and the HTML GitHub renders from it: `&`, `<`, `>` become entities
  (no raw HTML ever); `|` (a table cell's end), backticks (code), `[` and `]` (links and
  images) and `\\` are backslash-escaped; line breaks become `<br>`; anything else not
  printable is shown escaped. Emphasis characters stay: they cannot leave the text's cell
  or line, and the report stays readable as plain text.

JSON, NDJSON and JUnit need none of this: their serialisers escape what their syntax needs,
and a JSON string holds no raw control character.
"""

from __future__ import annotations

import re

_SHOWN_ESCAPED = re.compile(r"[^\S ]|[\x00-\x1f\x7f-\x9f]|[^\x00-\x7f]")
"""Candidates for escaping: whitespace other than the space, C0/C1 controls, non-ASCII (the
last are kept when printable; the regex only keeps ASCII text off the slow path)."""


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    return char if char.isprintable() else repr(char)[1:-1]


def terminal(text: str) -> str:
    """`text` with every non-printable character shown escaped (`\\x1b`, `\\n`, `\\t`)."""
    return _SHOWN_ESCAPED.sub(_shown, text)


def github_data(text: str) -> str:
    """A workflow-command message: `%`, CR and LF as %25 %0D %0A (`%` first, so escapes are
    not escaped again), then every other non-printable character shown escaped."""
    return terminal(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def github_property(text: str) -> str:
    """A workflow-command property value: like `github_data`, plus `:` and `,`."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


_MARKDOWN_PUNCTUATION = re.compile(r"([\\`\[\]|])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def markdown(text: str) -> str:
    """`text` for one line of Markdown or one table cell: no raw HTML, no Markdown syntax, no
    line of its own (line breaks become `<br>`), nothing that is not printable."""
    text = _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)
    text = "".join(_HTML.get(char, char) for char in text)
    return "<br>".join(terminal(line) for line in _LINE_BREAK.split(text))


_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"}


def html(text: str) -> str:
    """`text` for HTML, as element content or a quoted attribute value: `&`, `<`, `>`, `"`
    and `'` become entities (no tag, no attribute can start), and anything not printable is
    shown escaped (`\\x1b`, `\\n`) as on a terminal."""
    return "".join(_HTML_ENTITIES.get(char, char) for char in terminal(text))
