"""The name of the node a report is written on: `OVERSUB_NODE`, else the host name.

`OVERSUB_NODE` is for places where the host name says nothing (a container's random name,
a pod) or where a script wants its own names for the nodes. It is validated like a host
name, because a report carries it and `oversub merge` shows it; the kernel's host name is
only bounded (it is the machine's own), and every renderer escapes it like any other text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from oversub.core.errors import UsageError
from oversub.core.origin import MAX_NODE

NODE_VAR = "OVERSUB_NODE"

_NODE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}\Z")


def valid_node(name: str) -> bool:
    """A node name: letters, digits and `._:-`, at most 253 characters, not starting with a
    punctuation mark (a `-` would read as a flag in a shell)."""
    return _NODE.match(name) is not None


def node_name(env: Mapping[str, str], hostname: str | None = None) -> str:
    """This node's name. `OVERSUB_NODE` wins when set and not empty; UsageError (exit 2)
    when it is not a valid node name. `hostname` stands in for the kernel's in tests."""
    override = env.get(NODE_VAR, "")
    if override:
        if not valid_node(override):
            raise UsageError(
                f"{NODE_VAR}={override!r:.80} is not a node name (letters, digits and "
                f"'._:-', at most {MAX_NODE} characters)"
            )
        return override
    name = os.uname().nodename if hostname is None else hostname
    return name[:MAX_NODE] or "unknown"
