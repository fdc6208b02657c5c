"""Regenerate docs/watch.png, the README's picture of the live `oversub watch` view.

    .venv/bin/python tools/docs_images.py [--out docs/watch.png]   (or: make docs-images)

A real run, not a drawing: `oversub stress --procs 2` (2 processes, each running
stress's OpenMP-like team sized by default to all N usable vCPUs: 2N busy threads on N,
whatever N is; the README's caption names this command) is watched by `oversub watch PID`
inside a tmux pane of its own; once the view has shown a few intervals, the pane is read
back with its colours (`capture-pane -e`), rich turns that screen into an SVG
(`Console(record=True)`, `save_svg`), and headless Chromium renders the SVG to a PNG.
Needs tmux and chromium (the make target installs them like `make test-html`); rich comes
with oversub. Every process it starts is stopped before it returns, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 100
"""Columns of the pane: the width the README's readers see the tables at."""
HEIGHT = 42
WAIT_S = 90.0
"""Bound on every wait for the view (it appears within seconds)."""
SETTLE_INTERVALS = 6
"""Intervals the view shows before the picture is taken (the sparkline has some history)."""
MAX_BYTES = 150_000
_SCRIPT = Path(sys.executable).with_name("oversub")
OVERSUB = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "oversub"]
"""The venv's `oversub` console script, as a reader types it (the root's row then reads
`oversub stress ...`, not `python -m oversub stress ...`)."""
STRESS = ["--procs", "2"]
"""The watched workload's options: `oversub stress --procs 2`, as the README's caption says."""
HEADLESS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--hide-scrollbars",
]


def _tmux(server: str, *args: str) -> str:
    done = subprocess.run(
        ["tmux", "-L", server, *args], capture_output=True, text=True, timeout=30, check=False
    )
    return done.stdout


def capture_watch() -> str:
    """The screen of a live `oversub watch` of an oversubscribed stress tree, with colours."""
    from oversub.core.pools import is_thread_var

    # The team's size is its default (every usable vCPU): a thread variable exported in the
    # shell that runs this (`eval "$(oversub recommend ...)"`) would size it to the fix.
    default_sized = {k: v for k, v in os.environ.items() if not is_thread_var(k)}
    stress = subprocess.Popen(
        [*OVERSUB, "stress", *STRESS, "--seconds", "60"],
        env=default_sized,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = f"oversub-docs-{uuid.uuid4().hex[:8]}"
    watch = [*OVERSUB, "watch", str(stress.pid), "--duration", "50"]
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("COLUMNS", None)
    try:
        time.sleep(1.0)  # the workers exist before the first sample
        tmux = ["tmux", "-L", server, "-f", "/dev/null"]
        shell = ["sh", "-c", " ".join(watch) + "; sleep 600"]
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", "t", "-x", str(WIDTH), "-y", str(HEIGHT), *shell],
            check=True,
            timeout=30,
            env=env,
        )
        deadline = time.monotonic() + WAIT_S
        seen = 0
        while time.monotonic() < deadline:
            screen = _tmux(server, "capture-pane", "-p", "-t", "t")
            if "OVERSUBSCRIBED" in screen:
                seen += 1
                if seen > SETTLE_INTERVALS * 5:  # polled every 0.2 s, 1 s intervals
                    return _tmux(server, "capture-pane", "-e", "-p", "-t", "t")
            time.sleep(0.2)
        raise SystemExit(f"docs_images: no oversubscribed view within {WAIT_S:.0f} s:\n{screen}")
    finally:
        _tmux(server, "kill-server")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stress.pid, signal.SIGTERM)
        stress.wait(timeout=30)


def to_svg(screen: str, title: str) -> str:
    """The captured screen as rich's SVG, without its web-font import (drawn offline)."""
    from rich.console import Console
    from rich.text import Text

    lines = screen.rstrip().splitlines()
    console = Console(
        record=True,
        width=WIDTH,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
    )
    console.print(Text.from_ansi("\n".join(lines)), crop=True)
    svg = console.export_svg(title=title)
    return re.sub(r"@font-face\s*\{[^}]*\}", "", svg)


def to_png(svg: str, png: Path) -> None:
    """Render the SVG at its own size in headless Chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("docs_images: chromium is not installed (make docs-images installs it)")
    box = re.search(r'viewBox="0 0 ([0-9.]+) ([0-9.]+)"', svg)
    if box is None:
        raise SystemExit("docs_images: the SVG has no viewBox")
    width, height = (int(float(v) + 0.999) for v in box.groups())
    with tempfile.TemporaryDirectory(prefix="oversub-docs-") as tmp:
        source = Path(tmp, "watch.svg")
        source.write_text(svg, "utf-8")
        done = subprocess.run(
            [
                chromium,
                *HEADLESS,
                f"--user-data-dir={tmp}/profile",
                f"--window-size={width},{height}",
                f"--screenshot={png}",
                source.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0 or not png.exists():
        raise SystemExit(f"docs_images: chromium failed: {done.stderr[-2000:]}")


def _rgb_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit("docs_images: chromium wrote no PNG")
    pos, idat = 8, b""
    width = height = depth = color = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    if depth != 8 or color not in (2, 6):
        raise SystemExit(f"docs_images: unexpected PNG (depth {depth}, colour type {color})")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        kind_ = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            if kind_ == 1:
                line[i] = (line[i] + a) & 255
            elif kind_ == 2:
                line[i] = (line[i] + b) & 255
            elif kind_ == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind_ == 4:
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line) if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def shrink(data: bytes) -> bytes:
    """The screenshot as a 256-colour PNG: the 256 most frequent colours, every other pixel
    (anti-aliased text edges, about 1 % of a terminal picture) mapped to its nearest one. A
    third of the raw size, and it compresses far better than Chromium's RGB."""
    width, height, rows = _rgb_rows(data)
    counts: Counter[bytes] = Counter(row[i : i + 3] for row in rows for i in range(0, len(row), 3))
    palette = [color for color, _ in counts.most_common(256)]
    index = {color: n for n, color in enumerate(palette)}

    def nearest(color: bytes) -> int:
        return min(
            range(len(palette)),
            key=lambda n: sum((x - y) ** 2 for x, y in zip(palette[n], color, strict=True)),
        )

    for color in counts:
        if color not in index:
            index[color] = nearest(color)
    raw = b"".join(
        b"\x00" + bytes(index[row[i : i + 3]] for i in range(0, len(row), 3)) for row in rows
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"PLTE", b"".join(palette)),
            _chunk(b"IDAT", zlib.compress(raw, 9)),
            _chunk(b"IEND", b""),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "watch.png")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("docs_images: tmux is not installed (make docs-images installs it)")
    screen = capture_watch()
    svg = to_svg(screen, f"oversub watch PID, on oversub stress {' '.join(STRESS)}")
    png: Path = args.out
    new = png.with_name(f".tmp.{png.name}")  # chromium picks the format by the suffix
    to_png(svg, new)
    new.write_bytes(shrink(new.read_bytes()))
    size = new.stat().st_size
    new.replace(png)
    print(f"docs_images: wrote {png} ({size:,} bytes)")
    if size > MAX_BYTES:
        print(f"docs_images: {png} is over {MAX_BYTES:,} bytes", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
