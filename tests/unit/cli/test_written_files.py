"""Every file oversub writes (docs/security.md, "Files oversub writes"): temporary files
created exclusively, one link policy (followed once up front, the link stays; a loop, a
dangling chain or another user's planted link refused), the final rename checked before
anything runs, a full disk that skips a textfile write but never stops `serve`, and the
closing line of `check` stating the exit status really returned."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oversub.cli import serve
from oversub.cli.record.writer import Recorder, open_recorder, summary_record
from oversub.cli.writtenfiles import check_report_path, write_atomic
from oversub.core.errors import UsageError
from oversub.core.thresholds import Thresholds
from tests.support.builders import budget, oversubscribed_run, recording_lines
from tests.support.harness import OVERSUB, Spawner, wait_until

NOBODY = 65534
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (chown, a user to switch to)")


def _secret(tmp_path: Path) -> Path:
    """A root-owned 0600 file outside the directory oversub writes to."""
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    return secret


# ------------------------------------------------------------ 6: exclusive temporary files


def test_textfile_does_not_follow_a_link_planted_at_its_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # serve wrote DIR/.oversub.prom.<PID>.tmp, following a link a user of DIR planted there:
    # root's exporter overwrote the file it named.
    secret = _secret(tmp_path)
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    planted = textdir / f".oversub.prom.{os.getpid()}.tmp"
    planted.symlink_to(secret)
    monkeypatch.setattr(serve, "exposition", lambda _state: b"oversub_up 1\n")
    path = check_report_path("--textfile", textdir / "oversub.prom")
    serve.write_textfile(path, None)  # type: ignore[arg-type]  # exposition is replaced
    assert secret.read_text() == "root's own\n"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert (textdir / "oversub.prom").read_bytes() == b"oversub_up 1\n"
    assert planted.is_symlink()  # left alone
    assert sorted(p.name for p in textdir.iterdir()) == [planted.name, "oversub.prom"]


def test_a_report_keeps_the_old_files_mode_or_the_umasks(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text("x")
    old.chmod(0o640)
    write_atomic("--json", check_report_path("--json", old), "{}\n")
    assert old.stat().st_mode & 0o777 == 0o640
    umask = os.umask(0o022)
    try:
        new = check_report_path("--json", tmp_path / "new.json")
        write_atomic("--json", new, "{}\n")
    finally:
        os.umask(umask)
    assert new.stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------- 8: the link policy


@pytest.mark.parametrize("shape", ["loop", "dangling"])
def test_a_link_loop_or_a_dangling_chain_is_a_usage_error_up_front(
    tmp_path: Path, shape: str
) -> None:
    # Two links naming each other: `-o`/`--json` replaced the link and reported success.
    link = tmp_path / "a.json"
    if shape == "loop":
        link.symlink_to(tmp_path / "b.json")
        (tmp_path / "b.json").symlink_to(link)
    else:
        link.symlink_to(tmp_path / "c.json")
        (tmp_path / "c.json").symlink_to(tmp_path / "nothing" / "d.json")
    recording = tmp_path / "run.ndjson"
    recording.write_text("\n".join(recording_lines(oversubscribed_run(2))) + "\n")
    run = subprocess.run(
        [*OVERSUB, "report", str(recording), "--format", "json", "-o", str(link)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"oversub: error: -o {link}: "), line
    assert ("loop" if shape == "loop" else "does not exist") in line
    assert link.is_symlink()


@needs_root
def test_a_link_planted_by_another_user_in_a_shared_directory_is_not_followed(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    secret = _secret(tmp_path)
    link = shared / "oversub.prom"
    link.symlink_to(secret)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(UsageError, match="belongs to uid 65534"):
        check_report_path("--textfile", link)
    os.lchown(shared, NOBODY, NOBODY)  # nobody's own directory: nobody's link is followed
    assert check_report_path("--textfile", link) == secret.resolve()


def _recorder(path: Path, max_bytes: int) -> Recorder:
    recorder = open_recorder(
        path,
        max_bytes / 1_000_000,
        mode="watch",
        pid=100,
        command=None,
        interval=0.5,
        budget=budget(2),
        thresholds=Thresholds(),
    )
    assert recorder.max_bytes == max_bytes
    return recorder


def test_record_through_a_link_keeps_the_link_when_it_is_coarsened(tmp_path: Path) -> None:
    # The first coarsening renamed a new file over the link: the link was gone, and the file
    # it named stayed incomplete.
    from oversub.analysis.summary import RunSummary
    from oversub.recording.replay import parse

    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "run.ndjson"
    target.write_text("")  # a link to nothing is refused (dangling)
    link = tmp_path / "latest.ndjson"
    link.symlink_to(target)
    intervals = oversubscribed_run(64)
    recorder = _recorder(link, 12_000)
    for iv in intervals:
        recorder.interval(iv, "2026-01-01T00:00:00.000Z")
    live = RunSummary(root_pid=100)
    for iv in intervals:
        live.add(iv)
    recorder.finish(summary_record(live.result(budget(2), Thresholds(), target_exited=True)))
    assert recorder.factor >= 4  # coarsened at least twice
    assert link.is_symlink() and link.resolve() == target.resolve()
    recording = parse(target.read_text().splitlines())
    assert recording.ending is not None  # complete: the summary is in the named file
    assert recording.intervals[-1].t1 == intervals[-1].t1
    assert sorted(p.name for p in target.parent.iterdir()) == ["run.ndjson"]


# ------------------------------------------------- 9: what the final rename needs, up front


def _as_nobody(work: Callable[[], object]) -> tuple[int, str]:
    """Run `work` with effective uid/gid 65534 (what the kernel's permission checks use):
    (0, or 2 for a UsageError with its text). The identity is switched in this process and
    switched back, not in a forked child: the test may run in a pytest-xdist worker, whose
    other threads a forked child would lack (a lock one of them held would never be freed)."""
    groups = os.getgroups()
    os.setgroups([])
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        work()
        return 0, ""
    except UsageError as exc:
        return 2, str(exc)
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory that another user can reach (pytest's tmp_path is under a 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="oversub-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@needs_root
def test_another_users_file_in_a_sticky_directory_is_refused_before_the_run(
    open_dir: Path,
) -> None:
    # `--json` naming another user's 0666 file in /tmp passed the up-front check, CMD ran to
    # the end, and the rename was refused: exit 3 after the whole run.
    sticky = open_dir / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    theirs = sticky / "r.json"
    theirs.write_text("root's report\n")
    theirs.chmod(0o666)
    code, text = _as_nobody(lambda: check_report_path("--json", theirs))
    assert code == 2, text
    assert "sticky directory" in text and str(theirs) in text
    mine = sticky / "mine.json"
    code, text = _as_nobody(lambda: write_atomic("--json", check_report_path("--json", mine), "x"))
    assert code == 0, text  # a new file, and one of its own, can be written there
    assert theirs.read_text() == "root's report\n"


# --------------------------------------------------- 7: a full textfile directory, serving on


@contextlib.contextmanager
def _serve_on_a_full_tmpfs(spawn: Spawner, port: int) -> Iterator[tuple[Any, Path]]:
    """`serve --textfile` on a 64 KiB tmpfs filled up, in a mount namespace of its own (the
    mount goes with it); the directory as seen from here (through /proc/PID/root)."""
    target = spawn([sys.executable, "-c", "import time; time.sleep(120)"])
    script = (
        "set -e; mount -t tmpfs -o size=64k oversub-test /mnt; "
        "dd if=/dev/zero of=/mnt/fill bs=4k 2>/dev/null || true; "
        f"exec {' '.join(OVERSUB)} serve --pid {target.pid} --port {port} "
        "--bind 127.0.0.1 --interval 0.2 --textfile /mnt"
    )
    proc = spawn(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield proc, Path(f"/proc/{proc.pid}/root/mnt")


@needs_root
@pytest.mark.integration
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_serve_skips_a_textfile_write_on_a_full_disk_and_goes_on(spawn: Spawner) -> None:
    # A textfile directory that filled for a moment made serve exit 3 and took /metrics down.
    from tests.system.test_serve import free_port, scrape

    port = free_port()
    with _serve_on_a_full_tmpfs(spawn, port) as (proc, mnt):
        stamps: set[str] = set()

        def served() -> bool:
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(OSError):
                for line in scrape(port).splitlines():
                    if line.startswith("oversub_last_sample_timestamp_seconds "):
                        stamps.add(line)
                return True
            return False

        # Three samples taken (each one tried the textfile) while the disk is full.
        wait_until(
            lambda: served() and len(stamps) >= 3,
            timeout=60,
            interval=0.1,
            what="/metrics while the disk is full",
        )
        wait_until(lambda: (mnt / "fill").exists(), timeout=30, what="the namespace's tmpfs")
        assert not (mnt / "oversub.prom").exists()
        (mnt / "fill").unlink()  # the disk has room again: the next sample writes the file
        wait_until(
            lambda: (mnt / "oversub.prom").exists(), timeout=30, what="the textfile, retried"
        )
        assert served()  # still serving
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err  # once, not every 0.2 s
    assert "cannot write /mnt/oversub.prom in /mnt" in warnings[0]
    assert "No space left on device" in warnings[0]
    assert "/mnt/oversub.prom is written again" in err


# ---------------------------------------- 10: the closing line states the exit status returned

FILLS_THE_DISK = """
import os, sys, time
time.sleep(1.0)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError:
    pass
time.sleep(1.5)
"""


@needs_root
@pytest.mark.integration
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_check_record_on_a_disk_that_fills_mid_run_says_exit_3(tmp_path: Path) -> None:
    # "pass: verdict ok (--fail-on oversubscribed), exit 0", then an error line, then exit 3.
    script = tmp_path / "fill.py"
    script.write_text(FILLS_THE_DISK)
    command = (
        "set -e; mount -t tmpfs -o size=64k oversub-test /mnt; "
        f"exec {' '.join(OVERSUB)} check --interval 0.1 --warmup 0 --record /mnt/run.ndjson "
        f"-- {sys.executable} {script} /mnt/fill"
    )
    run = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 3, run.stderr
    lines = run.stderr.splitlines()
    assert any("warning: cannot write --record /mnt/run.ndjson" in x for x in lines), run.stderr
    last = lines[-1]
    assert last.startswith("oversub check: error: verdict "), run.stderr
    assert last.endswith("but a file could not be written (above), exit 3"), run.stderr
    assert not any(x.startswith("oversub check: pass") for x in lines), run.stderr


def test_closing_line_of_a_static_check_with_a_good_file_is_unchanged(tmp_path: Path) -> None:
    run = subprocess.run(
        [*OVERSUB, "check", "-M", "1", "-T", "1", "--cpus", "2", "--json", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[-1].startswith("oversub check: pass: verdict ok")
    assert json.loads((tmp_path / "r").read_text())["exit_status"] == 0


def test_recorder_writes_are_unchanged_for_a_plain_file(tmp_path: Path) -> None:
    path = tmp_path / "run.ndjson"
    recorder = _recorder(path, 10_000_000)
    recorder.close()
    assert json.loads(path.read_text().splitlines()[0])["type"] == "header"
