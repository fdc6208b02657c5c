"""Which runtime owns each thread of another process, read from outside without stopping it.

A thread's owner never changes, so it is looked for once per thread (pid, process start
time, tid; a tid that leaves the sample is forgotten), and a process whose threads all have
a proven owner gets its last answer again while its threads stay the same
(docs/development.md, Performance, has the figure). Evidence, in order:

1. its name, `/proc/PID/task/TID/comm`: `polars-N`, `gloo_tcp_loop`, `jemalloc_bg_thd`, ...
   (`runtimes.owner_of_name`); a name inherited from the process proves nothing;
2. the code that started it: the start routine's frame at the top of its stack, read from
   `/proc/PID/mem` whether it runs or not (`probe.startroutine`); this is what names a
   worker that never blocks, and a Python thread that calls into a runtime stays the
   interpreter's;
3. when it is blocked, the user-space program counter in `/proc/PID/task/TID/syscall`,
   mapped through `/proc/PID/maps` to the object whose code holds it (libgomp waits with a
   `syscall` instruction of its own);
4. when that code is no runtime's (the C library's, the C++ runtime's, NumPy's), the return
   addresses near the stack pointer: a bounded read of the thread's stack in
   `/proc/PID/mem`, taking the first word that points into the code of a runtime's object
   *and* follows a call instruction there (a stale pointer on the stack does not);
5. threads of one pool start together: an unattributed thread with the same name started
   within a clock tick of attributed threads that all have one owner gets that owner.

The main thread of a Python interpreter (its code is mapped) is the interpreter's: it calls
into the runtimes, but it is none of their pool's threads.

A thread no evidence names is `runtimes.UNATTRIBUTED`: never guessed from the mapped
libraries. Everything here is the watched process's to choose (names, maps paths, memory),
so every read is bounded, every failure is "no evidence", nothing raises. Reading `syscall`
and `mem` needs ptrace access (the same check as `probe.livesizes`); refused, only names
count. A stack whose frames are not yet there (a thread just created) is read again at the
next samples (at most `TOP_TRIES` times); a running thread shows no PC, and a blocked one
may wait where no runtime's frame is near its stack pointer: it is tried again (at most
`MAX_TRIES` times) at later samples where it is blocked and ran since its last try (one
that did not run waits where it waited, with the same stack). A thread's name and start
time come from the sampler's own reading when it has them (`probe.threads`), so a new
thread costs no file of its own for them.

Reads of the process's maps and memory are `probe.procmemory`'s (the reader process, the
memory `probe.backing` allows, a budget per sample): a process quarantined there, or a
runtime loaded from FUSE or NFS, is named by thread names and blocked PCs only. A process
that execs (its `/proc/PID/exe` names another file) is another program under the same pid
and start time: everything known of it is dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from oversub.core import runtimes
from oversub.core.libraries import library_key, object_of
from oversub.core.samples import ThreadSample
from oversub.probe.backing import Memory, read_mount_types
from oversub.probe.libvars import library_candidates
from oversub.probe.memreader import Readers, service
from oversub.probe.procmemory import ProcessMemory
from oversub.probe.startroutine import StackTops

MAX_TRIES = 10
"""Blocked readings (syscall, maybe maps and stack) tried per thread before giving up."""
TOP_TRIES = 3
"""Passes over a process's stack tops (`probe.startroutine`) that may look for one thread."""
_SMALL = 512
_OBJECTS_MAX = 4096
"""Object paths whose owner is remembered at most (the paths are the processes' to choose)."""


@dataclass
class _Thread:
    comm: str
    start: int | None
    owner: str | None = None
    proven: bool = False
    """The owner came from the thread's own evidence (name, start routine, PC, stack): final."""
    tries: int = 0
    top_tries: int = 0
    tried_cpu: int | None = None
    """The thread's CPU time at its last blocked try: not run since, the same evidence."""


@dataclass
class _Process:
    mem: ProcessMemory
    """Its maps and memory (`probe.procmemory`)."""
    start: int = 0
    """Its start time (clock ticks after boot): the reader's quarantine is per process."""
    exe: bytes | None = None
    """Where /proc/PID/exe leads (None when it could not be read): another file is an exec."""
    threads: dict[int, _Thread] = field(default_factory=dict)
    stack_tid: dict[tuple[int, int], int] = field(default_factory=dict)
    """The thread each stack was found to belong to."""
    tid_offset: int | None = None
    main_name: str | None = None
    """The main thread's name (`/proc/PID/comm`), read once."""
    below: int | None = None
    """Where this process's thread descriptors lie below their stacks' ends (learnt)."""
    refused: bool = False
    """syscall or mem refused: only names count."""
    seen: bool = True
    settled: tuple[tuple[int, ...], dict[int, str]] | None = None
    """(tids, the answer) of its last reading when every one of those threads had a proven
    owner: the same threads again get the same answer without a look at each."""


def _read(path: str, size: int = _SMALL) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except PermissionError:
        raise
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_syscall_pc(text: bytes) -> tuple[int, int] | None:
    """(stack pointer, program counter) of a blocked thread's syscall line; None when it is
    running or the line is malformed."""
    fields = text.split()
    if len(fields) < 3 or fields[0] == b"running":
        return None
    try:
        return int(fields[-2], 16), int(fields[-1], 16)
    except ValueError:
        return None


class OwnerReader:
    """Attributes the threads of the processes of one sampler; call `end_sample()` after
    each sample."""

    def __init__(
        self, root: str = "/", machine: str | None = None, readers: Readers | None = None
    ) -> None:
        self._proc = os.path.join(root, "proc")
        self._readers = readers if readers is not None else service()
        self._machine = machine if machine is not None else os.uname().machine
        self._known: dict[tuple[int, int], _Process] = {}
        self._objects: dict[str, tuple[str | None, bool]] = {}
        """Object path -> (its owner, whether it is a system object), looked up once."""
        self._candidates: dict[str, tuple[str, ...]] = {}
        """Object path of a library without a row -> the variables its binary names
        (`probe.libvars`), read once."""
        self._host: dict[int, bytes] | None = None
        """The file systems of the host's mount namespace (`probe.backing`), read once per
        sample where needed."""

    def end_sample(self) -> None:
        """Forget the processes and threads this sample did not read, and what of each
        process's memory may be read (its maps are read again before the next read)."""
        for key in [k for k, p in self._known.items() if not p.seen]:
            del self._known[key]
        for p in self._known.values():
            p.seen = False
            p.mem.end_sample()
        self._host = None

    def _host_mounts(self) -> dict[int, bytes] | None:
        if self._host is None:
            self._host = read_mount_types(f"{self._proc}/1/mountinfo")
        return self._host

    def keep(self, pid: int, start_ticks: int) -> None:
        """The process was not read in this sample (its last reading stands): remember it."""
        proc = self._known.get((pid, start_ticks))
        if proc is not None:
            proc.seen = True

    def read(
        self,
        pid: int,
        start_ticks: int,
        threads: tuple[ThreadSample, ...],
        names: Mapping[int, str] | None = None,
    ) -> dict[int, str]:
        """tid -> owner key (`runtimes`), or `runtimes.UNATTRIBUTED`, for `threads`;
        `names`: tid -> thread name where the caller read it already."""
        proc = self._process(pid, start_ticks)
        tids = tuple(t.tid for t in threads)
        if proc.settled is not None and proc.settled[0] == tids:
            return proc.settled[1]  # owners never change once proven
        base = f"{self._proc}/{pid}/task"
        alive = {t.tid for t in threads}
        for tid in [tid for tid in proc.threads if tid not in alive]:
            del proc.threads[tid]
        unproven: list[tuple[ThreadSample, _Thread]] = []
        for t in threads:
            entry = proc.threads.get(t.tid)
            if entry is None:
                name = names.get(t.tid) if names is not None else None
                entry = self._new_thread(
                    f"{base}/{t.tid}", self._main_name(pid, proc, names), name, t.start_ticks
                )
                if t.tid == pid and self._interpreter(pid, proc):
                    entry.owner, entry.proven = "python", True
                proc.threads[t.tid] = entry
            if not entry.proven:
                unproven.append((t, entry))
        wanted = {t.tid: e for t, e in unproven if t.tid != pid and e.top_tries < TOP_TRIES}
        try:
            if wanted and not proc.refused and self._machine == "x86_64":  # glibc's layout
                self._start_routines(pid, proc, wanted, alive)
            for t, entry in unproven:
                if entry.proven:
                    continue
                if entry.tries >= MAX_TRIES or proc.refused:
                    continue
                if t.state not in ("S", "D"):
                    continue  # running: no PC to read now
                if entry.tries and entry.tried_cpu == t.cpu_ns:
                    continue  # not run since its last try: blocked where it was
                entry.tries += 1
                entry.tried_cpu = t.cpu_ns
                owner = self._blocked_owner(pid, t.tid, proc)
                if owner is not None:
                    entry.owner, entry.proven = owner, True
        finally:
            proc.mem.end_read()
            proc.refused = proc.refused or proc.mem.refused
        if unproven:
            _by_start_group(pid, proc.threads)
        owners = {
            t.tid: (proc.threads[t.tid].owner or runtimes.UNATTRIBUTED)
            for t in threads
            if t.tid in proc.threads
        }
        settled = all(proc.threads[tid].proven for tid in owners) and len(owners) == len(tids)
        proc.settled = (tids, owners) if settled else None
        return owners

    def _process(self, pid: int, start_ticks: int) -> _Process:
        """The state of a process identity, dropped when it exec'd since it was read (its
        `/proc/PID/exe` leads elsewhere: the same pid and start time, another program)."""
        try:
            exe: bytes | None = os.readlink(f"{self._proc}/{pid}/exe".encode())
        except OSError:  # refused, a kernel thread, or an exiting main thread: no news
            exe = None
        key = (pid, start_ticks)
        proc = self._known.get(key)
        if proc is None or (exe is not None and proc.exe is not None and exe != proc.exe):
            memory = ProcessMemory(
                self._readers, f"{self._proc}/{pid}", start_ticks, self._host_mounts
            )
            proc = self._known[key] = _Process(memory, start_ticks, exe=exe)
        elif proc.exe is None:
            proc.exe = exe
        proc.seen = True
        return proc

    def _start_routines(
        self, pid: int, proc: _Process, wanted: dict[int, _Thread], alive: set[int]
    ) -> None:
        """Step 2 of the module docstring for the threads `wanted`, in one pass over the
        process's stacks (maps read again, once per sample: new threads have new stacks)."""
        mem = proc.mem
        if not mem.fresh:
            mem.load_maps()
        for entry in wanted.values():
            entry.top_tries += 1
        # A stack whose thread still lives and is not wanted is not read again.
        known = {s for s, tid in proc.stack_tid.items() if tid in alive and tid not in wanted}
        stacks = [s for s in mem.stacks if s not in known and mem.bare.get(s, 0) < 2]
        memory = self._memory(proc) if stacks else None
        if memory is None:
            return
        calls, machine = mem.calls, self._machine

        def follows(address: int) -> bool | None:
            ok = calls.get(address)  # the usual case: a return address checked before
            return ok if ok is not None else mem.follows(address, machine)

        tops = StackTops(memory, mem.object_at, follows, proc.tid_offset, proc.below)
        tops.read_ahead(mem.ahead, calls.__contains__)
        found = tops.read(stacks, alive)
        proc.tid_offset, proc.below = tops.tid_offset, tops.below
        for s in tops.bare:
            mem.bare[s] = mem.bare.get(s, 0) + 1
        if not tops.complete:  # the budget ran out: who was not reached is looked for again
            for tid, entry in wanted.items():
                if tid not in found:
                    entry.top_tries -= 1
        proc.stack_tid = {s: tid for s, tid in proc.stack_tid.items() if tid in alive}
        for tid, (stack, path) in found.items():
            proc.stack_tid[stack] = tid
            wants = wanted.get(tid)
            if wants is None or path is None:
                continue  # not wanted; or not its first frames yet (just created): next pass
            owner = self._library(pid, proc, runtimes.owner_of_code(path, _exe_path(proc)))
            if owner is not None:
                wants.owner = _team_driver(proc, owner)
                wants.proven = True
            else:
                wants.top_tries = TOP_TRIES  # started by no object's code: other evidence

    def _main_name(self, pid: int, proc: _Process, names: Mapping[int, str] | None) -> str | None:
        """The process's main thread's name, read once (or taken from `names`, the thread
        names the caller read): a thread carrying it inherited it."""
        if proc.main_name is None and names is not None and pid in names:
            proc.main_name = names[pid]
        if proc.main_name is None:
            try:
                raw = _read(f"{self._proc}/{pid}/comm", 64)
            except PermissionError:
                raw = None
            proc.main_name = (raw or b"").strip().decode("utf-8", "replace")
        return proc.main_name or None

    def _new_thread(
        self,
        base: str,
        inherited: str | None = None,
        name: str | None = None,
        start: int | None = None,
    ) -> _Thread:
        """A thread first seen; its name is evidence unless it is `inherited`, the main
        thread's (a thread is named after its creator until it renames itself: torch names
        a DataLoader worker's main thread `pt_data_worker`, and the OpenBLAS threads that
        worker starts later carry that name too). `name` and `start`: what the caller read
        already; the files are read for what it did not."""
        comm, stat = name, None
        try:
            if comm is None:
                comm = (_read(f"{base}/comm", 64) or b"").strip().decode("utf-8", "replace")
            if start is None:
                stat = _read(f"{base}/stat")
        except PermissionError:
            comm, stat = comm or "", None
        if stat:
            rest = stat[stat.rfind(b")") + 2 :].split()
            try:
                start = int(rest[19])  # field 22: start time in clock ticks after boot
            except (IndexError, ValueError):
                start = None
        owner = None if comm == inherited else runtimes.owner_of_name(comm)
        return _Thread(comm, start, owner, proven=owner is not None)

    def _interpreter(self, pid: int, proc: _Process) -> bool:
        """The process runs a Python interpreter (its code is mapped: `libpython*` or a
        `python*` executable): its main thread is the interpreter's, whatever runtime it
        calls into (a caller inside a pool's code is not one of the pool's threads)."""
        if proc.mem.text is None:
            proc.mem.load_maps()
        return any(runtimes.owner_of_object(m[2]) == "python" for m in proc.mem.text or ())

    def _blocked_owner(self, pid: int, tid: int, proc: _Process) -> str | None:
        """The owner a blocked thread's PC (or stack) proves; None when nothing does yet."""
        if not proc.mem.fresh:
            proc.mem.load_maps()  # its code may have been loaded since
        try:
            raw = _read(f"{self._proc}/{pid}/task/{tid}/syscall")
        except PermissionError:
            proc.refused = True
            return None
        where = parse_syscall_pc(raw or b"")
        if where is None:
            return None
        sp, pc = where
        path = proc.mem.object_at(pc)
        if path is None:
            return None  # in anonymous code (a JIT), or maps unreadable
        owner, system = self._owner_of(path)
        if owner is not None:
            return _team_driver(proc, owner)
        if not system:
            # Blocked in its own code, in an object no row names (a library that makes its
            # own system calls): that library's, unless it is the interpreter's or one of
            # the program's; a row's vendored copy is its package's team.
            return self._library(pid, proc, runtimes.owner_of_code(path, _exe_path(proc)))
        if self._memory(proc) is None:
            return None
        owner = proc.mem.stack_owner(sp, self._machine, self._owner_of)
        return None if owner is None else _team_driver(proc, owner)

    def _library(self, pid: int, proc: _Process, owner: str | None) -> str | None:
        """`owner`, with the variables its binary names when it is a library without a row
        (`probe.libvars`: read once per object, candidates only)."""
        path = object_of(owner) if owner is not None else None
        if path is None:
            return owner
        found = self._candidates.get(path)
        if found is None:
            if len(self._candidates) >= _OBJECTS_MAX:
                self._candidates.clear()
            proc_dir = f"{self._proc}/{pid}"
            found = library_candidates(self._readers, proc_dir, proc.start, path, self._host_mounts)
            self._candidates[path] = found
        return library_key(path, found)

    def _owner_of(self, path: str) -> tuple[str | None, bool]:
        """(`runtimes.owner_of_row`, `runtimes.is_system_object`) of a mapped object."""
        known = self._objects.get(path)
        if known is None:
            if len(self._objects) >= _OBJECTS_MAX:
                self._objects.clear()
            known = (runtimes.owner_of_row(path), runtimes.is_system_object(path))
            self._objects[path] = known
        return known

    def _memory(self, proc: _Process) -> Memory | None:
        """The process's memory for this read (`ProcessMemory.open`); None when it cannot be
        read: refused (`proc.refused`: only names count), gone or quarantined."""
        if proc.mem.refused:
            proc.refused = True
        return None if proc.refused else proc.mem.open()


def _exe_path(proc: _Process) -> str | None:
    """The program's executable as maps names it (`/proc/PID/exe`), or None."""
    if proc.exe is None:
        return None
    path = proc.exe[:4096]
    if path.endswith(b" (deleted)"):
        path = path[: -len(b" (deleted)")]
    return path.decode("utf-8", "replace")


def _team_driver(proc: _Process, owner: str) -> str:
    """Whose OpenMP team a thread of `owner` (an OpenMP runtime, maybe vendored) is. numba's
    omp threading layer sizes the team it drives itself (`NUMBA_NUM_THREADS`;
    `OMP_NUM_THREADS` does not change it, measured), so a libgomp thread of a process that
    loaded numba's layer (`numba/np/ufunc/omppool*`) and not torch is numba's. Otherwise the
    one library of the catalogue that drives OpenMP teams mapped in the process
    (`runtimes.openmp_driver`: XGBoost, LightGBM, faiss, scikit-learn): the wheels share
    one vendored libgomp, so which copy runs does not say whose team it is."""
    if not runtimes.is_openmp_owner(owner):
        return owner
    text = proc.mem.text or ()
    names = [m[2].rsplit("/", 1)[-1] for m in text]
    numba = any(
        "omppool" in m[2].rsplit("/", 1)[-1] and runtimes.owner_of_object(m[2]) == "numba"
        for m in text
    )
    if owner == "libgomp" and numba and not any(n.startswith("libtorch_cpu") for n in names):
        return "numba"
    return runtimes.openmp_driver([m[2] for m in text]) or owner


def _by_start_group(pid: int, threads: dict[int, _Thread]) -> None:
    """Step 4 of the module docstring: unattributed threads started together (same name,
    within a tick) with attributed threads of a single owner share that owner. The main
    thread never joins a group: it started with the process. Linear in the threads."""
    groups: dict[tuple[str, int], set[str | None]] = {}
    for t in threads.values():
        if t.proven and t.start is not None and t.owner != runtimes.UNATTRIBUTED:
            groups.setdefault((t.comm, t.start), set()).add(t.owner)
    if not groups:
        return
    for tid, t in threads.items():
        if t.proven or t.start is None or tid == pid:
            continue
        owners: set[str | None] = set()
        for tick in (t.start - 1, t.start, t.start + 1):
            owners |= groups.get((t.comm, tick), set())
        t.owner = owners.pop() if len(owners) == 1 else None
