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
`oversub completion bash`, and `import oversub` from the installed files. Everything lives
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
