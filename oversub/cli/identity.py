"""The identity every JSON report carries: this node and the launcher's ids, read from
oversub's own environment (never a watched process's)."""

from __future__ import annotations

from collections.abc import Mapping

from oversub.core.origin import NodeIdentity


def read_identity(env: Mapping[str, str]) -> NodeIdentity:
    """`node` (see `probe.nodename.node_name`; UsageError on a bad `OVERSUB_NODE`) and the
    allow-listed launcher variables (`analysis.launcher.launcher_identity`)."""
    from oversub.analysis.launcher import launcher_identity
    from oversub.probe.nodename import node_name

    return NodeIdentity(node=node_name(env), launcher_env=launcher_identity(env))
