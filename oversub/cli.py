"""Command-line wiring (placeholder until the commands land)."""

import click

from oversub import __version__


@click.group()
@click.version_option(__version__, prog_name="oversub")
def cli() -> None:
    """Find CPU oversubscription and say how to fix it."""


def main() -> None:
    cli()
