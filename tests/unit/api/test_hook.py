"""The start-up hook of `oversub run` (oversub/hook/sitecustomize.py), each case in a fresh
interpreter: process state (os.environ, sys.meta_path, fork handlers) cannot be reset.

The libraries are stand-ins written to a temporary directory (torch, onnxruntime, pyarrow
with the setters and classes the hook touches, each recording what it was asked), so these
tests need no real library; tests/system/real/test_run.py runs the real ones.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from oversub.analysis.cured import parse_record
from oversub.analysis.cureplan import PLAN_ENV
from oversub.run.curing import hook_directory

FAKES = {
    "torch/__init__.py": """
        import os
        _n = int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or os.cpu_count()
        calls = []
        def set_num_threads(n):
            global _n
            if os.environ.get("FAKE_TORCH_FAILS"):
                raise RuntimeError("refused by the stand-in")
            calls.append(n)
            _n = n
        def get_num_threads():
            return _n
        def set_num_interop_threads(n):
            calls.append(("interop", n))
    """,
    "onnxruntime/__init__.py": """
        class SessionOptions:
            def __init__(self):
                self.intra_op_num_threads = 0
        class InferenceSession:
            def __init__(self, path_or_bytes, sess_options=None, providers=None, **kwargs):
                self.threads = sess_options.intra_op_num_threads if sess_options else 0
    """,
    "pyarrow/__init__.py": """
        count = None
        def set_cpu_count(n):
            global count
            count = n
        def cpu_count():
            return count
    """,
}


def fakes(tmp_path: Path) -> Path:
    root = tmp_path / "libs"
    for name, code in FAKES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code))
    return root


def plan(tmp_path: Path, **changes: Any) -> str:
    document: dict[str, Any] = {
        "v": 1,
        "n": 4,
        "t": None,
        "w": 0,
        "top": os.getpid(),
        "set": {"OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "4"},
        "dir": str(tmp_path / "records"),
    }
    document.update(changes)
    (tmp_path / "records").mkdir(exist_ok=True)
    return json.dumps(document)


def run(
    tmp_path: Path, code: str, *, plan_text: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter with the hook on PYTHONPATH and the stand-ins after it."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(code))
    full = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    full.pop("PYTHONSTARTUP", None)
    full.update(
        {
            "PYTHONPATH": f"{hook_directory()}:{fakes(tmp_path)}",
            PLAN_ENV: plan_text if plan_text is not None else plan(tmp_path),
            "OMP_NUM_THREADS": "4",
            "OPENBLAS_NUM_THREADS": "4",
        }
    )
    full.update(env or {})
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=full,
        cwd=tmp_path,
    )


def records(tmp_path: Path) -> dict[int, Any]:
    found = {}
    for path in (tmp_path / "records").glob("*.json"):
        record = parse_record(path.read_bytes())
        assert record is not None, path.read_text()
        found[record.pid] = record
    return found


def test_the_root_gets_the_budget_and_torch_is_sized_at_import(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        """
        import os, torch
        print(os.environ["OMP_NUM_THREADS"], torch.calls, os.getpid())
        """,
    )
    assert done.returncode == 0, done.stderr
    value, calls, pid = done.stdout.split(" ", 1)[0], *done.stdout.rsplit(" ", 1)
    assert value == "4", done.stdout
    assert "[4]" in calls, calls  # set_num_threads(4); set_num_interop_threads never called
    assert "interop" not in calls
    record = records(tmp_path)[int(pid)]
    assert record.role == "root" and record.threads == 4 and record.knobs["torch"].state == "sized"


def test_a_users_variable_is_kept_and_the_program_call_recorded_as_kept(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        """
        import os, torch
        torch.set_num_threads(3)   # the program's own setting
        print(os.environ["OPENBLAS_NUM_THREADS"], os.environ["OMP_NUM_THREADS"], os.getpid())
        """,
        env={"OMP_NUM_THREADS": "2"},  # not what the plan set: the user's
    )
    assert done.returncode == 0, done.stderr
    blas, omp, pid = done.stdout.split()
    assert (blas, omp) == ("4", "2")
    record = records(tmp_path)[int(pid)]
    assert record.user_vars == {"OMP_NUM_THREADS": "2"}
    assert record.knobs["torch"] == record.knobs["torch"]._replace(value=3, state="kept")


def test_spawned_siblings_share_their_parents_budget(tmp_path: Path) -> None:
    # Each child waits until both exist before its first library import, and stays until
    # both have counted: the count is of the processes the parent runs at once.
    (tmp_path / "child.py").write_text(
        textwrap.dedent(
            """
            import os, sys, time
            def wait(step):
                open(f"{step}{sys.argv[1]}", "w").close()
                while not all(os.path.exists(f"{step}{i}") for i in (0, 1)):
                    time.sleep(0.01)
            wait("started")
            import torch
            os.write(1, os.environ["OMP_NUM_THREADS"].encode() + b"\\n")
            wait("counted")
            """
        )
    )
    done = run(
        tmp_path,
        """
        import subprocess, sys
        children = [
            subprocess.Popen([sys.executable, "child.py", str(i)], stdout=subprocess.PIPE)
            for i in range(2)
        ]
        print(sorted(c.communicate()[0].decode().strip() for c in children))
        """,
        # The test wrote the plan for its children (a budget of 4): the job is a rank.
        plan_text=plan(tmp_path, top=1, pp=os.getpid(), pb=4),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['2', '2']", done.stdout  # 4 CPUs, 2 at once
    ranks = [r for r in records(tmp_path).values() if r.siblings == 2]
    assert len(ranks) == 2 and all(r.threads == 2 for r in ranks)


def test_a_forked_child_gets_the_worker_plan_and_its_parent_gives_up_a_thread(
    tmp_path: Path,
) -> None:
    done = run(
        tmp_path,
        """
        import os, time, torch
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, f"{os.environ['OMP_NUM_THREADS']} {torch.get_num_threads()}".encode())
            time.sleep(0.5)
            os._exit(0)
        child = os.read(r, 100).decode()
        print(child, os.environ["OMP_NUM_THREADS"], torch.get_num_threads())
        os.waitpid(pid, 0)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "3", "3"], done.stdout


def test_onnxruntime_sessions_sized_at_default_and_kept_when_set(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        """
        import os, onnxruntime as ort
        default = ort.InferenceSession(b"model")
        options = ort.SessionOptions()
        sized = ort.InferenceSession(b"model", options)
        mine = ort.SessionOptions()
        mine.intra_op_num_threads = 2
        kept = ort.InferenceSession(b"model", sess_options=mine)
        print(default.threads, sized.threads, options.intra_op_num_threads, kept.threads)
        print(os.getpid())
        """,
        plan_text=plan(tmp_path, t=1),
    )
    assert done.returncode == 0, done.stderr
    *threads, pid = done.stdout.split()
    # default options and the user's options left at 0: sized, and the user's object is
    # given back unchanged; 2 set in code: kept.
    assert threads == ["1", "1", "0", "2"], done.stdout
    knob = records(tmp_path)[int(pid)].knobs["onnxruntime"]
    assert knob.state == "kept" and knob.value == 2


def test_a_failing_knob_is_one_line_and_the_program_goes_on(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        """
        import torch
        print("still running")
        """,
        env={"FAKE_TORCH_FAILS": "1"},
    )
    assert done.returncode == 0 and done.stdout == "still running\n", done
    [line] = done.stderr.splitlines()
    assert line.startswith("oversub: could not apply the knobs of torch in pid ")
    assert "RuntimeError: refused by the stand-in" in line and "goes on" in line


def test_the_shadowed_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    done = run(
        tmp_path,
        """
        import os, sitecustomize
        print(os.environ.get("THEIRS"), sitecustomize.__file__)
        """,
        env={"PYTHONPATH": f"{hook_directory()}:{theirs}"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ran", str(theirs / "sitecustomize.py")], done.stdout


def test_python_with_capital_i_is_not_reached_and_a_bad_plan_is_one_line(tmp_path: Path) -> None:
    isolated = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; print('_oversub_hook' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": hook_directory(), PLAN_ENV: plan(tmp_path)},
    )
    assert isolated.stdout == "False\n" and not list((tmp_path / "records").glob("*"))
    for bad in ("[]", '{"v": 1}', "x" * 70000, '{"v":1,"n":true,"w":0,"top":1,"set":{}}'):
        done = run(tmp_path, "print('ok')", plan_text=bad)
        assert done.returncode == 0 and done.stdout == "ok\n", done
        [line] = done.stderr.splitlines()
        assert line.startswith(f"oversub: ignoring {PLAN_ENV}: "), line


def test_the_hook_imports_nothing_of_oversub(tmp_path: Path) -> None:
    # The child's Python may be another interpreter, without oversub: the hook is its own
    # package, `_oversub_hook`, loaded once, and oversub stays unimported.
    done = run(
        tmp_path,
        """
        import sys, torch, multiprocessing
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("oversub", "_oversub_hook")))
        """,
    )
    assert done.returncode == 0, done.stderr
    loaded = ast.literal_eval(done.stdout)
    assert "_oversub_hook" in loaded and "_oversub_hook.knobs" in loaded, loaded
    assert not [m for m in loaded if m.startswith("oversub")], loaded


def test_import_oversub_auto_installs_the_hook_once(tmp_path: Path) -> None:
    code = """
        import json, os, sys
        import oversub.auto, torch
        hook = oversub.auto.HOOK
        copies = [m for m in sys.modules if m.endswith("_oversub_hook.share")]
        plan = json.loads(os.environ["OVERSUB_RUN_PLAN"])
        print(hook.source, hook.role, hook.threads, torch.calls, copies, plan["pb"])
    """
    alone = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    alone.pop(PLAN_ENV, None)
    alone["PYTHONPATH"] = str(fakes(tmp_path))
    script = tmp_path / "auto.py"
    script.write_text(textwrap.dedent(code))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=alone
    )
    assert done.returncode == 0, done.stderr
    source, role, threads, rest = done.stdout.split(" ", 3)
    assert (source, role) == ("oversub.auto", "root"), done.stdout
    assert f"[{threads}]" in rest and "['_oversub_hook.share']" in rest, done.stdout
    # Under oversub run the hook is there already: oversub.auto returns it, one copy.
    under = run(tmp_path, code)
    assert under.returncode == 0, under.stderr
    assert under.stdout.startswith("oversub run root 4 [4] ['_oversub_hook.share'] 4"), under


WAIT_FOR_SIBLINGS = """
import glob, os, time
def wait_for_siblings(step, count=2):
    open(f"{step}-{os.getpid()}", "w").close()
    while len(glob.glob(f"{step}-*")) < count:
        time.sleep(0.01)
"""
"""Each sibling waits until `count` of them reached `step`: they all exist when they count,
and none leaves before the others counted."""


def test_a_spawned_child_that_imports_no_library_decides_its_share_when_it_starts(
    tmp_path: Path,
) -> None:
    # oversub stress's workers: spawned, they size a team from their own OMP_NUM_THREADS
    # and import nothing the hook watches. Each decides its share before its target runs.
    (tmp_path / "siblings.py").write_text(textwrap.dedent(WAIT_FOR_SIBLINGS))
    done = run(
        tmp_path,
        """
        import multiprocessing, os, sys
        if __name__ == "__mp_main__":  # the spawned child, before its target
            from siblings import wait_for_siblings
            wait_for_siblings("started")
        def target():
            os.write(1, os.environ["OMP_NUM_THREADS"].encode() + b"\\n")
            wait_for_siblings("counted")
        if __name__ == "__main__":
            context = multiprocessing.get_context("spawn")
            children = [context.Process(target=target) for _ in range(2)]
            for child in children:
                child.start()
            for child in children:
                child.join()
            print("root", os.environ["OMP_NUM_THREADS"])
        """,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["2", "2", "4", "root"], done.stdout  # 4 CPUs, 2 at once
    ranks = [r for r in records(tmp_path).values() if r.role == "rank"]
    assert [(r.siblings, r.threads) for r in ranks] == [(2, 2), (2, 2)], ranks


def test_children_of_a_process_that_decided_nothing_share_its_share(tmp_path: Path) -> None:
    # root (4 CPUs) -> 2 shells -> 1 Python each: each shell's share is 2, so each Python
    # gets 2, not the root's 4 (the shells are no hooked Python: they decide nothing).
    (tmp_path / "siblings.py").write_text(textwrap.dedent(WAIT_FOR_SIBLINGS))
    (tmp_path / "child.py").write_text(
        "from siblings import wait_for_siblings\n"
        "wait_for_siblings('started')\n"
        "import os, torch\n"
        "os.write(1, os.environ['OMP_NUM_THREADS'].encode() + b'\\n')\n"
        "wait_for_siblings('counted')\n"
    )
    done = run(
        tmp_path,
        """
        import subprocess, sys
        shells = [
            subprocess.Popen(["sh", "-c", f"{sys.executable} child.py; echo"]) for _ in range(2)
        ]
        for shell in shells:
            shell.wait()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["2", "2"], done.stdout


def test_a_forkserver_child_shares_the_share_of_the_process_that_asked(tmp_path: Path) -> None:
    # The forkserver's children are forked copies of the forkserver (a helper of 1 thread),
    # not of a computing process: each is one of the root's processes.
    (tmp_path / "siblings.py").write_text(textwrap.dedent(WAIT_FOR_SIBLINGS))
    done = run(
        tmp_path,
        """
        import multiprocessing, os
        from siblings import wait_for_siblings
        def target():
            wait_for_siblings("started")
            import torch
            os.write(1, f"{os.environ['OMP_NUM_THREADS']} {torch.calls}\\n".encode())
            wait_for_siblings("counted")
        if __name__ == "__main__":
            context = multiprocessing.get_context("forkserver")
            children = [context.Process(target=target) for _ in range(2)]
            for child in children:
                child.start()
            for child in children:
                child.join()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["2 [2]", "2 [2]"], done.stdout  # 4 CPUs, 2 at once
