"""What the user asked `check` to do, besides the target: CheckOptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from oversub.core.names import FailOn
from oversub.run.session import SessionOptions


@dataclass(frozen=True)
class CheckOptions:
    """Everything `check` needs besides the target."""

    fail_on: FailOn = FailOn.COSTLY
    """What fails the run (exit 1): `analysis.policy.fails`."""
    session: SessionOptions = field(default_factory=SessionOptions)
    timeout: float | None = None
    """`check -- CMD`: end the command after this many seconds (not a failure)."""
    grace: float = 3.0
    """Seconds between SIGTERM and SIGKILL when ending the command's tree."""
    json_path: Path | None = None
    junit_path: Path | None = None
    markdown_path: Path | None = None
    progress_every: float = 10.0
    """Seconds between progress lines on stderr when it is not a terminal (a CI log)."""
    record_path: Path | None = None
    """`--record FILE`: the run, written as it goes (`cli.recorder`)."""
    record_max_mb: float = 50.0
    metrics: tuple[str, ...] = ()
    """`--metric NAME`: figures CMD prints as `NAME=<number>`, kept in the recording."""
