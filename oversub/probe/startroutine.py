"""Which code started a thread: the outermost frames at the top of its stack, read from
outside while it runs.

A thread that never blocks (a spinning ONNX Runtime or numba worker, a numexpr thread busy
all the time) shows no program counter in `/proc/PID/task/TID/syscall`, but its stack is
memory like any other and its outermost frames never change while it lives. glibc (x86-64)
maps each thread's stack as an anonymous `rw-p` mapping right above a `---p` guard page,
and puts the thread's descriptor (`struct pthread`) at the top of it. The descriptor begins
with `tcbhead_t`, whose first and third words (`tcb`, `self`) hold the descriptor's own
address, and holds the thread's id a few hundred bytes further (offset 0x2d0 in glibc 2.3x;
learnt per process here, not assumed). Right below it (and the static TLS) lie the first
frames: `clone3` and `start_thread` in the C library, then the start routine given to
`pthread_create`, whose object is the code that created the thread: libgomp's
`gomp_thread_start`, OpenBLAS's `blas_thread_server`, numexpr's `th_worker`, rayon's
thread main in polars, libpython's `pythread_wrapper` (a `threading.Thread`). A C++
`std::thread` starts in libstdc++, and the next frame is its owner's.

So the owner is the object of the first return address, from the top down, that follows a
call instruction and lies outside the C library's kin, provided a C library frame came
first (the layout above; anything else is no evidence). Measured on polars, pyarrow,
numexpr, numba (omp layer), ONNX Runtime and OpenBLAS threads: the descriptor 2,368 bytes
below the mapping's end, the start routine's frame 1.9-2.7 KiB below it.

Everything read here is the watched process's to forge: a forged descriptor can only
misname that process's own threads (as its thread names can), two stacks claiming one
thread are both dropped, and every read is bounded (`TOP_READ`, `DEEP_READ`, `MAX_STACKS`)
and goes through `probe.backing.Memory`: only memory whose faults cannot wait for a server
is read, by the reader process (`probe.memreader`: the tops of up to `BATCH` stacks in one
request), within the caller's budget of one sample. A word pointing into code that may not
be read (a library on FUSE or NFS) cannot be checked for a call before it: the walk ends
there with no evidence. A pass that spends the budget stops where it is (`complete`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterable, Sequence

from oversub.core.runtimes import is_system_object
from oversub.probe.backing import Mapping, Memory, OverBudget

TOP_READ = 8192
"""Bytes read at the top of a stack mapping: the descriptor and, with a small static TLS,
the first frames."""
DEEP_READ = 16384
"""Bytes read further down when the first frames lie below `TOP_READ` (a large static TLS)."""
MAX_STACKS = 4096
"""Stack mappings looked at per pass over one process."""
TID_SPAN = 0x800
"""Bytes of the descriptor searched for the thread id."""
BATCH = 32
"""Stack tops read together (one request to the reader process, `probe.memreader`): a
process's first reading costs a request per 32 threads rather than one per thread, and the
budget is still shared with the checks that follow each batch."""
CHECKS = 64
"""Words a walk looks ahead when it meets an address not checked yet for a call before it:
the checks of those among them that point into code and were not checked either are read
in one request (a stack full of such words, which its process chooses, costs a request per
64 of them, not one each; a real thread's first walk of its process, one or two)."""


def stacks_of(mappings: Iterable[Mapping]) -> list[tuple[int, int]]:
    """(start, end) of every anonymous `rw-p` mapping right above an anonymous `---p` one
    (maps lines parsed by `probe.backing.parse_maps`): where glibc puts a thread's stack
    above its guard page."""
    out: list[tuple[int, int]] = []
    guard_end = -1
    for start, end, perms, _, path in mappings:
        if path:  # a file, [heap], [stack]
            guard_end = -1
        elif perms == b"---p":
            guard_end = end
        else:
            if perms == b"rw-p" and start == guard_end and end > start:
                out.append((start, end))
            guard_end = -1
    return out


def _top(start: int, end: int) -> tuple[int, int]:
    """(address, length) of the top of a stack mapping that `StackTops` reads."""
    size = min(TOP_READ, end - start)
    return end - size, size


def _word(data: bytes, index: int) -> int:
    return int(struct.unpack_from("<Q", data, 8 * index)[0])


def _descriptor(words: tuple[int, ...], base: int) -> int | None:
    """Index in `words` (read at address `base`, 8-byte words) of the highest 16-byte
    aligned word whose value is its own address and whose third word equals it."""
    first = (-base // 8) % 2  # the index of the first 16-byte aligned word
    top = len(words) - 3
    top -= (top - first) % 2
    for i in range(top, first - 1, -2):
        if words[i] == base + 8 * i and words[i + 2] == words[i]:
            return i
    return None


class StackTops:
    """Reads the start routines of one process's threads through its memory.

    `object_at(address)` names the file mapping whose code holds an address (None outside);
    `follows(address)` says whether a call instruction ends right before it (None: that
    code may not be read). Either may raise `OverBudget`, as `memory.read` does; so may the
    callbacks of `read_ahead`.
    """

    def __init__(
        self,
        memory: Memory,
        object_at: Callable[[int], str | None],
        follows: Callable[[int], bool | None],
        tid_offset: int | None = None,
        below: int | None = None,
    ) -> None:
        self._memory = memory
        self._object_at = object_at
        self._follows = follows
        self._ahead: Callable[[list[int]], None] | None = None
        self._checked: Callable[[int], bool] | None = None
        self.tid_offset = tid_offset
        """Where the thread id sits in a descriptor; learnt from the first descriptor that
        holds exactly one live thread id."""
        self.below = below
        """How far below its mapping's end the last descriptor lay: one process's threads
        all have the same (2,368 bytes measured), so once known only that place is read."""
        self.bare: list[tuple[int, int]] = []
        """The stacks of the last `read` that hold no descriptor: no glibc thread's, never
        worth reading again."""
        self.complete = True
        """The last `read` looked at every stack it was given (its budget was not spent)."""

    def read_ahead(
        self, ahead: Callable[[list[int]], None], checked: Callable[[int], bool]
    ) -> None:
        """Have the walks read their checks ahead, `CHECKS` words at a time."""
        self._ahead, self._checked = ahead, checked

    def read(
        self, stacks: Iterable[tuple[int, int]], tids: Collection[int]
    ) -> dict[int, tuple[tuple[int, int], str | None]]:
        """tid -> (its stack mapping, the object of its start routine, None when the frames
        are not the layout above) for the live `tids` whose stack is among `stacks`."""
        found: dict[int, tuple[tuple[int, int], str | None]] = {}
        twice: set[int] = set()
        self.bare = []
        self.complete = True
        todo = list(stacks)[:MAX_STACKS]
        try:
            for at in range(0, len(todo), BATCH):
                batch = todo[at : at + BATCH]
                self._memory.prefetch([_top(start, end) for start, end in batch])
                for start, end in batch:
                    self._one(start, end, tids, found, twice)
        except OverBudget:
            self.complete = False
        for tid in twice:
            found.pop(tid, None)
        return found

    def _one(
        self,
        start: int,
        end: int,
        tids: Collection[int],
        found: dict[int, tuple[tuple[int, int], str | None]],
        twice: set[int],
    ) -> None:
        """One stack of `read`: its descriptor, its thread, that thread's start routine."""
        base, size = _top(start, end)
        top = self._memory.read(base, size)
        count = len(top) // 8
        if len(top) != size:
            return  # not all of it may be read, or gone
        words: tuple[int, ...] | None = None
        if self.below is None:
            words = struct.unpack_from(f"<{count}Q", top)
            i = _descriptor(words, base)
        else:  # one C library per process: its descriptors all lie there, or nowhere
            at = (len(top) - self.below) // 8
            ok = 0 <= at < count - 2 and _word(top, at) == base + 8 * at == _word(top, at + 2)
            i = at if ok else None
        if i is None:
            self.bare.append((start, end))
            return
        self.below = end - (base + 8 * i)
        tid = self._tid(top, 8 * i, tids)
        if tid is None:
            return
        if tid in found:
            twice.add(tid)
            return
        if words is None:
            words = struct.unpack_from(f"<{i}Q", top)
        found[tid] = ((start, end), self._start_object(words, i, base, start))

    def _tid(self, top: bytes, at: int, tids: Collection[int]) -> int | None:
        span = top[at : at + TID_SPAN]
        if self.tid_offset is not None:
            if self.tid_offset + 4 > len(span):
                return None
            (value,) = struct.unpack_from("<i", span, self.tid_offset)
            return value if value in tids else None
        hits = [
            off
            for off in range(0, len(span) - 3, 4)
            if struct.unpack_from("<i", span, off)[0] in tids
        ]
        if len(hits) != 1:
            return None
        self.tid_offset = hits[0]
        return int(struct.unpack_from("<i", span, hits[0])[0])

    def _start_object(self, words: tuple[int, ...], i: int, base: int, start: int) -> str | None:
        """The object of the start routine: the first non-system return address below the
        descriptor, after at least one C library frame."""
        walk = _Walk(self._object_at, self._follows, self._ahead, self._checked)
        if walk.scan(words, i) or walk.done:
            return walk.found
        deep_start = max(start, base - DEEP_READ)
        if deep_start >= base:
            return None
        deep = self._memory.read(deep_start, base - deep_start)
        if len(deep) != base - deep_start:
            return None
        deeper = struct.unpack_from(f"<{len(deep) // 8}Q", deep)
        walk.scan(deeper, len(deeper))
        return walk.found


class _Walk:
    """The walk down one thread's outermost frames (see the module docstring)."""

    def __init__(
        self,
        object_at: Callable[[int], str | None],
        follows: Callable[[int], bool | None],
        ahead: Callable[[list[int]], None] | None = None,
        checked: Callable[[int], bool] | None = None,
    ) -> None:
        self._object_at = object_at
        self._follows = follows
        self._ahead = ahead
        self._checked = checked or (lambda address: False)
        self._asked: set[int] = set()
        """Addresses whose check was read ahead (or is being read now)."""
        self.system = False
        """A C library frame was seen."""
        self.done = False
        """The walk ended: `found` is its answer (None: not the layout, no evidence)."""
        self.found: str | None = None

    def scan(self, words: Sequence[int], end: int) -> bool:
        """Walk `words[:end]` from the top of the stack down (from its last word to its
        first); True once the start routine is found."""
        for n in range(end - 1, -1, -1):
            word = words[n]
            if word < 4096:
                continue
            path = self._object_at(word)
            if path is None:
                continue
            if self._ahead is not None and word not in self._asked and not self._checked(word):
                self._ahead(self._next_checks(words, n))
            call = self._follows(word)
            if call is None:  # code that may not be read: no evidence past it
                self.done = True
                return False
            if not call:
                continue
            if is_system_object(path):
                self.system = True
                continue
            self.done = True
            if self.system:
                self.found = path
            return self.found is not None
        return False

    def _next_checks(self, words: Sequence[int], n: int) -> list[int]:
        """Of the word at `n` and the `CHECKS` - 1 the walk meets after it (below it in
        `words`), those it may have to check and whose check is not known."""
        out: list[int] = []
        asked, checked = self._asked, self._checked
        for word in reversed(words[max(0, n - CHECKS + 1) : n + 1]):
            if word < 4096 or word in asked or checked(word):
                continue
            if self._object_at(word) is not None:
                asked.add(word)
                out.append(word)
        return out
