"""`make test-matrix`: the test suite on every supported Python this machine has.

    python tools/matrix.py [--pythons 3.10,3.13] [--require] [-- PYTEST ARGS...]

The supported versions are the "Programming Language :: Python :: 3.X" classifiers in
pyproject.toml (one list for pip, the README and this matrix). For each version it finds an
interpreter that really runs and has venv + ensurepip: `python3.X` on PATH first, then
pyenv's versions/3.X.* (a pyenv shim for a version that is not activated fails when run,
so PATH alone is not enough). Each version gets its own .venv-matrix/3.X with
`pip install -e '.[dev]'`, rebuilt when pyproject.toml or the interpreter changes, and runs
pytest with the project's own settings; arguments after `--` go to pytest (`make
test-matrix` passes `-n auto -m 'not integration and not real'`, the unit tests on every
usable vCPU; `make test-matrix-full` none, the whole suite one test at a time). Versions
run one after another: the integration tests start real processes and judge their CPU use,
so two suites at once would disturb each other.

Prints which versions ran (with result, test count and time) and which are missing and why.
Exit status: 1 when a suite failed or an environment could not be built; a missing
interpreter fails only with --require (CI names them either way).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENVS = ROOT / ".venv-matrix"
PROBE = (
    "import sys, venv, ensurepip; print('.'.join(map(str, sys.version_info[:3])), sys.executable)"
)
CLASSIFIER = re.compile(r'"Programming Language :: Python :: (3\.\d+)"')


def supported_versions(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The 3.X versions pyproject.toml's classifiers list, oldest first."""
    found = CLASSIFIER.findall(pyproject.read_text(encoding="utf-8"))
    return sorted(set(found), key=lambda v: tuple(map(int, v.split("."))))


@dataclass(frozen=True)
class Interpreter:
    version: str
    """Full version, e.g. 3.10.13."""
    executable: str


def _probe(exe: str, minor: str) -> tuple[Interpreter | None, str]:
    """The interpreter at `exe` if it runs, is 3.X = `minor` and can make venvs; else why not."""
    try:
        done = subprocess.run(
            [exe, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{exe} does not run ({exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[0]
        if "No module named" in done.stderr:
            return None, f"{exe} has no venv/ensurepip (Debian: apt-get install python{minor}-venv)"
        return None, f"{exe} does not run ({last})"
    version, _, real = done.stdout.strip().partition(" ")
    if ".".join(version.split(".")[:2]) != minor:
        return None, f"{exe} is Python {version}, not {minor}"
    return Interpreter(version, real or exe), ""


def _pyenv_versions() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"


def _pyenv_candidates(minor: str) -> list[str]:
    """pyenv's interpreters for 3.X, newest patch first (3.13.1, 3.13.0; not 3.13.0t)."""
    pattern = re.compile(rf"{re.escape(minor)}\.(\d+)$")
    found = []
    if _pyenv_versions().is_dir():
        for entry in _pyenv_versions().iterdir():
            match = pattern.match(entry.name)
            if match and (entry / "bin" / f"python{minor}").exists():
                found.append((int(match.group(1)), str(entry / "bin" / f"python{minor}")))
    return [exe for _, exe in sorted(found, reverse=True)]


def find_interpreter(minor: str) -> tuple[Interpreter | None, str]:
    """The first working interpreter for 3.X, or None and why each candidate was refused."""
    on_path = shutil.which(f"python{minor}")
    candidates = [on_path] if on_path else []
    candidates += [exe for exe in _pyenv_candidates(minor) if exe not in candidates]
    if not candidates:
        return None, f"no python{minor} on PATH and none in {_pyenv_versions()}"
    reasons = []
    for exe in candidates:
        found, why = _probe(exe, minor)
        if found:
            return found, ""
        reasons.append(why)
    return None, "; ".join(reasons)


def ensure_env(minor: str, interpreter: Interpreter) -> Path:
    """.venv-matrix/3.X with the project and its dev extra installed; reused while valid."""
    env = ENVS / minor
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    stamp_text = f"{interpreter.executable} {interpreter.version} {digest}\n"
    stamp = env / ".stamp"
    if stamp.exists() and stamp.read_text() == stamp_text:
        return env
    shutil.rmtree(env, ignore_errors=True)
    python = str(env / "bin" / "python")
    for argv in (
        [interpreter.executable, "-m", "venv", str(env)],
        [python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [python, "-m", "pip", "install", "--quiet", "-e", ".[dev]"],
    ):
        subprocess.run(argv, check=True, cwd=ROOT)
    stamp.write_text(stamp_text)
    return env


@dataclass(frozen=True)
class Outcome:
    minor: str
    interpreter: Interpreter | None
    status: str
    """passed, failed, env-failed or missing."""
    detail: str
    env_s: float = 0.0
    test_s: float = 0.0


def run_one(minor: str, pytest_args: list[str]) -> Outcome:
    interpreter, why = find_interpreter(minor)
    if interpreter is None:
        return Outcome(minor, None, "missing", why)
    print(f"\n== Python {interpreter.version} ({interpreter.executable})", flush=True)
    t0 = time.monotonic()
    try:
        env = ensure_env(minor, interpreter)
    except (OSError, subprocess.CalledProcessError) as exc:
        return Outcome(minor, interpreter, "env-failed", str(exc), time.monotonic() - t0)
    t1 = time.monotonic()
    # pytest's last line ("894 passed, 5 deselected in 143.20s") becomes the summary.
    proc = subprocess.Popen(
        [str(env / "bin" / "python"), "-m", "pytest", "-q", *pytest_args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    last = ""
    for line in proc.stdout:
        sys.stdout.write(line)
        if line.strip():
            last = line.strip().strip("= ")
    status = "passed" if proc.wait() == 0 else "failed"
    return Outcome(minor, interpreter, status, last, t1 - t0, time.monotonic() - t1)


def report(outcomes: list[Outcome]) -> list[str]:
    lines = ["", "test-matrix summary:"]
    for o in outcomes:
        if o.interpreter is None:
            lines.append(f"  {o.minor:<5} missing: {o.detail}")
            continue
        lines.append(
            f"  {o.minor:<5} {o.status}: Python {o.interpreter.version} "
            f"({o.interpreter.executable}); {o.detail}; env {o.env_s:.0f} s, "
            f"tests {o.test_s:.0f} s"
        )
    ran = [o.interpreter.version for o in outcomes if o.interpreter and o.status != "env-failed"]
    missing = [o.minor for o in outcomes if o.interpreter is None]
    lines.append(f"  ran: {', '.join(ran) or 'none'}; missing: {', '.join(missing) or 'none'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--pythons",
        default=os.environ.get("MATRIX_PYTHONS", ""),
        help="comma-separated 3.X versions [the classifiers in pyproject.toml]",
    )
    parser.add_argument("--require", action="store_true", help="a missing version fails")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    versions = [v.strip() for v in args.pythons.replace(" ", ",").split(",") if v.strip()]
    versions = versions or supported_versions()
    t0 = time.monotonic()
    outcomes = []
    try:
        for minor in versions:
            outcomes.append(run_one(minor, args.pytest_args))
    except KeyboardInterrupt:
        print("\ntest-matrix: interrupted", file=sys.stderr)
        return 130
    for line in report(outcomes):
        print(line)
    print(f"  took {time.monotonic() - t0:.0f} s", flush=True)
    failed = [o for o in outcomes if o.status in ("failed", "env-failed")]
    missing = [o for o in outcomes if o.status == "missing"]
    return 1 if failed or (args.require and missing) else 0


if __name__ == "__main__":
    sys.exit(main())
