"""`oversub tune`: the candidate settings, the interleaved trials, their statistics
and ranking, and how they are shown.

The format enum of `tune` and its dispatcher live here, with the feature; running the trials
is `cli.tune`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oversub.core.names import Name
from oversub.render import unreachable

if TYPE_CHECKING:
    from oversub.tuning.trials import TuneResult


class TuneFormat(Name):
    """`oversub tune --format`."""

    TEXT = "text"
    """What ran, the table, a bar chart, the conclusion and the setting to paste."""
    JSON = "json"
    """`tuning.exports.tune_json`, indented (the keys are documented there)."""
    MARKDOWN = "markdown"
    """The table and the setting as Markdown (a job summary or a PR comment)."""


def render_tune(r: TuneResult, fmt: TuneFormat, *, width: int = 80, color: bool = False) -> str:
    """A tuning run in `fmt`, as one string ending in a newline."""
    if fmt is TuneFormat.TEXT:
        from oversub.tuning.view import tune_text

        return tune_text(r, width=width, color=color)
    elif fmt is TuneFormat.JSON:
        from oversub.tuning.exports import tune_json

        return tune_json(r)
    elif fmt is TuneFormat.MARKDOWN:
        from oversub.tuning.exports import tune_markdown

        return tune_markdown(r)
    else:
        unreachable(fmt)
