"""Who wrote a report: the node and the launcher's ids, in every JSON report.

Foundation (standard library only): the CLI builds a `NodeIdentity` from oversub's own
environment (`cli.identity`, `analysis.launcher.launcher_identity`), `render.serialize`
writes it into every JSON report, and `analysis.jobmerge` reads it back (`core.nodes`). A module
of its own so that `watch` and `check`, which write it, do not load the merge types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

MAX_NODE = 253
"""Characters of a node name: the longest DNS name (Linux host names stop at 64).
`probe.nodename` keeps no more; `analysis.jobmerge` refuses a report that carries more."""


class NodeIdentity(NamedTuple):
    """Where a report was written: the node and, when set, the launcher's ids."""

    node: str
    """The node's name: `OVERSUB_NODE` when set, else the host name (bounded)."""
    launcher_env: Mapping[str, str]
    """Allow-listed launcher variables of oversub's own environment (SLURM, torchrun, MPI)
    whose values passed validation; {} when none is set."""
