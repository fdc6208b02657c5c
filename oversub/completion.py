"""Shell completion scripts for bash, zsh and fish, through click's own mechanism.

The script a shell loads runs `oversub` again with `_OVERSUB_COMPLETE=<shell>_complete` and
the words typed so far; click answers that request in `cli.main` (before any command runs,
so completing never samples or probes anything). `oversub completion SHELL` prints the same
script that `_OVERSUB_COMPLETE=<shell>_source oversub` prints, under a name users can find
in `--help`. Imported only by that command.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

PROG_NAME = "oversub"
COMPLETE_VAR = "_OVERSUB_COMPLETE"
"""click derives this name from the program name; `cli.main` passes prog_name="oversub"."""


def completion_script(cli: click.Command, shell: str) -> str:
    """The script that makes `shell` complete oversub's commands, options and values."""
    cls = get_completion_class(shell)
    if cls is None:  # the CLI offers bash, zsh and fish, which click knows
        raise ValueError(f"click has no completion for {shell!r}")
    source = cls(cli, {}, PROG_NAME, COMPLETE_VAR).source()
    return source if source.endswith("\n") else source + "\n"
