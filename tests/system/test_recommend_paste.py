"""`recommend`'s code runs as pasted (issue 39 item 2): every snippet, in a fresh interpreter
where its runtime is installed, each in a namespace of its own (an import one snippet lacks
is not lent by another).

The interpreters: this one (threadpoolctl is a dependency of oversub) and, when `make
.venv-real/.stamp` has built it, the real-library venv (torch, NumPy, ONNX Runtime, pyarrow,
numexpr, numba). A snippet whose runtime neither has is compiled and checked for its
imports by tests/unit/render/test_plan_code.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oversub.render.plan_text import snippets

pytestmark = pytest.mark.integration

REAL = Path(__file__).resolve().parents[2] / ".venv-real"

DRIVER = r"""
import importlib.util, json, sys
ran = {}
for module, source in json.loads(sys.stdin.read()):
    if importlib.util.find_spec(module) is None:
        continue
    namespace = {"__name__": "__main__"}
    exec(compile(source, f"<{module} snippet>", "exec"), namespace)
    if "one_thread" in namespace:
        namespace["one_thread"](0)  # as DataLoader calls worker_init_fn
    ran.setdefault(module, []).append(len(source))
print(json.dumps(sorted(ran)))
"""


def interpreters() -> list[str]:
    found = [sys.executable]
    if (REAL / ".stamp").exists():
        found.append(str(REAL / "bin" / "python"))
    return found


@pytest.mark.parametrize("python", interpreters())
def test_every_snippet_runs_where_its_runtime_is_installed(python: str) -> None:
    threads = min(2, len(os.sched_getaffinity(0)))  # numba refuses more than it started
    blocks = [
        (s.module, "\n".join([s.comment, *s.lines]) + "\n")
        for t in sorted({1, threads})
        for s in snippets(t, workers=2)
    ]
    done = subprocess.run(
        [python, "-I", "-c", DRIVER],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert "threadpoolctl" in ran, done.stdout  # oversub's own dependency: always there
