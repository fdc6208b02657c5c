"""`make test-container`: oversub inside a real container engine, on an image built here.

    python tools/container_check.py     (as root, with podman and runc on PATH: the Makefile
                                         installs Debian's packages first, and .venv-real)

The image is a root filesystem assembled under build/container-rootfs (gitignored, kept for
the next run): empty mount points, the merged-/usr links, a passwd and the loader cache;
the host's /usr, the Python installation .venv-real was made from and this repository
(with .venv-real in it) are mounted read-only into it, so the container runs the real
libraries of `make test-real` with no registry, no download and nothing written to the
host. Debian's podman 4.3 runs it with runc (crun refuses a hybrid cgroup v1 + v2 host),
the cgroupfs manager, explicit ulimits (its defaults exceed what a sandbox allows) and no
network, under two budgets a container is given: `--cpus 1.5` (a CFS quota of 150000 us
per 100000 us, every CPU still in the affinity: the trap) and `--cpuset-cpus 0`.

Under each budget, inside the container:

1. `oversub cpus` says N = 1 and what sets it (the quota, the cpuset), where `nproc` says
   how many CPUs the machine has;
2. each runtime of RUNTIMES starts, in a plain child that counts its own threads, the
   number `oversub doctor` run inside the container reports for it, and the number that
   `oversub doctor --cpus 1.5` / `--cpuset 0` run on the host predicted;
3. with `--cpus 1.5`: a NumPy and a torch process at their default sizes are judged
   oversubscribed by `oversub check`, and `oversub run` brings each to `ok` with its pools
   sized (no pool escaped), the workload's own throughput printed for both.

Skips with exit 0 and a line saying why where it cannot run: not root, no podman or runc,
fewer than 2 CPUs, or a podman that cannot start a container here. Exit 1 when a check
fails, with what was measured.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / ".venv-real" / "bin" / "python"
ROOTFS = ROOT / "build" / "container-rootfs"
PREFIX = "make test-container"
RUNTIMES = ("numpy", "torch", "onnxruntime", "polars", "pyarrow", "numexpr")
"""One or more of each kind doctor tells apart: affinity (OpenBLAS, torch, Arrow), its N
(polars), the machine's CPUs (ONNX Runtime, numexpr)."""
BUDGETS = (("--cpus", "1.5"), ("--cpuset-cpus", "0"))
"""The container's budget, and the doctor flag that predicts it on the host."""
DOCTOR_FLAG = {"--cpus": "--cpus", "--cpuset-cpus": "--cpuset"}
RUN_TIMEOUT_S = 900
WORKLOAD_S = 6

COUNT = """
import importlib, importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("poolstart", sys.argv[1])
poolstart = importlib.util.module_from_spec(spec)
spec.loader.exec_module(poolstart)
out = {}
for check in json.loads(sys.argv[2]):
    # one runtime per process, as doctor runs it: a fresh child each
    if os.fork() == 0:
        for need in check["needs"]:
            if importlib.util.find_spec(need.split(".")[0]) is not None:
                importlib.import_module(need)
        before = set(os.listdir("/proc/self/task"))
        module = importlib.import_module(check["module"])
        step, _ = poolstart.OPERATIONS[check["key"]](module)
        step()
        time.sleep(0.2)
        new = set(os.listdir("/proc/self/task")) - before
        pools = [t for t in new if open(f"/proc/self/task/{t}/comm").read() != "jemalloc_bg_thd\\n"]
        print(json.dumps({check["key"]: len(pools)}))
        sys.stdout.flush()
        os._exit(0)
    os.wait()
"""
"""Each runtime in a child of its own counts the threads its import and one operation
started (doctor's operation, from the same file), with nothing of oversub around it; by
name, jemalloc's background threads are left out (their number depends on which threads
happened to allocate: 3 or 4 for polars under the same quota)."""

TORCH_WORKLOAD = """
import sys, time, torch
x = torch.randn(256, 256)
seconds = float(sys.argv[1])
n, end = 0, time.perf_counter() + seconds
while time.perf_counter() < end:
    torch.mm(x, x)
    n += 1
print(f"threads={torch.get_num_threads()} steps_per_s={n / seconds:.1f}")
"""


class Skip(Exception):
    """The check cannot run on this machine (said, not failed)."""


def say(message: str) -> None:
    print(f"{PREFIX}: {message}", flush=True)


# --------------------------------------------------------------------------- the image


def base_prefix() -> Path:
    """The Python installation .venv-real was made from (its interpreter lives there)."""
    done = subprocess.run(
        [str(REAL), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(done.stdout.strip()).resolve()


def build_rootfs(base: Path) -> Path:
    """The root filesystem (made once; the stamp says for which mounts)."""
    stamp = ROOTFS / ".oversub-rootfs"
    want = f"{base}\n{ROOT}\n"
    if stamp.exists() and stamp.read_text() == want:
        return ROOTFS
    if ROOTFS.exists():
        shutil.rmtree(ROOTFS)
    for sub in ("usr", "proc", "sys", "dev", "tmp", "etc", "root", "run", "var/tmp"):
        (ROOTFS / sub).mkdir(parents=True, exist_ok=True)
    for mount in (base, ROOT):
        (ROOTFS / str(mount).lstrip("/")).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):  # Debian's merged /usr
        if Path("/", link).is_symlink():
            (ROOTFS / link).symlink_to(os.readlink(Path("/", link)))
    (ROOTFS / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (ROOTFS / "etc/group").write_text("root:x:0:\n")
    if Path("/etc/ld.so.cache").exists():
        shutil.copyfile("/etc/ld.so.cache", ROOTFS / "etc/ld.so.cache")
    stamp.write_text(want)
    return ROOTFS


CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "TF_BUILD")
"""Passed into the container as the host has them: ONNX Runtime 1.32 starts a telemetry
thread at import unless one of these is set, so the threads counted there and by doctor on
the host differ by one when only the host runs under CI (docs/pools.md)."""


def podman(budget: tuple[str, str], base: Path, *command: str) -> list[str]:
    mounts = ["/usr:/usr:ro", f"{base}:{base}:ro", f"{ROOT}:{ROOT}:ro"]
    ci = [f"{name}={os.environ[name]}" for name in CI_VARIABLES if name in os.environ]
    return [
        "podman",
        "--cgroup-manager=cgroupfs",
        "--runtime",
        "runc",
        "run",
        "--rm",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=4096:4096",
        "--network",
        "none",
        "--read-only",
        "--tmpfs",
        "/tmp",
        *(a for m in mounts for a in ("-v", m)),
        "-w",
        str(ROOT),
        "-e",
        "HOME=/root",
        "-e",
        "PYTHONDONTWRITEBYTECODE=1",
        *(a for v in ci for a in ("-e", v)),
        *budget,
        "--rootfs",
        str(ROOTFS),  # every option before it: podman takes what follows as the command
        *command,
    ]


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[-6:])} exited {done.returncode}: {done.stderr.strip()[-600:]}"
        )
    return done


# --------------------------------------------------------------------------- the checks


def checks_json() -> str:
    sys.path.insert(0, str(ROOT))
    from oversub.core.checkups import CHECKUPS_BY_KEY

    return json.dumps(
        [
            {"key": k, "module": CHECKUPS_BY_KEY[k].module, "needs": list(CHECKUPS_BY_KEY[k].needs)}
            for k in RUNTIMES
        ]
    )


def own_counts(budget: tuple[str, str], base: Path) -> dict[str, int]:
    probe = str(ROOT / "oversub" / "probe" / "poolstart.py")
    done = run(podman(budget, base, str(REAL), "-c", COUNT, probe, checks_json()))
    counts: dict[str, int] = {}
    for line in done.stdout.splitlines():
        counts.update(json.loads(line))
    return counts


def doctor_totals(data: dict[str, Any], kind: str) -> dict[str, int]:
    """Runtime -> the threads of pools its child started under the run `kind` (jemalloc's
    background threads, which come as its arenas are used, are no pool's)."""
    out = {}
    for row in data["runtimes"]:
        m = next(m for m in row["measurements"] if m["kind"] == kind)
        if m["status"] != "measured":
            raise AssertionError(f"doctor: {row['runtime']} ({kind}): {m['status']}: {m['error']}")
        out[row["runtime"]] = m["threads"]
    return out


def started(data: dict[str, Any], kind: str, runtime: str) -> object:
    """The new threads by owner that doctor read for `runtime` under the run `kind`."""
    for row in data["runtimes"]:
        if row["runtime"] == runtime:
            return next((m.get("started") for m in row["measurements"] if m["kind"] == kind), None)
    return None


def doctor(argv: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run(argv).stdout)
    return data


def check_budget(budget: tuple[str, str], base: Path) -> list[str]:
    flag, value = budget
    lines = []
    cpus = json.loads(
        run(podman(budget, base, str(REAL), "-m", "oversub", "cpus", "--format", "json")).stdout
    )
    nproc = run(podman(budget, base, "nproc")).stdout.strip()
    if cpus["vcpus"] != 1:
        raise AssertionError(f"{flag} {value}: oversub cpus says N = {cpus['vcpus']}, not 1")
    if flag == "--cpus" and (cpus["limited_by"], cpus["quota"]) != ("quota", float(value)):
        raise AssertionError(
            f"{flag} {value}: limited by {cpus['limited_by']}, quota {cpus['quota']}"
        )
    if flag == "--cpuset-cpus" and cpus["affinity"] != [0]:
        raise AssertionError(f"{flag} {value}: affinity {cpus['affinity']}")
    lines.append(
        f"{flag} {value}: oversub cpus: N = 1 (limited by {cpus['limited_by']}); nproc says {nproc}"
    )
    only = [a for key in RUNTIMES for a in ("-r", key)]
    truth = own_counts(budget, base)
    inside = doctor(
        podman(budget, base, str(REAL), "-m", "oversub", "doctor", *only, "--format", "json")
    )
    said = doctor_totals(inside, "host")
    predicted_data = doctor(
        [
            str(REAL),
            "-m",
            "oversub",
            "doctor",
            *only,
            DOCTOR_FLAG[flag],
            value,
            "--format",
            "json",
        ]
    )
    predicted = doctor_totals(predicted_data, "budget")
    for key in RUNTIMES:
        if not (truth[key] == said[key] == predicted[key]):
            raise AssertionError(
                f"{flag} {value}: {key} started {truth[key]} threads in the container; doctor "
                f"there said {said[key]}, doctor {DOCTOR_FLAG[flag]} {value} on the host "
                f"{predicted[key]} (threads by owner: {started(inside, 'host', key)} there, "
                f"{started(predicted_data, 'budget', key)} on the host)"
            )
    counts = ", ".join(f"{k} {truth[k]}" for k in RUNTIMES)
    lines.append(
        f"{flag} {value}: threads started in the container = doctor inside = doctor on the "
        f"host: {counts}"
    )
    ignoring = [r["runtime"] for r in inside["runtimes"] if r["ignores_quota"]]
    if ignoring:
        lines.append(
            f"{flag} {value}: doctor inside: ignore the container's quota: {', '.join(ignoring)}"
        )
    return lines


def _figure(text: str, name: str) -> str:
    found = re.findall(rf"(?:^| ){name}=([0-9.]+)", text, flags=re.MULTILINE)
    return found[-1] if found else "?"


def check_run_cures(base: Path) -> list[str]:
    """In the 1.5-CPU container, one NumPy and one torch process at their default sizes
    oversubscribe N = 1 (2 threads each); `oversub run` sizes them to 1."""
    budget = ("--cpus", "1.5")
    lines = []
    numpy = [str(REAL), "examples/numpy_matmul.py", "--procs", "1", "--seconds", str(WORKLOAD_S)]
    torch = [str(REAL), "-c", TORCH_WORKLOAD, str(WORKLOAD_S)]
    for name, cmd, metric in (("NumPy", numpy, "matmuls_per_s"), ("torch", torch, "steps_per_s")):
        before = run(
            podman(
                budget,
                base,
                str(REAL),
                "-m",
                "oversub",
                "check",
                "--fail-on",
                "oversubscribed",
                "--",
                *cmd,
            ),
            check=False,
        )
        if before.returncode != 1 or "verdict oversubscribed" not in before.stderr:
            raise AssertionError(
                f"{name} at its default size in --cpus 1.5 was not judged oversubscribed: "
                f"exit {before.returncode}: {before.stderr.strip()[-400:]}"
            )
        after = run(
            podman(budget, base, str(REAL), "-m", "oversub", "run", "--", *cmd), check=False
        )
        verdict = [
            ln
            for ln in after.stderr.splitlines()
            if re.match(r"oversub run: (ok|at-risk|starved|oversubscribed):", ln)
        ]
        # ok, or starved: the tree waited for CPUs other load on the shared machine took
        # (docs/rules.md), with its demand within N either way
        demand = re.search(
            r"demand ([0-9.]+) runnable threads on N = 1;", verdict[-1] if verdict else ""
        )
        fine = bool(verdict) and verdict[-1].startswith(
            ("oversub run: ok:", "oversub run: starved:")
        )
        if after.returncode != 0 or not fine or demand is None or float(demand.group(1)) > 1.15:
            raise AssertionError(
                f"oversub run -- {name}: exit {after.returncode}: {after.stderr.strip()[-600:]}"
            )
        if "escaped" in after.stderr or "sized:" not in after.stderr:
            raise AssertionError(
                f"oversub run -- {name}: a pool was not sized: {after.stderr.strip()[-600:]}"
            )
        cured = verdict[-1].removeprefix("oversub run: ")
        lines.append(
            f"--cpus 1.5: {name}: default: oversubscribed, "
            f"{metric} {_figure(before.stdout, metric)}; oversub run: {cured}, "
            f"{metric} {_figure(after.stdout, metric)}"
        )
    return lines


def main() -> int:
    started = time.monotonic()
    try:
        if os.geteuid() != 0:
            raise Skip("not root: podman runs rootful here (cgroupfs, runc)")
        for tool in ("podman", "runc"):
            if shutil.which(tool) is None:
                raise Skip(f"{tool} is not installed (apt-get install podman runc)")
        if len(os.sched_getaffinity(0)) < 2:
            raise Skip("fewer than 2 CPUs: a 1.5-CPU quota would bind nothing")
        if not REAL.exists():
            raise AssertionError(f"{REAL} is missing: make .venv-real/.stamp")
        base = base_prefix()
        build_rootfs(base)
        probe = run(podman(("--cpus", "1.5"), base, "true"), check=False)
        if probe.returncode != 0:
            raise Skip(f"podman cannot start a container here: {probe.stderr.strip()[-300:]}")
        lines = []
        for budget in BUDGETS:
            lines += check_budget(budget, base)
        sys.path.insert(0, str(ROOT))
        from oversub.cli.app import COMMANDS

        if "run" in COMMANDS:
            lines += check_run_cures(base)
        else:
            lines.append("oversub run is not in this checkout: its cure was not tried")
    except Skip as why:
        say(f"skipped: {why}")
        return 0
    except AssertionError as error:
        say(f"FAILED: {error}")
        return 1
    for line in lines:
        say(line)
    say(f"PASSED in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
