"""Make sure the commands a make target compares against or tests with are on PATH.

    python tools/syspkg.py --for "make bench" pidstat=sysstat ps=procps

Each argument is COMMAND=PACKAGE (a Debian package). A command already on PATH is left
alone. Missing ones are installed with apt-get when that can work (root, apt-get present,
OVERSUB_NO_INSTALL unset); otherwise each is named with the reason it could not be
installed, and the target goes on without it (its report says "not installed"). Exits 0
either way: a missing comparison tool or test shell is a gap to report, not a failure.
With --check, nothing is installed: only what is missing is named.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

TIMEOUT_S = 600


def _say(prefix: str, message: str) -> None:
    print(f"{prefix}: {message}", file=sys.stderr, flush=True)


def _why_not_installable() -> str | None:
    if os.environ.get("OVERSUB_NO_INSTALL"):
        return "OVERSUB_NO_INSTALL is set"
    if shutil.which("apt-get") is None:
        return "no apt-get on this system"
    if os.geteuid() != 0:
        return "not root"
    return None


def _apt_install(packages: list[str]) -> bool:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}  # never a question on a tty
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    for attempt in ("install", "update"):
        if attempt == "update":
            # A fresh machine may have no package lists (or stale ones): refresh, then retry.
            done = subprocess.run(
                ["apt-get", "update", "-q"], env=env, timeout=TIMEOUT_S, check=False
            )
            if done.returncode != 0:
                return False
        done = subprocess.run(install, env=env, timeout=TIMEOUT_S, check=False)
        if done.returncode == 0:
            return True
    return False


def ensure(wanted: dict[str, str], prefix: str, install: bool) -> list[str]:
    """Install what is missing where possible; return the commands still missing."""
    missing = {cmd: pkg for cmd, pkg in wanted.items() if shutil.which(cmd) is None}
    if not missing:
        return []
    names = ", ".join(f"{cmd} (package {pkg})" for cmd, pkg in missing.items())
    reason = _why_not_installable() if install else "not asked to install (--check)"
    if reason is None:
        _say(prefix, f"not found: {names}; installing with apt-get")
        try:
            _apt_install(sorted(set(missing.values())))
        except (OSError, subprocess.TimeoutExpired) as exc:
            _say(prefix, f"apt-get failed: {exc}")
        still = [cmd for cmd in missing if shutil.which(cmd) is None]
        if still:
            _say(prefix, f"still missing after apt-get: {', '.join(still)}")
        return still
    hint = " ".join(sorted(set(missing.values())))
    _say(prefix, f"not found: {names}; not installed: {reason} (apt-get install {hint})")
    return list(missing)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("wanted", nargs="+", metavar="COMMAND=PACKAGE")
    parser.add_argument("--for", dest="who", default="syspkg", help="name shown in messages")
    parser.add_argument("--check", action="store_true", help="only name what is missing")
    parser.add_argument(
        "--require", action="store_true", help="exit 1 when an install that could run failed"
    )
    args = parser.parse_args()
    wanted: dict[str, str] = {}
    for item in args.wanted:
        cmd, sep, pkg = item.partition("=")
        if not sep or not cmd or not pkg:
            parser.error(f"{item!r} is not COMMAND=PACKAGE")
        wanted[cmd] = pkg
    missing = ensure(wanted, args.who, install=not args.check)
    if args.require and missing and not args.check and _why_not_installable() is None:
        _say(args.who, f"failed: {', '.join(missing)} could be installed, but apt-get did not")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
