"""`make test-dist`: build the sdist and wheel as a release would, install them as users do,
and run the installed `oversub`.

    python tools/dist_check.py [--keep]

1. `python -m build` (isolated: the backend comes from PyPI, as on any machine) on a copy of
   the files git tracks, so a module that was never `git add`ed fails here as it would in a
   clean clone;
2. pip: the wheel, then the sdist, each into a fresh venv;
3. pipx (itself installed into a throwaway venv): `pipx install` of the wheel, then
   `pipx install .` from the source copy, each followed by `pipx uninstall oversub`;

and after each install, from a directory outside the source tree: `oversub --version`
(must be pyproject's version), `oversub cpus`, `oversub cpus --format json`,
`oversub completion bash`, and `import oversub` from the installed files; then the cure
ships and acts (`check_cure`): `oversub run --procs 2 -- python -c ...` starts a process
whose `sitecustomize` and `_oversub_hook` are the installed ones, whose OMP_NUM_THREADS is
the plan's T = max(1, N // 2), whose exit status comes back unchanged, with `run`'s
"sized" line; `python -c "import oversub.auto"` sizes its own process to N and hands the
hook to a child interpreter through PYTHONPATH. Everything lives
in a temporary directory (PIPX_HOME and PIPX_BIN_DIR too), removed at the end unless --keep.
Run it with the project's dev venv (it needs `build`); network to PyPI, or pip's cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIPX = "pipx==1.18.4"
"""Pinned like the dev tools, so this check is reproducible."""
CACHES = shutil.ignore_patterns(
    ".git", ".venv*", "dist", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def project_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)
    if match is None:
        raise SystemExit("dist-check: no version in pyproject.toml")
    return match.group(1)


def step(message: str) -> None:
    print(f"dist-check: {message}", flush=True)


def sh(
    argv: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run, failing loudly with the command's output."""
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(
            f"dist-check: FAILED ({done.returncode}): {' '.join(map(str, argv))}\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return done


def clean_copy(dest: Path) -> Path:
    """The files git tracks (as they are in the working tree); everything but caches
    when this is not a git checkout."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=False
    )
    if listed.returncode != 0:
        shutil.copytree(ROOT, dest, ignore=CACHES)
        return dest
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def check_installed(oversub: Path, python: Path | None, version: str, cwd: Path) -> None:
    """The installed command works, outside the source tree."""
    out = sh([oversub, "--version"], cwd=cwd).stdout
    if out != f"oversub, version {version}\n":
        raise SystemExit(f"dist-check: {oversub} --version printed {out!r}, not {version}")
    text = sh([oversub, "cpus"], cwd=cwd).stdout
    if "usable vCPU" not in text:
        raise SystemExit(f"dist-check: `oversub cpus` printed no budget:\n{text}")
    budget = json.loads(sh([oversub, "cpus", "--format", "json"], cwd=cwd).stdout)
    if not isinstance(budget.get("vcpus"), int) or budget["vcpus"] < 1:
        raise SystemExit(f"dist-check: `oversub cpus --format json` gave {budget}")
    script = sh([oversub, "completion", "bash"], cwd=cwd).stdout
    if "complete -o nosort -F _oversub_completion oversub" not in script:
        raise SystemExit("dist-check: `oversub completion bash` printed no bash script")
    if python is not None:
        where = sh(
            [python, "-c", "import oversub; print(oversub.__version__, oversub.__file__)"],
            cwd=cwd,
        ).stdout.split()
        if where[0] != version or not where[1].startswith(str(python.parent.parent)):
            raise SystemExit(f"dist-check: `import oversub` found {where}")
    step(f"  ok: {oversub} (N = {budget['vcpus']})")
    if python is not None:
        check_cure(oversub, python, budget["vcpus"], cwd)


THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "POLARS_MAX_THREADS",
    "KMP_NUM_THREADS",
)
"""docs/run.md's variables: a value inherited from this shell would be kept, not sized."""
PROBE = (
    "import json, os, sys\n"
    "hook = sys.modules.get('_oversub_hook')\n"
    "print(json.dumps({'omp': os.environ.get('OMP_NUM_THREADS'),\n"
    "    'sitecustomize': getattr(sys.modules.get('sitecustomize'), '__file__', None),\n"
    "    'hook': getattr(hook, '__file__', None)}))\n"
)
"""What a process of the tree reports: its OMP_NUM_THREADS and where its hook came from."""
AUTO = (
    "import oversub.auto, json, os, subprocess, sys\n"
    "hook = oversub.auto.HOOK\n"
    "child = subprocess.run([sys.executable, '-c', sys.argv[1]], capture_output=True,\n"
    "    text=True, check=True).stdout\n"
    "print(json.dumps({'omp': os.environ.get('OMP_NUM_THREADS'), 'role': hook.role,\n"
    "    'hook': sys.modules['_oversub_hook'].__file__, 'child': json.loads(child)}))\n"
)


def check_cure(oversub: Path, python: Path, vcpus: int, cwd: Path) -> None:
    """`oversub run` and `import oversub.auto` from the installed files size a process."""
    prefix = str(python.parent.parent)
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.pop("PYTHONPATH", None)
    env.pop("OVERSUB_RUN_PLAN", None)

    def shipped(where: object, what: str) -> None:
        if not isinstance(where, str) or not where.startswith(prefix):
            raise SystemExit(f"dist-check: {what} came from {where!r}, not from {prefix}")

    # Exit 7 from CMD: `run` must hand it back unchanged (docs/run.md).
    argv = [oversub, "run", "--procs", "2", "--", python, "-c", PROBE + "sys.exit(7)"]
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 7 or "oversub run: sized: " not in done.stderr:
        raise SystemExit(
            f"dist-check: `oversub run --procs 2` exited {done.returncode} (CMD's was 7) "
            f"or said nothing sized:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    seen = json.loads(done.stdout)
    shipped(seen["sitecustomize"], "`oversub run`'s sitecustomize")
    shipped(seen["hook"], "`oversub run`'s _oversub_hook")
    if seen["omp"] != str(max(1, vcpus // 2)):
        raise SystemExit(
            f"dist-check: under `oversub run --procs 2` on N = {vcpus}, OMP_NUM_THREADS was "
            f"{seen['omp']!r}, not {max(1, vcpus // 2)}"
        )
    auto = json.loads(sh([python, "-c", AUTO, PROBE], cwd=cwd, env=env).stdout)
    shipped(auto["hook"], "`import oversub.auto`'s _oversub_hook")
    shipped(auto["child"]["sitecustomize"], "the child's sitecustomize under oversub.auto")
    if auto["omp"] != str(vcpus) or auto["role"] != "root" or auto["child"]["omp"] is None:
        raise SystemExit(f"dist-check: `import oversub.auto` on N = {vcpus} gave {auto}")
    step(
        f"  ok: `oversub run --procs 2` sized OMP_NUM_THREADS={seen['omp']} and passed exit 7 "
        f"back; `import oversub.auto` sized {auto['omp']}, its child got the hook"
    )


def pip_install(artifact: Path, venv: Path, version: str, cwd: Path) -> None:
    sh([sys.executable, "-m", "venv", venv])
    sh([venv / "bin" / "python", "-m", "pip", "install", "--quiet", artifact], cwd=cwd)
    check_installed(venv / "bin" / "oversub", venv / "bin" / "python", version, cwd)


def pipx_round(
    pipx: Path, env: dict[str, str], target: str, version: str, where: Path, cwd: Path
) -> None:
    """`pipx install TARGET` in `where`, use it, `pipx uninstall oversub`: nothing left."""
    bin_dir = Path(env["PIPX_BIN_DIR"])
    sh([pipx, "install", target], env=env, cwd=where)
    listed = json.loads(sh([pipx, "list", "--json"], env=env, cwd=cwd).stdout)
    if "oversub" not in listed.get("venvs", {}):
        raise SystemExit(f"dist-check: pipx does not list oversub after `pipx install {target}`")
    tool_python = Path(env["PIPX_HOME"]) / "venvs" / "oversub" / "bin" / "python"
    check_installed(bin_dir / "oversub", tool_python, version, cwd)
    sh([pipx, "uninstall", "oversub"], env=env, cwd=cwd)
    if (bin_dir / "oversub").exists() or (bin_dir / "oversub").is_symlink():
        raise SystemExit("dist-check: `pipx uninstall oversub` left the oversub command")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    version = project_version()
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="oversub-dist-"))
    try:
        src = clean_copy(tmp / "src")
        outside = tmp / "elsewhere"  # cwd for every run: no source tree to import from
        outside.mkdir()
        files = sum(1 for p in src.rglob("*") if p.is_file())
        step(f"building sdist and wheel of {version} from {files} tracked files")
        dist = tmp / "dist"
        sh([sys.executable, "-m", "build", "--outdir", dist, src])
        wheel = dist / f"oversub-{version}-py3-none-any.whl"
        sdist = dist / f"oversub-{version}.tar.gz"
        with zipfile.ZipFile(wheel) as zf:
            count = len(zf.namelist())
        step(
            f"  wheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB, {count} files; "
            f"sdist {sdist.name}: {sdist.stat().st_size / 1024:.0f} KiB"
        )
        step("pip install of the wheel into a fresh venv")
        pip_install(wheel, tmp / "venv-wheel", version, outside)
        step("pip install of the sdist into a fresh venv")
        pip_install(sdist, tmp / "venv-sdist", version, outside)
        step(f"pipx ({PIPX}, in a throwaway venv)")
        sh([sys.executable, "-m", "venv", tmp / "venv-pipx"])
        sh([tmp / "venv-pipx" / "bin" / "python", "-m", "pip", "install", "--quiet", PIPX])
        pipx = tmp / "venv-pipx" / "bin" / "pipx"
        env = {
            **os.environ,
            "PIPX_HOME": str(tmp / "pipx-home"),
            "PIPX_BIN_DIR": str(tmp / "pipx-bin"),
            "PIPX_MAN_DIR": str(tmp / "pipx-man"),
        }
        step("pipx install of the wheel, then pipx uninstall")
        pipx_round(pipx, env, str(wheel), version, outside, outside)
        step("pipx install . (the source tree), then pipx uninstall")
        pipx_round(pipx, env, ".", version, src, outside)
    finally:
        if args.keep:
            step(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    step(f"passed in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
