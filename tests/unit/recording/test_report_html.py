"""`oversub report --format html` and `--format markdown`: self-contained, escaped, and drawn
by a real browser.

The unit tests read the page as text: no script, no request, every recorded string escaped.
The `html` tests (`make test-html`, which installs Debian's chromium) render a real
oversubscribed run's report in headless Chromium, check that the screenshot holds the
charts (pixels of each series' colour) and that no request left the page, even when the
recorded process names are HTML that would load things.
"""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import zlib
from pathlib import Path

import pytest

from oversub.core.results import Interval
from oversub.recording import ReportFormat, render_report
from oversub.recording.replay import parse, reassess
from tests.support.builders import oversubscribed_run, recording_lines
from tests.support.harness import oversub as run_oversub
from tests.support.harness import stress

HOSTILE = '<script>alert(1)</script><img src="http://127.0.0.1:{port}/name.png">'
HOSTILE_ENV = "<script>document.title='x'</script>\x1b[2J\n::error::forged"


def hostile_run(port: int = 9) -> list[Interval]:
    """An oversubscribed run whose processes are named and configured with HTML."""
    out = []
    for iv in oversubscribed_run(4):
        procs = tuple(
            p._replace(
                name=HOSTILE.format(port=port),
                # The first process has no command line: the table names it by its name.
                cmdline=""
                if i == 0
                else f'python <link rel="stylesheet" href="http://127.0.0.1:{port}/c.css">',
                thread_env={"OMP_NUM_THREADS": HOSTILE_ENV},
            )
            for i, p in enumerate(iv.processes)
        )
        out.append(iv._replace(processes=procs))
    return out


def page(intervals: list[Interval], fmt: ReportFormat = ReportFormat.HTML) -> str:
    return render_report(reassess(parse(recording_lines(intervals))), fmt)


def test_no_recorded_string_reaches_the_page_unescaped() -> None:
    html = page(hostile_run())
    assert "<script" not in html.lower() and "<img" not in html and "<link" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text
    assert "&lt;script&gt;document.title=&#x27;x&#x27;&lt;/script&gt;\\x1b[2J\\n::error::" in html
    # Self-contained: no attribute that loads anything, no CSS import; the only URL is the
    # SVG namespace (a name, never fetched); a CSP forbids any request and any script. The
    # only links are the verdict strip's to the episodes' cards, in the page itself.
    tags = " ".join(re.findall(r"<[^>]*>", html))  # the markup; recorded text is outside it
    assert not re.search(r"\s(src|srcset|action)\s*=", tags)
    hrefs = re.findall(r"\shref\s*=\s*(\S+?)[\s>]", tags)
    assert hrefs and all(re.fullmatch(r'"#episode-[0-9]+"', h) for h in hrefs)
    assert "@import" not in html and "url(" not in html
    assert set(re.findall(r"https?://[^\s\"'<>]+", tags)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in html
    assert html.count("<svg") == 3


def test_the_page_names_processes_as_watch_does() -> None:
    # Issue 39: the table showed "python" over "-c from multiprocessing.spawn…" where watch
    # said "spawn worker", and a console script's interpreter path for the root.
    spawn = "/venv/bin/python -c from multiprocessing.spawn import spawn_main; spawn_main(5)"
    root = "/venv/bin/python /venv/bin/oversub stress --procs 3"
    out = []
    for iv in oversubscribed_run(3):
        procs = tuple(
            p._replace(cmdline={100: root, 150: "python train.py"}.get(p.pid, spawn))
            for p in iv.processes
        )
        out.append(iv._replace(processes=procs))
    html = page(out)
    assert html.count("<td>spawn worker<div") == 3, html
    assert "<td>oversub stress --procs 3<div" in html, html


def test_a_long_run_keeps_the_page_small() -> None:
    html = page(oversubscribed_run(3600, dt=1.0))
    assert len(html.encode()) < 150_000
    for points in re.findall(r'<polyline[^>]* points="([^"]*)"', html):
        assert len(points.split()) <= 480
    assert html.count('<rect class="band"') <= 480


def test_markdown_has_a_mermaid_chart_and_no_raw_html() -> None:
    text = page(hostile_run(), ReportFormat.MARKDOWN)
    assert "<script" not in text.lower() and "<img" not in text
    chart = text[text.index("```mermaid") :].split("```", 2)[1]
    assert chart.splitlines()[1] == "xychart-beta"
    lines = [line.strip() for line in chart.splitlines() if line.strip().startswith("line [")]
    assert len(lines) == 2  # demand, then N
    assert lines[1] == "line [" + ", ".join(["2.00"] * 4) + "]"


def test_a_long_run_is_sampled_to_a_readable_mermaid_chart() -> None:
    text = page(oversubscribed_run(500), ReportFormat.MARKDOWN)
    demand = next(line for line in text.splitlines() if line.strip().startswith("line ["))
    assert demand.count(",") + 1 <= 60


# -- a real browser ------------------------------------------------------------------------


def _png_pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(width, height, RGB pixels) of an 8-bit RGB or RGBA, non-interlaced PNG (Chromium's)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = depth = color = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and color in (2, 6), (depth, color)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    pixels = [tuple(row[i : i + 3]) for row in rows for i in range(0, stride, bpp)]
    return width, height, pixels  # type: ignore[return-value]


def _near(pixel: tuple[int, int, int], hex_color: str, tolerance: int = 40) -> bool:
    rgb = bytes.fromhex(hex_color.lstrip("#"))
    return sum(abs(a - b) for a, b in zip(pixel, rgb, strict=True)) <= tolerance


def _screenshot(html: Path, png: Path, profile: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (make test-html installs it)")
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--window-size=1100,1900",
            f"--screenshot={png}",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]


@pytest.mark.html
@pytest.mark.integration
def test_a_real_oversubscribed_run_renders_in_chromium(tmp_path: Path) -> None:
    from oversub.recording.html import BUDGET, DELAY, DEMAND, VERDICT_COLOR

    rec = tmp_path / "run.ndjson"
    # stress threads are a warning (no costly finding): the gate that fails on them is
    # --fail-on oversubscribed.
    flags = ["--fail-on", "oversubscribed", "--interval", "0.5", "--warmup", "0.5"]
    flags += ["--record", str(rec)]
    ran = run_oversub(["check", *flags, "--", *stress(1, 3, 5)], pin=True)
    assert ran.returncode == 1, ran.stderr
    html = tmp_path / "report.html"
    made = run_oversub(["report", str(rec), "--format", "html", "-o", str(html)])
    assert made.returncode == 0, made.stderr
    png = tmp_path / "report.png"
    _screenshot(html, png, tmp_path / "profile")
    width, height, pixels = _png_pixels(png.read_bytes())
    assert (width, height) == (1100, 1900)
    assert len(set(pixels)) > 50, "a blank or one-colour page"
    for what, color, least in [
        ("demand line", DEMAND, 300),
        ("N line", BUDGET, 100),
        ("delay ratio line", DELAY, 300),
        ("oversubscribed banner and verdict band", VERDICT_COLOR["oversubscribed"], 5000),
    ]:
        found = sum(1 for p in pixels if _near(p, color))
        assert found >= least, f"{what}: {found} pixels of {color}"


@pytest.mark.html
def test_the_page_makes_no_request_even_for_hostile_names(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    connections: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connections.append(conn)
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        html = tmp_path / "hostile.html"
        html.write_text(page(hostile_run(port)), encoding="utf-8")
        # Control: the same markup unescaped, in a page without the CSP, does reach the
        # server, so silence below means the report made no request.
        control = tmp_path / "control.html"
        # (Without the script: an alert() would hold headless Chromium until its timeout.)
        control.write_text(HOSTILE.format(port=port).split("</script>")[1], encoding="utf-8")
        _screenshot(control, tmp_path / "control.png", tmp_path / "profile1")
        assert connections, "the control page made no request: the check proves nothing"
        connections.clear()
        _screenshot(html, tmp_path / "hostile.png", tmp_path / "profile2")
        assert connections == []
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
