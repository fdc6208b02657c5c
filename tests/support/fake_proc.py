"""Build fake /proc trees under a temporary directory for probe tests.

    fake = FakeProc(tmp_path)
    fake.add_process(100, ppid=1, comm="python", threads=[FakeThread(100, cpu_ns=5)])
    TreeSampler(100, root=str(tmp_path)).sample()

Files written follow the kernel's formats closely enough for the probes' parsers:
/proc/PID/{stat,status,cmdline,maps,environ}, /proc/PID/task/TID/{stat,status,schedstat},
/proc/stat, /proc/pressure/cpu.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FakeThread:
    """One thread's counters, as the kernel would show them."""

    tid: int
    state: str = "S"
    cpu_ns: int = 0
    run_delay_ns: int = 0
    voluntary: int = 0
    involuntary: int = 0
    utime_ticks: int = 0
    stime_ticks: int = 0
    schedstat: bool = True
    """False: no schedstat file (kernel without CONFIG_SCHED_INFO)."""


@dataclass
class FakeProcess:
    """One process of the fake tree."""

    pid: int
    ppid: int
    comm: str = "python"
    state: str = "S"
    start_ticks: int = 1000
    cmdline: tuple[str, ...] = ("python",)
    environ: Mapping[str, str] = field(default_factory=dict)
    libraries: tuple[str, ...] = ()
    """Paths of mapped shared objects (each mapped twice, as the loader does)."""
    threads: list[FakeThread] = field(default_factory=list)
    children_ticks: tuple[int, int] = (0, 0)
    """cutime and cstime: CPU of children it has reaped."""
    args_shown: bool = True
    """False: stat hides the argv area's bounds (another user's process, as non-root)."""


def stat_line(
    pid: int,
    comm: str,
    state: str,
    ppid: int,
    *,
    utime: int = 0,
    stime: int = 0,
    children_ticks: tuple[int, int] = (0, 0),
    start_ticks: int = 1000,
    args_len: int | None = None,
    threads: int = 1,
) -> str:
    """A 52-field /proc stat line with the fields the probes read filled in.

    `args_len`: bytes of the argv area, shown as fields 48-50 (arg_start, arg_end,
    env_start) as the kernel shows them to a reader that may ptrace-read the process; None
    leaves them 0, as for another user's process."""
    fields = ["0"] * 52  # fields[k - 1] is field k
    fields[0], fields[1], fields[2], fields[3] = str(pid), f"({comm})", state, str(ppid)
    fields[13], fields[14], fields[21] = str(utime), str(stime), str(start_ticks)
    fields[15], fields[16] = str(children_ticks[0]), str(children_ticks[1])
    fields[19] = str(threads)  # num_threads
    if args_len is not None:
        arg_start = 0x7FFC0000
        fields[47], fields[48] = str(arg_start), str(arg_start + args_len)
        fields[49] = str(arg_start + args_len)
    return " ".join(fields) + "\n"


def status_text(name: str, state: str, pid: int, ppid: int, vol: int, invol: int) -> str:
    """A trimmed /proc status file: the lines around those the probes read."""
    letters = {"R": "running", "S": "sleeping", "D": "disk sleep", "Z": "zombie"}
    return (
        f"Name:\t{name}\nUmask:\t0022\nState:\t{state} ({letters.get(state, 'other')})\n"
        f"Tgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\nThreads:\t1\n"
        f"Cpus_allowed_list:\t0-1\n"
        f"voluntary_ctxt_switches:\t{vol}\nnonvoluntary_ctxt_switches:\t{invol}\n"
    )


class FakeProc:
    """A writable fake of the parts of /proc the probes read, rooted at `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = root / "proc"
        self.proc.mkdir(parents=True, exist_ok=True)
        self.processes: dict[int, FakeProcess] = {}

    def add_process(self, pid: int, ppid: int, **kwargs: object) -> FakeProcess:
        """Create (or replace) a process; kwargs are FakeProcess fields. Without `threads`,
        the process gets one thread: its main thread."""
        proc = FakeProcess(pid, ppid, **kwargs)  # type: ignore[arg-type]
        if not proc.threads and proc.state != "Z":
            proc.threads = [FakeThread(pid, state=proc.state)]
        self.processes[pid] = proc
        self.write(proc)
        return proc

    def write(self, proc: FakeProcess) -> None:
        """(Re)write every file of `proc` from its fields."""
        base = self.proc / str(proc.pid)
        (base / "task").mkdir(parents=True, exist_ok=True)
        # Rewrite in place (same inodes), as procfs shows new values through an open file;
        # threads that are no longer listed disappear.
        tids = {str(t.tid) for t in proc.threads}
        for tdir in (base / "task").iterdir():
            if tdir.name not in tids:
                shutil.rmtree(tdir)
        utime = sum(t.utime_ticks for t in proc.threads)
        stime = sum(t.stime_ticks for t in proc.threads)
        main = next((t for t in proc.threads if t.tid == proc.pid), None)
        # The process's state is its main thread's, as the kernel shows it.
        state = main.state if main is not None else proc.state
        (base / "stat").write_text(
            stat_line(
                proc.pid,
                proc.comm,
                state,
                proc.ppid,
                utime=utime,
                stime=stime,
                children_ticks=proc.children_ticks,
                start_ticks=proc.start_ticks,
                args_len=sum(len(a.encode()) + 1 for a in proc.cmdline)
                if proc.args_shown
                else None,
                threads=len(proc.threads),
            )
        )
        vol, invol = (main.voluntary, main.involuntary) if main else (0, 0)
        (base / "status").write_text(status_text(proc.comm, state, proc.pid, proc.ppid, vol, invol))
        (base / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in proc.cmdline))
        (base / "environ").write_bytes(
            b"".join(f"{k}={v}".encode() + b"\0" for k, v in proc.environ.items())
        )
        (base / "maps").write_text(maps_text(proc.libraries))
        for thread in proc.threads:
            self.write_thread(proc, thread)

    def write_thread(self, proc: FakeProcess, thread: FakeThread) -> None:
        """(Re)write task/TID of one thread."""
        tdir = self.proc / str(proc.pid) / "task" / str(thread.tid)
        tdir.mkdir(parents=True, exist_ok=True)
        # CPU time is the thread's own; the rest is the process's, as the kernel shows it.
        (tdir / "stat").write_text(
            stat_line(
                thread.tid,
                proc.comm,
                thread.state,
                proc.ppid,
                utime=thread.utime_ticks,
                stime=thread.stime_ticks,
                children_ticks=proc.children_ticks,
                start_ticks=proc.start_ticks,
                args_len=sum(len(a.encode()) + 1 for a in proc.cmdline)
                if proc.args_shown
                else None,
                threads=len(proc.threads),
            )
        )
        (tdir / "status").write_text(
            status_text(
                proc.comm, thread.state, thread.tid, proc.ppid, thread.voluntary, thread.involuntary
            )
        )
        if thread.schedstat:
            (tdir / "schedstat").write_text(f"{thread.cpu_ns} {thread.run_delay_ns} 7\n")
        else:
            (tdir / "schedstat").unlink(missing_ok=True)

    def cpu_clock(self, pid: int) -> int | None:
        """The process CPU clock of `pid` (`TreeSampler(cpu_clock=fake.cpu_clock)`): the sum
        of its threads' CPU time, as the kernel's sums their runtime; None when it is gone.
        Without it a sampler on a fake tree reads every process at every sample."""
        proc = self.processes.get(pid)
        return None if proc is None else sum(t.cpu_ns for t in proc.threads)

    def reparent(self, pid: int, new_ppid: int) -> None:
        """The parent died: the kernel hands `pid` to init (or a subreaper)."""
        self.processes[pid].ppid = new_ppid
        self.write(self.processes[pid])

    def remove(self, pid: int) -> None:
        """The process exited and was reaped."""
        self.processes.pop(pid, None)
        # A descriptor held on a reaped process's stat reads nothing (procfs: ESRCH), not
        # the last line it showed: empty the file before it is unlinked.
        with contextlib.suppress(OSError):
            (self.proc / str(pid) / "stat").write_bytes(b"")
        shutil.rmtree(self.proc / str(pid), ignore_errors=True)

    def add_vanishing_thread(self, pid: int, tid: int) -> None:
        """A task entry listed but whose files are gone (exited while being read)."""
        (self.proc / str(pid) / "task" / str(tid)).mkdir(parents=True, exist_ok=True)

    def write_host(
        self,
        *,
        cpu: Iterable[int] = (100, 5, 50, 1000, 20, 3, 2, 7, 40, 0),
        psi_total_us: int | None = 123456,
    ) -> None:
        """/proc/stat (aggregate line plus one per-CPU line) and /proc/pressure/cpu."""
        ticks = " ".join(str(v) for v in cpu)
        (self.proc / "stat").write_text(
            f"cpu  {ticks}\ncpu0 {ticks}\nintr 1 2 3\nctxt 99\nprocs_running 1\n"
        )
        pressure = self.proc / "pressure"
        if psi_total_us is None:
            shutil.rmtree(pressure, ignore_errors=True)
            return
        pressure.mkdir(exist_ok=True)
        (pressure / "cpu").write_text(
            f"some avg10=1.50 avg60=0.80 avg300=0.20 total={psi_total_us}\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        )


def maps_text(libraries: Iterable[str]) -> str:
    """A maps file: anonymous and pseudo mappings plus each library mapped r-xp and r--p."""
    lines = [
        "55d0c0000000-55d0c0001000 r--p 00000000 08:01 100 /usr/bin/python3.11",
        "55d0c1000000-55d0c1200000 rw-p 00000000 00:00 0          [heap]",
        "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 ",
    ]
    for i, path in enumerate(libraries):
        start = 0x7F1000000000 + i * 0x100000
        for perms in ("r-xp", "r--p"):
            lines.append(f"{start:x}-{start + 0x1000:x} {perms} 00000000 08:01 {200 + i} {path}")
            start += 0x1000
    lines.append("7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0          [stack]")
    return "\n".join(lines) + "\n"


def deny_open(monkeypatch: Any, path: Path) -> None:
    """Make os.open of `path` fail with EACCES, as /proc does for another user's process
    (fake trees are the test's own files, and root may read anything)."""
    denied = str(path)
    real_open = os.open

    def guarded_open(p: Any, *args: Any, **kwargs: Any) -> int:
        if str(p) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", p)
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    deny_reader(monkeypatch, path)


def deny_reader(monkeypatch: Any, path: Path) -> None:
    """The same refusal for the reads the reader process makes (`probe.memreader`: memory,
    cmdline, environ, maps), which this process's os.open does not see."""
    from oversub.probe import memreader

    readers = memreader.service()
    denied = str(path)
    real_memory, real_file = readers.read_memory, readers.read_file

    def refuse(where: str) -> None:
        if where == denied:
            raise PermissionError(errno.EACCES, "Permission denied", where)

    def read_memory(proc_dir: str, *args: Any, **kwargs: Any) -> list[bytes]:
        refuse(f"{proc_dir}/mem")
        return real_memory(proc_dir, *args, **kwargs)

    def read_file(proc_dir: str, leaf: str, *args: Any, **kwargs: Any) -> bytes:
        refuse(f"{proc_dir}/{leaf}")
        return real_file(proc_dir, leaf, *args, **kwargs)

    monkeypatch.setattr(readers, "read_memory", read_memory)
    monkeypatch.setattr(readers, "read_file", read_file)
