"""`make test-slurm`: oversub inside a real SLURM cluster of one node, started here.

    python tools/slurm_check.py        (as root, with Debian's slurm-wlm and munge: the
                                        Makefile installs them first)

Writes a throwaway slurm.conf for this host (its CPUs, cores and threads as `slurmd -C`
reads them, one node with the host's short name, one partition), starts munged, slurmctld
and slurmd in the foreground on private key, state, spool and log directories under one
temporary directory, waits until `sinfo` shows the node idle, and runs:

- budgets: `srun --ntasks=2 --cpus-per-task=1 oversub cpus --format json` gives each task
  N = 1 from the limit SLURM applied; `recommend --procs auto` reads M from the step's
  variables; a step of one task with --cpus-per-task=C (C = the node's CPUs) gives N = C;
- the batch recipe of docs/clusters.md, extracted from the page, submitted with
  `sbatch --wait` (`--nodes=1` on the command line: this cluster has one node): each task's
  `oversub check` report lands in out/, `oversub merge` names the node, the job's verdict is
  oversubscribed and the job exits 1 (its hashing threads are a warning: the job's
  pyproject.toml gates on any oversubscription, `fail-on = "oversubscribed"`); with the
  page's fix line (the recommended thread count) it exits 0;
- the torchrun recipe of the page the same way (with the real-library venv's torch), under
  the default gate, `--fail-on costly`: torch's OpenMP pool spins, a critical finding;
- `oversub watch --all` names the running job's cgroup as the SLURM job (task/cgroup) and
  judges it against the job's own CPUs; where only task/affinity could run, the job's task
  is watched by pid instead (and the cgroup part is said to be untested).

TaskPlugin: task/cgroup,task/affinity with a cgroup.conf (ConstrainCores) is tried first;
if the daemons or a first step fail with it, the cluster is started again with task/affinity
alone (OVERSUB_SLURM_TASK=affinity starts with that). The line "task plugin: ..." says
which ran. Every daemon and every process of a job
is stopped, and every cgroup SLURM made is removed, also when a check fails (try/finally:
jobs cancelled, daemons' process groups killed, processes that carry this run's marker
variable killed).

Skips with exit 0 and a line saying why where it cannot run (not root, SLURM or munge not
installed, fewer than 2 CPUs). Exit 1 when a check fails, with what was seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "clusters.md"
REAL_BIN = ROOT / ".venv-real" / "bin"
PREFIX = "make test-slurm"
MARK = "OVERSUB_SLURM_CHECK"
"""Set in every daemon's and job's environment: processes that carry it are this run's."""
WAIT_S = 60.0
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NUMBA_NUM_THREADS",
)


class Skip(Exception):
    """The check cannot run on this machine (said, not failed)."""


def say(message: str) -> None:
    print(f"{PREFIX}: {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:g} s: {what}")
        time.sleep(0.25)


# --------------------------------------------------------------------------- the cluster

NODE_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")


def node_line(host: str) -> tuple[str, int]:
    """The NodeName line of this host from `slurmd -C` (SLURM's own reading of the machine)
    and its CPU count; never a number of our own."""
    done = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30)
    fields = dict(
        item.split("=", 1) for item in done.stdout.split("\n", 1)[0].split() if "=" in item
    )
    missing = [k for k in NODE_KEYS if not fields.get(k, "").isdigit()]
    if done.returncode != 0 or missing:
        raise AssertionError(f"slurmd -C gave no {missing}: {done.stdout!r} {done.stderr!r}")
    spec = " ".join(f"{k}={fields[k]}" for k in NODE_KEYS)
    return f"NodeName={host} NodeAddr=127.0.0.1 {spec} State=UNKNOWN", int(fields["CPUs"])


class Cluster:
    """munged, slurmctld and slurmd of one node, all state under `base`."""

    def __init__(self, base: Path, *, cgroup: bool) -> None:
        self.base = base
        self.cgroup = cgroup
        self.host = socket.gethostname().split(".")[0]
        self.node, self.cpus = node_line(self.host)
        self.daemons: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.conf = base / "slurm.conf"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SLURMD_")) and k not in THREAD_VARS
        }
        self.env.update({"SLURM_CONF": str(self.conf), MARK: str(base)})

    def write_config(self) -> None:
        b = self.base
        for name in ("run", "log", "state", "spool"):
            (b / name).mkdir(mode=0o755, exist_ok=True)
        # munged checks its directories: the key's is private, the socket's readable by all.
        (b / "key").mkdir(mode=0o700, exist_ok=True)
        subprocess.run(
            ["mungekey", "--create", f"--keyfile={b / 'key' / 'munge.key'}"],
            check=True,
            timeout=30,
            capture_output=True,
        )
        task = "task/cgroup,task/affinity" if self.cgroup else "task/affinity"
        proctrack = "proctrack/cgroup" if self.cgroup else "proctrack/linuxproc"
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=oversubcheck",
                    f"SlurmctldHost={self.host}(127.0.0.1)",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={b / 'run' / 'munge.sock'}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    f"StateSaveLocation={b / 'state'}",
                    f"SlurmdSpoolDir={b / 'spool'}",
                    f"SlurmctldPidFile={b / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={b / 'run' / 'slurmd.pid'}",
                    f"SlurmctldLogFile={b / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={b / 'log' / 'slurmd.log'}",
                    f"ProctrackType={proctrack}",
                    f"TaskPlugin={task}",
                    "SelectType=select/cons_tres",
                    # Per CPU, not per core: --cpus-per-task=1 is one CPU on an SMT host too.
                    "SelectTypeParameters=CR_CPU",
                    "SchedulerType=sched/backfill",
                    "ReturnToService=2",
                    "MpiDefault=none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    self.node,
                    f"PartitionName=check Nodes={self.host} Default=YES MaxTime=10 State=UP",
                    "",
                ]
            )
        )
        (b / "cgroup.conf").write_text(
            "CgroupPlugin=autodetect\nConstrainCores=yes\n"
            "ConstrainRAMSpace=no\nConstrainSwapSpace=no\nConstrainDevices=no\n"
        )

    def start(self) -> None:
        self.write_config()
        b = self.base
        self._daemon(
            "munged",
            [
                "munged",
                "--foreground",
                f"--key-file={b / 'key' / 'munge.key'}",
                f"--socket={b / 'run' / 'munge.sock'}",
                f"--pid-file={b / 'run' / 'munged.pid'}",
                f"--log-file={b / 'log' / 'munged.log'}",
                f"--seed-file={b / 'key' / 'munged.seed'}",
            ],
        )
        wait_for("munged's socket", lambda: (b / "run" / "munge.sock").exists(), 20)
        self._daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._daemon("slurmd", ["slurmd", "-D", "-N", self.host, "-f", str(self.conf)])
        wait_for(f"sinfo shows {self.host} idle", self._idle, 40)

    def _daemon(self, name: str, argv: list[str]) -> None:
        log = (self.base / "log" / f"{name}.out").open("wb")
        self.daemons.append(
            (
                name,
                subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                    cwd=self.base,
                ),
            )
        )
        log.close()

    def _idle(self) -> bool:
        for name, proc in self.daemons:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}: {self.logs()}")
        done = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False, timeout=10)
        return done.stdout.strip() == "idle"

    def run(
        self,
        argv: list[str],
        *,
        check: bool = True,
        timeout: float = 120,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env or self.env,
            cwd=cwd or self.base,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}"
            )
        return done

    def logs(self) -> str:
        parts = []
        for name in ("munged.out", "slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"):
            path = self.base / "log" / name
            if path.exists():
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-1500:])
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, kill what is left of this run's processes."""
        if any(p.poll() is None for _, p in self.daemons[1:]):
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                self.run(["scancel", "--full", "--user=root"], check=False, timeout=15)
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired, OSError):
                wait_for("no job left", lambda: not self._jobs(), 15)
        for _, proc in reversed(self.daemons):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        kill_marked(str(self.base))

    def _jobs(self) -> str:
        return self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10).stdout.strip()


def kill_marked(mark: str) -> None:
    """SIGKILL every process whose environment carries MARK=`mark` (slurmstepd and the
    tasks it started leave the daemons' process groups)."""
    needle = f"{MARK}={mark}\0".encode()
    for _ in range(20):
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != os.getpid():
                with contextlib.suppress(OSError):
                    if needle in (Path("/proc", name, "environ").read_bytes() + b"\0"):
                        found.append(int(name))
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


# --------------------------------------------------------------------------- cgroups SLURM makes


def slurm_cgroups() -> set[Path]:
    """The top cgroup directories SLURM makes (`slurm*` in each v1 controller's mount, or
    `system.slice/slurmstepd.scope` and `slurm*` at the v2 root)."""
    found: set[Path] = set()
    base = Path("/sys/fs/cgroup")
    for top in [base, *(p for p in base.iterdir() if p.is_dir())] if base.is_dir() else []:
        with contextlib.suppress(OSError):
            for entry in top.iterdir():
                if entry.is_dir() and entry.name.startswith("slurm"):
                    found.add(entry)
    scope = base / "system.slice" / "slurmstepd.scope"
    if scope.is_dir():
        found.add(scope)
    return found


def remove_cgroups(tops: set[Path]) -> None:
    """Kill the processes of each cgroup tree (this run's jobs) and remove it, leaves first."""
    for top in tops:
        deadline = time.monotonic() + 15
        while top.is_dir():
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for directory in [*dirs, top]:
                with contextlib.suppress(OSError):
                    for pid in (directory / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
                with contextlib.suppress(OSError):
                    directory.rmdir()
            if time.monotonic() > deadline:
                raise AssertionError(f"cannot remove SLURM's cgroup {top}")
            time.sleep(0.1)


@contextlib.contextmanager
def cluster(base: Path) -> Iterator[Cluster]:
    """The cluster with task/cgroup where it runs here, else with task/affinity alone."""
    before = slurm_cgroups()
    tried: list[str] = []
    # OVERSUB_SLURM_TASK=affinity runs the checks as on a host where task/cgroup cannot run.
    forced = os.environ.get("OVERSUB_SLURM_TASK") == "affinity"
    try:
        for cgroup in (False,) if forced else (True, False):
            directory = base / ("cgroup" if cgroup else "affinity")
            directory.mkdir(mode=0o755)
            c = Cluster(directory, cgroup=cgroup)
            try:
                c.start()
                c.run(["srun", "--ntasks=1", "true"], timeout=60)
            except (AssertionError, subprocess.TimeoutExpired) as error:
                tried.append(f"{'task/cgroup' if cgroup else 'task/affinity'}: {error}")
                c.stop()
                remove_cgroups(slurm_cgroups() - before)
                if not cgroup:
                    raise AssertionError("SLURM did not start: " + " | ".join(tried)) from None
                say(f"task/cgroup did not run here ({str(error)[:300]}); trying task/affinity")
                continue
            try:
                yield c
            finally:
                c.stop()
            return
    finally:
        remove_cgroups(slurm_cgroups() - before)


# --------------------------------------------------------------------------- the page


def blocks(page: str) -> list[str]:
    """The fenced code blocks of a Markdown page, in order."""
    return [m.group(1) for m in re.finditer(r"^```[a-z]*\n(.*?)^```$", page, re.M | re.S)]


def recipe(page: str, *needles: str) -> tuple[str, str]:
    """The batch script holding every needle, and the fix block right after it."""
    found = blocks(page)
    for i, block in enumerate(found):
        if block.startswith("#!") and "#SBATCH" in block and all(n in block for n in needles):
            fixes = [b for b in found[i + 1 :] if b.startswith('eval "$(oversub recommend')]
            if not fixes:
                raise AssertionError(f"{PAGE.name}: no fix block after the {needles} script")
            return block, fixes[0]
    raise AssertionError(f"{PAGE.name}: no batch script with {needles}")


def with_fix(script: str, fix: str) -> str:
    """The script with the fix lines inserted before its one `srun` line."""
    lines = script.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith("srun ")]
    assert len(at) == 1, f"the recipe must have one srun line: {script}"
    return "".join(lines[: at[0]]) + fix + "".join(lines[at[0] :])


TRAIN = """\
# A small job that oversubscribes: a pool sized like a native one by default (every CPU of
# the host, whatever the job was given), unless OMP_NUM_THREADS says otherwise.
import hashlib, os, threading, time
threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
end = time.monotonic() + {seconds}
def work():
    data = bytes(1 << 16)
    while time.monotonic() < end:
        hashlib.sha256(data).digest()   # releases the GIL: the threads really run at once
pool = [threading.Thread(target=work) for _ in range(threads)]
for t in pool: t.start()
for t in pool: t.join()
"""

TORCH_TRAIN = """\
# One torchrun rank: matrix products in torch's intra-op pool (sized by OMP_NUM_THREADS).
import os, time, torch
a = torch.randn(384, 384)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    a = torch.tanh(a @ a)
print("rank", os.environ.get("RANK"), "threads", torch.get_num_threads(), flush=True)
"""


def job_env(c: Cluster, bin_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(c.env)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(extra)
    return env


def json_docs(text: str) -> list[dict[str, Any]]:
    """The JSON documents printed one after the other (one per task)."""
    decoder = json.JSONDecoder()
    docs, at = [], 0
    text = text.strip()
    while at < len(text):
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
        while at < len(text) and text[at].isspace():
            at += 1
    return docs


# --------------------------------------------------------------------------- the checks


def check_budgets(c: Cluster, oversub: list[str]) -> list[str]:
    lines = []
    docs = json_docs(
        c.run(
            ["srun", "--ntasks=2", "--cpus-per-task=1", *oversub, "cpus", "--format", "json"]
        ).stdout
    )
    assert len(docs) == 2, docs
    cpus = [tuple(d["affinity"]) if d["limited_by"] == "affinity" else d["cpuset"] for d in docs]
    for d in docs:
        assert d["vcpus"] == 1, f"a task of --cpus-per-task=1 has N = {d['vcpus']}: {d}"
        assert d["limited_by"] in ("affinity", "cpuset"), d
    assert len(set(map(tuple, cpus))) == 2, f"both tasks on the same CPUs: {cpus}"
    seen = ", ".join(
        f"N = {d['vcpus']} ({d['limited_by']} {list(cpu)})"
        for d, cpu in zip(docs, cpus, strict=True)
    )
    lines.append(f"srun --ntasks=2 --cpus-per-task=1 oversub cpus: {seen}")
    for extra in (["--cpus-per-task=1"], []):
        docs = json_docs(
            c.run(
                [
                    "srun",
                    "--ntasks=2",
                    *extra,
                    *oversub,
                    "recommend",
                    "--procs",
                    "auto",
                    "--format",
                    "json",
                ]
            ).stdout
        )
        assert len(docs) == 2, docs
        for d in docs:
            got = (d["procs"], d["launcher_procs"], d["threads_per_process"], d["oversubscribed"])
            assert got == (1, 2, 1, False), f"recommend --procs auto in a task: {got}, {d}"
            assert d["procs_source"] == "SLURM_STEP_TASKS_PER_NODE", d
        lines.append(
            f"srun {' '.join(['--ntasks=2', *extra])} oversub recommend --procs auto: each task "
            f"M = 1 of {docs[0]['launcher_procs']} (from {docs[0]['procs_source']}), T = 1"
        )
    whole = c.cpus
    (d,) = json_docs(
        c.run(
            ["srun", "--ntasks=1", f"--cpus-per-task={whole}", *oversub, "cpus", "--format", "json"]
        ).stdout
    )
    assert d["vcpus"] == whole, f"--cpus-per-task={whole}: N = {d['vcpus']}: {d}"
    (p,) = json_docs(
        c.run(
            [
                "srun",
                "--ntasks=1",
                f"--cpus-per-task={whole}",
                *oversub,
                "recommend",
                "--procs",
                "auto",
                "--format",
                "json",
            ]
        ).stdout
    )
    assert (p["procs"], p["threads_per_process"]) == (1, whole), p
    lines.append(
        f"srun --ntasks=1 --cpus-per-task={whole}: N = {d['vcpus']} ({d['limited_by']}), "
        f"recommend T = {p['threads_per_process']}"
    )
    return lines


def check_batch(c: Cluster, bin_dir: Path, page: str) -> list[str]:
    script, fix = recipe(page, "python train.py")
    lines = []
    for name, text, want in (("hot", script, 1), ("fixed", with_fix(script, fix), 0)):
        directory = c.base / f"batch-{name}"
        status, out = _submit_in(c, directory, text, job_env(c, bin_dir))
        reports = sorted((directory / "out").glob("*.json"))
        assert [r.name for r in reports] == [f"{c.host}.json"], f"{name}: {reports}: {out}"
        report = json.loads(reports[0].read_text())
        merged = out.strip().splitlines()
        assert status == want, f"{name} job exited {status}, not {want}: {out}"
        assert any(line.startswith("oversub merge:") for line in merged), out
        verdict = report["verdict"]
        if want == 1:
            assert verdict == "oversubscribed", f"{name}: {verdict}: {out}"
            assert any(c.host in line and "oversubscribed" in line for line in merged), out
        else:
            assert verdict != "oversubscribed", f"{name}: {verdict}: {out}"
        last = merged[-1] if merged else ""
        lines.append(
            f"batch recipe ({name}): report out/{reports[0].name}, node {report['node']}, "
            f"verdict {verdict}, demand {report['totals']['demand']:.2f} on N = "
            f"{report['vcpus']}; job exit {status}; {last}"
        )
    return lines


def _write_train(directory: Path, source: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "train.py").write_text(source)


ANY_OVERSUBSCRIPTION = '[tool.oversub]\nfail-on = "oversubscribed"\n'
"""TRAIN's hashing threads are the application's own (no native pool spins), a warning that
the default gate, `--fail-on costly`, passes: its jobs gate on any oversubscription, set
where a project sets it, in the pyproject.toml of the job's directory (read by the recipe's
`oversub check` and `oversub merge`, which run there)."""


def _write_hashing_train(directory: Path, seconds: int) -> None:
    _write_train(directory, TRAIN.format(seconds=seconds))
    (directory / "pyproject.toml").write_text(ANY_OVERSUBSCRIPTION)


def check_torchrun(c: Cluster, page: str) -> list[str]:
    script, fix = recipe(page, "torchrun")
    lines = []
    for name, text, want in (("hot", script, 1), ("fixed", with_fix(script, fix), 0)):
        directory = c.base / f"torchrun-{name}"
        _write_train(directory, TORCH_TRAIN.format(seconds=8))
        # HPC job templates often export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK; torchrun
        # keeps a variable the user set, so every rank gets a pool of all the task's CPUs.
        env = job_env(c, REAL_BIN, OMP_NUM_THREADS=str(c.cpus), MASTER_PORT=str(free_port()))
        status, out = _submit_in(c, directory, text, env)
        reports = sorted((directory / "out").glob("*.json"))
        assert [r.name for r in reports] == [f"{c.host}.json"], f"{name}: {reports}: {out}"
        report = json.loads(reports[0].read_text())
        xml = (directory / "oversub-merged.xml").read_text()
        assert status == want, f"torchrun {name} job exited {status}, not {want}: {out}"
        verdict = report["verdict"]
        assert (verdict == "oversubscribed") == (want == 1), f"{name}: {verdict}: {out}"
        assert ("<failure" in xml) == (want == 1), xml
        assert c.host in xml, xml
        lines.append(
            f"torchrun recipe ({name}): node {report['node']}, verdict {verdict}, demand "
            f"{report['totals']['demand']:.2f} on N = {report['vcpus']}, "
            f"{report['totals'].get('processes')} processes; job exit {status}"
        )
    return lines


def _submit_in(c: Cluster, directory: Path, script: str, env: dict[str, str]) -> tuple[int, str]:
    (directory / "job.sh").write_text(script)
    done = c.run(
        ["sbatch", "--wait", "--nodes=1", "--output=slurm-%j.out", "job.sh"],
        check=False,
        timeout=180,
        env=env,
        cwd=directory,
    )
    outputs = sorted(directory.glob("slurm-*.out"))
    text = outputs[0].read_text(errors="replace") if outputs else ""
    return done.returncode, f"{done.stdout}{done.stderr}{text}"


def _task_pid(c: Cluster, job: str) -> int | None:
    """The pid of the job's `python train.py` once its threads run (scontrol listpids)."""
    done = c.run(["scontrol", "listpids", job], check=False, timeout=10)
    for line in done.stdout.splitlines()[1:]:
        pid = line.split()[0] if line.split() else ""
        with contextlib.suppress(OSError, ValueError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            python = os.path.basename(argv[0]).startswith(b"python")
            if python and argv[1:2] == [b"train.py"] and len(os.listdir(f"/proc/{pid}/task")) > 2:
                return int(pid)
    return None


def check_running_job(c: Cluster, bin_dir: Path, page: str) -> list[str]:
    """A job that runs: `watch --all` names its cgroup as the job (task/cgroup), or its task
    is watched by pid (task/affinity); the page's recipe for a running job merges to exit 1."""
    directory = c.base / "running"
    _write_hashing_train(directory, 60)
    env = job_env(c, bin_dir)
    log = (directory / "srun.out").open("wb")
    job_srun = subprocess.Popen(
        ["srun", "--ntasks=1", "--cpus-per-task=1", "--job-name=running", "python", "train.py"],
        cwd=directory,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    lines = []
    try:
        job = wait_for(
            "the job running",
            lambda: c.run(
                ["squeue", "-h", "-n", "running", "-t", "R", "-o", "%i"], check=False
            ).stdout.strip(),
        )
        pid = wait_for("its task's busy threads", lambda: _task_pid(c, job))
        oversub = [str(bin_dir / "oversub")]
        if c.cgroup:
            out = c.run([*oversub, "watch", "--all", "--duration", "5", "--format", "json"]).stdout
            doc = json.loads(out)
            mine = [t for t in doc["targets"] if t.get("workload") == f"slurm job {job}"]
            assert len(mine) == 1, f"watch --all: no one target for slurm job {job}: {out}"
            t = mine[0]
            assert t["verdict"] == "oversubscribed", t
            assert (t["budget"]["vcpus"], t["budget"]["limited_by"]) == (1, "cpuset"), t
            lines.append(
                f'watch --all: {t["cgroup"]} is "{t["workload"]}", N = {t["budget"]["vcpus"]} '
                f"({t['budget']['limited_by']}), demand {t['totals']['demand']:.2f}, "
                f"verdict {t['verdict']}"
            )
        else:
            out = c.run([*oversub, "watch", str(pid), "--duration", "5", "--format", "json"]).stdout
            doc = json.loads(out)
            assert doc["verdict"] == "oversubscribed" and doc["vcpus"] == 1, out
            lines.append(
                f"watch {pid} (the job's task; task/cgroup did not run, so watch --all's "
                f"cgroup part is untested): N = {doc['vcpus']}, verdict {doc['verdict']}"
            )
        (block,) = [b for b in blocks(page) if "--overlap" in b and "oversub check --pid" in b]
        assert "--duration 60" in block, block
        script = block.replace("--duration 60", "--duration 5")
        done = c.run(["sh", "-c", script], check=False, env={**env, "JOB": job}, cwd=directory)
        reports = sorted((directory / "out").glob("*.json"))
        assert [r.name for r in reports] == [f"{c.host}.json"], (reports, done.stdout, done.stderr)
        report = json.loads(reports[0].read_text())
        assert done.returncode == 1 and report["verdict"] == "oversubscribed", (
            done.returncode,
            done.stdout,
            done.stderr,
        )
        lines.append(
            f"running-job recipe (srun --jobid --overlap, check --pid): pid "
            f"{report.get('root_pid')}, verdict {report['verdict']}, merge exit {done.returncode}"
        )
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            c.run(["scancel", "--name=running"], check=False, timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job_srun.pid, signal.SIGKILL)
        job_srun.wait(timeout=30)
    return lines


def main() -> int:
    started = time.monotonic()
    lines: list[str] = []
    try:
        if os.geteuid() != 0:
            raise Skip("not root: slurmd and munged run as root here")
        missing = [
            b for b in ("munged", "mungekey", "slurmctld", "slurmd", "srun") if not shutil.which(b)
        ]
        if missing:
            raise Skip(f"not installed: {', '.join(missing)} (see above)")
        if (os.cpu_count() or 1) < 2:
            raise Skip("fewer than 2 CPUs: tasks of one CPU each cannot oversubscribe")
        page = PAGE.read_text()
        oversub = [str(Path(sys.executable).parent / "oversub")]
        with tempfile.TemporaryDirectory(prefix="oversub-slurm-") as tmp:
            base = Path(tmp)
            base.chmod(0o755)  # munged wants its socket's directories searchable by all
            with cluster(base) as c:
                version = c.run(["sinfo", "--version"]).stdout.strip()
                plugin = "task/cgroup,task/affinity" if c.cgroup else "task/affinity"
                lines.append(f"{version}; task plugin: {plugin}; node {c.host}, {c.cpus} CPUs")
                lines += check_budgets(c, oversub)
                for directory in ("batch-hot", "batch-fixed"):
                    _write_hashing_train(c.base / directory, 8)
                lines += check_batch(c, Path(sys.executable).parent, page)
                lines += check_running_job(c, Path(sys.executable).parent, page)
                if (REAL_BIN / "torchrun").exists():
                    lines += check_torchrun(c, page)
                else:
                    lines.append("torchrun recipe: skipped: no .venv-real (make .venv-real/.stamp)")
    except Skip as why:
        say(f"skipped: {why}")
        return 0
    except (AssertionError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as error:
        # Everything it started is stopped by then (the context managers' finally).
        for line in lines:
            say(line)
        say(f"FAILED: {type(error).__name__}: {error}")
        return 1
    for line in lines:
        say(line)
    say(f"PASSED in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
