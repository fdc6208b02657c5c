"""Data types of multi-node jobs: who wrote a report, and the reports of one job merged.

Foundation (standard library only): the CLI builds a `NodeIdentity` from oversub's own
environment (`probe.identity`, `analysis.launcher.launcher_identity`), `render.serialize`
writes it into every JSON report, and `analysis.merge` reads those reports back into
`NodeReport`s and merges them into a `JobReport` that `render.mergereport` prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeIdentity:
    """Where a report was written: the node and, when set, the launcher's ids."""

    node: str
    """The node's name: `OVERSUB_NODE` when set, else the host name (bounded)."""
    launcher_env: Mapping[str, str]
    """Allow-listed launcher variables of oversub's own environment (SLURM, torchrun, MPI)
    whose values passed validation; {} when none is set."""
