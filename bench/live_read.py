"""Cost of reading live pool sizes: one refresh of a NumPy process (maps filter + mem read).

    .venv-real/bin/python bench/live_read.py      # needs NumPy (make test-real's venv)

Starts an idle child that imported NumPy, then times, over many repetitions: the first read
(ELF symbol lookup included), a refresh with the symbol cached (what the sampler pays per
process on the maps schedule), and the maps pre-filter alone. Prints one line per figure.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oversub.probe.livesizes import LiveReader, maps_libraries

CHILD = "import numpy, time; print('ready', flush=True); time.sleep(120)"
REPEAT = 5000


def main() -> int:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        maps = Path(f"/proc/{child.pid}/maps").read_bytes()
        reader = LiveReader()
        t0 = time.perf_counter()
        live = reader.read(child.pid, maps)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(REPEAT):
            reader.read(child.pid, maps)
        cached = (time.perf_counter() - t0) / REPEAT
        t0 = time.perf_counter()
        for _ in range(REPEAT):
            maps_libraries(maps)
        scan = (time.perf_counter() - t0) / REPEAT
    finally:
        child.kill()
        child.wait()
    print(f"live sizes read: {live}")
    print(f"maps lines: {len(maps.splitlines())}")
    print(f"first read (ELF .dynsym lookup + mem read): {first * 1e3:.2f} ms")
    print(f"refresh with the symbol cached: {cached * 1e6:.1f} us per process")
    print(f"  of which the maps pre-filter: {scan * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
