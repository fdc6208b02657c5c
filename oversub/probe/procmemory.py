"""One process's memory as attribution reads it (`probe.owners`): its maps (code, thread
stacks, what of it may be read), its memory read through the reader process, the check for a
call instruction before a return address, and the scan of a blocked thread's stack.

Every read of the process, its maps included, goes through `probe.memreader`: a read that
does not return is abandoned there and the process quarantined, after which its last maps
stand and nothing of its memory is read again (`open` gives None). What may be read is what
`probe.backing` allows, against the maps read in the same sample; each sample of a process
has a budget of reads and bytes (`MAX_READS`, `MAX_BYTES`); the addresses found to follow
a call are remembered up to `CALLS_MAX` (forgotten when the process's code mappings change).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable

from oversub.probe.backing import (
    AddressSpace,
    Mapping,
    Memory,
    Mounts,
    OverBudget,
    parse_maps,
)
from oversub.probe.memreader import Readers
from oversub.probe.startroutine import CHECKS, stacks_of

STACK_SCAN = 2048
"""Bytes of a blocked thread's stack scanned for return addresses (measured: the first one
outside libc lies 88-264 bytes above the stack pointer for polars, pyarrow, numexpr, ORT and
the interpreter)."""
MAPS_MAX = 4 << 20
"""Bytes of a maps file read at most (about 40,000 mappings; a process beyond it hides the
mappings past the bound from attribution, its own loss)."""
MAX_READS = 1024
"""Reads of one process's memory per sample at most: stack tops, deeper frames, stack scans
and the checks for a call before an address (a new address costs one read)."""
MAX_BYTES = 2 << 20
"""Bytes of one process's memory read per sample at most (256 stack tops of 8 KiB)."""
CALLS_MAX = 4096
"""Addresses remembered per process as following a call or not; forgotten when full."""
_TEXT_MAX = 8192
"""Executable file mappings kept per process (a real one has a few hundred)."""
_POINTER = {"x86_64": ("<Q", 8), "aarch64": ("<Q", 8), "arm64": ("<Q", 8)}


def text_of(mappings: list[Mapping]) -> list[tuple[int, int, str]]:
    """The executable mappings of files, sorted by start address (at most `_TEXT_MAX`)."""
    found = [(s, e, p) for s, e, perms, _, p in mappings if b"x" in perms and p[:1] == b"/"]
    out: list[tuple[int, int, str]] = []
    for start, end, path in found[:_TEXT_MAX]:
        if path.endswith(b" (deleted)"):
            path = path[: -len(b" (deleted)")]
        out.append((start, end, path[:4096].decode("utf-8", "replace")))
    out.sort()
    return out


def follows_call(before: bytes, machine: str) -> bool:
    """True when the bytes just before an address end with a call instruction (the address
    is a return address): x86-64 `call rel32` or `call r/m` (opcode FF /2, 2 to 7 bytes),
    AArch64 `bl` or `blr`."""
    if machine == "x86_64":
        if len(before) < 7:
            return False
        if before[-5] == 0xE8:
            return True
        return any(before[-k] == 0xFF and (before[-k + 1] & 0x38) == 0x10 for k in range(2, 8))
    if machine in ("aarch64", "arm64"):
        if len(before) < 4:
            return False
        insn = int.from_bytes(before[-4:], "little")
        return (insn & 0xFC000000) == 0x94000000 or (insn & 0xFFFFFC1F) == 0xD63F0000
    return False


class ProcessMemory:
    """What attribution knows of one process's address space, and its reads of it.

    `proc_dir` is /proc/PID (under the probes' root); `start` the process's start time (the
    reader's quarantine is per process); `host` gives the host's mount table
    (`probe.backing.Mounts`)."""

    def __init__(
        self,
        readers: Readers,
        proc_dir: str,
        start: int,
        host: Callable[[], dict[int, bytes] | None],
    ) -> None:
        self._readers = readers
        self._dir = proc_dir
        self._start = start
        self._host = host
        self.text: list[tuple[int, int, str]] | None = None
        """Executable file mappings (start, end, path), sorted; None until read."""
        self._starts: list[int] = []
        self.stacks: list[tuple[int, int]] = []
        """Anonymous mappings above a guard page (thread stacks), from the same maps read."""
        self.space: AddressSpace | None = None
        """What of its memory may be read, from the maps read in this sample (None: not read)."""
        self.bare: dict[tuple[int, int], int] = {}
        """Stack-like mappings found without a thread descriptor, and how often: twice (not a
        stack being set up by pthread_create at that moment) and it is not read again."""
        self.calls: dict[int, bool] = {}
        """Address -> a call instruction ends right before it (read once per address, while
        the executable mappings stay the same; at most `CALLS_MAX`)."""
        self.memory: Memory | None = None
        """Its memory for the read under way, with this sample's budget."""
        self.fresh = False
        """Its maps were read during this sample."""
        self.refused = False
        """The kernel refused its memory (not root, not its ancestor)."""

    def end_sample(self) -> None:
        """The next sample reads its maps again before any read of its memory."""
        self.fresh = False
        self.space = None

    def end_read(self) -> None:
        """The read of the process is over: its memory session with it."""
        self.memory = None

    def load_maps(self) -> None:
        """Its executable mappings, stacks and readable memory, from one read of its maps
        (and, when a read needs it, of its mountinfo: `probe.backing`). A quarantined
        process keeps what its last maps said, and nothing of its memory may be read."""
        self.fresh = True
        self.space = None
        try:
            maps = self._readers.read_file(self._dir, "maps", MAPS_MAX, self._start)
        except OverBudget:  # quarantined (`memreader.Unreachable`)
            if self.text is None:
                self.text = []
            return
        except OSError:
            self.text, self._starts, self.stacks = [], [], []
            return
        if len(maps) >= MAPS_MAX:
            maps = maps[: maps.rfind(b"\n", 0, MAPS_MAX) + 1]  # whole lines only
        mappings = parse_maps(maps)
        text = text_of(mappings)
        if text != self.text:
            self.calls.clear()  # other code at those addresses (dlopen, exec): check again
        self.text = text
        self._starts = [m[0] for m in text]
        self.stacks = stacks_of(mappings)
        current = set(self.stacks)
        self.bare = {s: n for s, n in self.bare.items() if s in current}
        self.space = AddressSpace(mappings, Mounts(self._dir, self._host))

    def object_at(self, address: int) -> str | None:
        """The file whose code mapping holds `address` (None outside every one)."""
        if self.text is None:
            self.load_maps()
        text = self.text or []
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0 and text[i][0] <= address < text[i][1]:
            return text[i][2]
        return None

    def open(self) -> Memory | None:
        """Its memory for this read, its maps read in this sample, with this sample's budget:
        one session of the reader per process and read (`end_read`), opened by its first
        request; None when it cannot be read (quarantined, or `refused`: the kernel refused
        it, after which nothing of it is asked again)."""
        if self.memory is not None:
            return self.memory
        readers, proc_dir, start = self._readers, self._dir, self._start
        if self.refused or readers.quarantined(proc_dir, start):
            return None
        if self.space is None:
            self.load_maps()
        space = self.space
        if space is None:
            return None
        session = readers.session()

        def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
            try:
                return readers.read_memory(proc_dir, session, ranges, start)
            except PermissionError:  # not root, not its ancestor: only names count
                self.refused = True
                raise OverBudget from None

        self.memory = Memory(fetch, space, MAX_BYTES, MAX_READS)
        return self.memory

    def ahead(self, addresses: list[int]) -> None:
        """Read in one request the bytes `follows` needs for each of `addresses` not checked
        yet (within this sample's budget: past it, `follows` raises as a read would)."""
        memory = self.memory
        if memory is not None:
            calls = self.calls
            wanted = dict.fromkeys(a for a in addresses if a >= 8 and a not in calls)
            memory.prefetch([(a - 8, 8) for a in wanted])

    def follows(self, address: int, machine: str) -> bool | None:
        """A call instruction ends right before `address` (`follows_call`), remembered per
        address; None when those bytes may not be read. Raises `OverBudget`."""
        ok = self.calls.get(address)
        if ok is not None:
            return ok
        memory = self.memory
        if memory is None or address < 8:
            return None
        before = memory.read(address - 8, 8)
        if len(before) != 8 and memory.space.span(address - 8, 8) != 8:
            return None  # may not be read (not: could not be)
        ok = follows_call(before, machine)
        if len(self.calls) >= CALLS_MAX:
            self.calls.clear()
        self.calls[address] = ok
        return ok

    def stack_owner(
        self, sp: int, machine: str, owner_of: Callable[[str], tuple[str | None, bool]]
    ) -> str | None:
        """The owner of the first word above `sp` that points into a runtime's code (not a
        system object's: `owner_of` gives (owner, system) of a path) and follows a call
        there; None when none does within `STACK_SCAN` bytes or the budget."""
        pointer = _POINTER.get(machine)
        if pointer is None:
            return None
        fmt, size = pointer
        memory = self.open()
        if memory is None:
            return None
        try:
            stack = memory.read(sp, STACK_SCAN)
            candidates: list[tuple[int, str]] = []
            for (word,) in struct.iter_unpack(fmt, stack[: len(stack) - len(stack) % size]):
                path = self.object_at(word)
                if path is None or word < 8:
                    continue
                owner, system = owner_of(path)
                if not system and owner is not None:
                    candidates.append((word, owner))
            for i, (word, owner) in enumerate(candidates):
                if i % CHECKS == 0:  # one request for the next checks
                    self.ahead([w for w, _ in candidates[i : i + CHECKS]])
                call = self.follows(word, machine)
                if call is None:
                    return None  # its code may not be read: no evidence past it
                if call:
                    return owner
        except OverBudget:
            return None
        return None
