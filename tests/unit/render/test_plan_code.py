"""What `recommend` gives to paste (issue 39 item 2): code blocks that run as pasted (their
imports included) and are never wrapped inside a line, and the variables as a one-line
prefix for one command (`--format prefix`).

The snippets run for real, in a fresh interpreter, in tests/system/test_recommend_paste.py.
"""

from __future__ import annotations

import ast
import builtins

import pytest

from oversub.render import RecommendFormat, render_recommend
from oversub.render.plan_formats import prefix_line
from oversub.render.plan_text import code_lines_for, plan_text, snippets
from tests.support.builders import make_budget, make_plan


def unbound_names(source: str) -> set[str]:
    """Names `source` reads that it neither imports, defines nor gets from builtins: what a
    fresh interpreter would raise NameError on."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            bound |= {a.arg for a in (*node.args.args, *node.args.kwonlyargs)}
            bound |= {a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("threads", [1, 3])
def test_every_snippet_compiles_and_imports_what_it_uses(threads: int, workers: int) -> None:
    # Issue 39: "torch.set_num_threads(1)" without "import torch" did not run when pasted.
    blocks = snippets(threads, workers)
    assert {s.module for s in blocks} >= {"torch", "threadpoolctl", "onnxruntime", "numba"}
    for snippet in blocks:
        source = "\n".join([snippet.comment, *snippet.lines]) + "\n"
        compile(source, f"<{snippet.module}>", "exec")
        assert unbound_names(source) == set(), source
        assert f"import {snippet.module}" in source, source
    # The numbers are the plan's: T in the main processes, 1 in the workers.
    text = "\n".join(code_lines_for(threads, workers))
    assert f"torch.set_num_threads({threads})" in text
    assert f"threadpoolctl.threadpool_limits({threads})" in text
    assert ("threadpoolctl.threadpool_limits(1)" in text) == (workers > 0 or threads == 1)


def test_the_check_of_imports_can_fail() -> None:
    assert unbound_names("torch.set_num_threads(1)\n") == {"torch"}


@pytest.mark.parametrize("width", [40, 80])
def test_code_is_never_wrapped_inside_a_line(width: int) -> None:
    # Issue 39: at 80 columns "import:" stood alone on a line, InferenceSession was split.
    plan = make_plan(workers=1, worker_env={"OMP_NUM_THREADS": "1"})
    out = plan_text(plan, command="oversub recommend --procs 2", width=width)
    lines = out.splitlines()
    for code in code_lines_for(2, 1):
        if code:
            assert code in lines, (code, out)
    prefix = prefix_line(plan.env).rstrip("\n")
    assert f"{prefix} python job.py" in lines, out
    assert "env $(oversub recommend --procs 2 --format prefix) python job.py" in lines, out
    assert "export OPENBLAS_NUM_THREADS=2" in lines, out


def test_the_prefix_is_one_line_of_assignments() -> None:
    plan = make_plan()
    out = render_recommend(plan, RecommendFormat.PREFIX)
    assert out == "OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2\n"
    assert render_recommend(plan._replace(env={}), RecommendFormat.PREFIX) == ""
    # What word splitting or a glob would change is refused, as a name that is no name.
    for env in ({"OMP_NUM_THREADS": "1 2"}, {"OMP_NUM_THREADS": "*"}, {"A-B": "1"}):
        with pytest.raises(ValueError):
            prefix_line(env)


def test_the_text_says_how_to_use_it_for_one_command() -> None:
    plan = make_plan(budget=make_budget())
    out = plan_text(plan, command="oversub recommend --procs 2", width=120)
    assert "Or for one command only, leaving this shell as it is" in out
    assert "launch script" in out  # where the export lines belong
    # Without the command that made it (the API), the prefix line alone.
    bare = plan_text(plan, width=120)
    assert "OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 python job.py" in bare
    assert "--format prefix" not in bare
