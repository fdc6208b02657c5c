"""Shell completion scripts for bash, zsh and fish, through click's own mechanism.

The script a shell loads runs `oversub` again with `_OVERSUB_COMPLETE=<shell>_complete` and
the words typed so far; click answers that request in `cli.app.main` (before any command runs,
so completing never samples or probes anything). `oversub completion SHELL` prints the same
script that `_OVERSUB_COMPLETE=<shell>_source oversub` prints, under a name users can find
in `--help`.
"""

from __future__ import annotations

import click

from oversub.cli.options import CONTEXT
from oversub.core.errors import ExitStatus
from oversub.core.names import Shell, values

PROG_NAME = "oversub"
COMPLETE_VAR = "_OVERSUB_COMPLETE"
"""click derives this name from the program name; `cli.app.main` passes prog_name="oversub"."""


def completion_script(cli: click.Command, shell: str) -> str:
    """The script that makes `shell` complete oversub's commands, options and values."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    if cls is None:  # the CLI offers bash, zsh and fish, which click knows
        raise ValueError(f"click has no completion for {shell!r}")
    source = cls(cli, {}, PROG_NAME, COMPLETE_VAR).source()
    return source if source.endswith("\n") else source + "\n"


@click.command("completion", context_settings=CONTEXT, no_args_is_help=True)
@click.argument("shell", type=click.Choice(values(Shell)), metavar="SHELL")
def command(shell: str) -> ExitStatus:
    """Print the tab-completion script for SHELL (bash, zsh or fish).

    It completes commands, options and their values (formats, verdicts, paths).

    \b
    Examples:
      eval "$(oversub completion bash)"     # in ~/.bashrc
      oversub completion bash > ~/.local/share/bash-completion/completions/oversub
      eval "$(oversub completion zsh)"      # in ~/.zshrc, after compinit
      oversub completion fish > ~/.config/fish/completions/oversub.fish
    """
    from oversub.cli.output import emit

    emit(completion_script(click.get_current_context().find_root().command, shell))
    return ExitStatus.OK
