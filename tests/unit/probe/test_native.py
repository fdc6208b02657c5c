"""Pool libraries from maps and thread variables from environ, on fake and real /proc."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oversub.core import pools
from oversub.probe import native
from tests.support.fake_proc import FakeProc, deny_open, maps_text


def read_pools(pid: int, root: str = "/") -> tuple[str, ...] | None:
    """The pools of `pid`'s maps as the sampler finds them; None when maps is unreadable."""
    maps = native.read_maps(pid, root)
    return None if maps is None else native.pools_from_maps(maps)


SECRET_ENV = {
    "SECRET": "hunter2-do-not-leak",
    "AWS_SECRET_ACCESS_KEY": "AKIAxxxxxxxxleakme",
    "PATH": "/usr/bin",
    "OMP_NUM_THREADS": "4",
    "MKL_DYNAMIC": "FALSE",
    "OPENBLAS_NUM_THREADS": "2",
    # Thread names must match at the start of an entry, not inside a value or a longer name.
    "NOT_OMP_NUM_THREADS": "9",
    "HINT": "OMP_NUM_THREADS=99",
}


def test_maps_classification_dedupes_and_orders_by_pool_kinds(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    libs = (
        "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
        "/venv/lib/python3.11/site-packages/scipy_openblas64/lib/libscipy_openblas64_-ff651d7f.so",
        "/venv/lib/python3.11/site-packages/numpy.libs/libgomp-a34b3233.so.1",
        "/opt/intel/lib/libmkl_rt.so.2",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/venv/lib/python3.11/site-packages/torch/lib/libgomp-a34b3233.so.1",
    )
    fake.add_process(10, 1, libraries=libs)
    assert read_pools(10, root=str(tmp_path)) == ("libgomp", "openblas", "mkl", "torch")


def test_maps_without_pools_is_empty_not_unknown(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    fake.add_process(10, 1, libraries=("/usr/lib/libc.so.6",))
    assert read_pools(10, root=str(tmp_path)) == ()


def test_deleted_library_still_counts() -> None:
    maps = maps_text(["/tmp/libiomp5.so"]).replace("libiomp5.so", "libiomp5.so (deleted)")
    assert native.pools_from_maps(maps.encode()) == ("libiomp5",)


def test_a_path_with_spaces_and_pseudo_paths_in_maps() -> None:
    """The path is what follows a line's first " /", whatever it holds; "[heap]" and
    anonymous memory name no file."""
    maps = maps_text(["/opt/my libs/x86 64/libgomp.so.1", "/usr/lib/libc.so.6"]) + (
        "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n"
        "55d000000000-55d000021000 rw-p 00000000 00:00 0          [heap]\n"
        "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0          [stack]\n"
    )
    assert native.pools_from_maps(maps.encode()) == ("libgomp",)


def test_the_names_classified_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process chooses the names it maps: the per-name cache does not grow without end."""
    monkeypatch.setattr(native, "_POOL_OF", {})
    maps = maps_text([f"/tmp/lib{i}.so" for i in range(native._POOL_OF_MAX + 10)])
    assert native.pools_from_maps(maps.encode()) == ()
    assert 0 < len(native._POOL_OF) <= native._POOL_OF_MAX
    assert native.pools_from_maps(maps_text(["/x/libmkl_rt.so.2"]).encode()) == ("mkl",)


def test_unreadable_maps_and_missing_process_are_unknown(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    fake.add_process(10, 1)
    (tmp_path / "proc" / "10" / "maps").unlink()
    (tmp_path / "proc" / "10" / "maps").mkdir()  # reading a directory fails like EACCES would
    assert read_pools(10, root=str(tmp_path)) is None
    assert read_pools(99, root=str(tmp_path)) is None


def test_environ_keeps_only_thread_variables(tmp_path: Path) -> None:
    fake = FakeProc(tmp_path)
    fake.add_process(10, 1, environ=SECRET_ENV)
    env = native.read_thread_env(10, root=str(tmp_path))
    assert env == {"OMP_NUM_THREADS": "4", "MKL_DYNAMIC": "FALSE", "OPENBLAS_NUM_THREADS": "2"}
    assert env is not None and all(pools.is_thread_var(name) for name in env)
    text = repr(env)
    for secret in ("hunter2", "AKIA", "SECRET", "/usr/bin", "99", "NOT_OMP"):
        assert secret not in text


def test_environ_first_and_last_entries_and_empty_value() -> None:
    block = b"OMP_NUM_THREADS=1\0A=b\0KMP_AFFINITY=\0TBB_X=y"
    assert native.thread_env_from_bytes(block) == {
        "OMP_NUM_THREADS": "1",
        "KMP_AFFINITY": "",
        "TBB_X": "y",
    }


def test_unreadable_environ_is_unknown_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeProc(tmp_path)
    fake.add_process(10, 1, environ={"OMP_NUM_THREADS": "2"})
    deny_open(monkeypatch, tmp_path / "proc" / "10" / "environ")
    # Refused is raised (the sampler says why pools are unknown); gone is just unknown.
    with pytest.raises(PermissionError):
        native.read_thread_env(10, root=str(tmp_path))
    assert native.read_thread_env(11, root=str(tmp_path)) is None  # no such process


@pytest.mark.integration
def test_real_process_environ_and_maps(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "3", "SECRET_TOKEN": "leak-me-not"}
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"  # exec'd
        got = native.read_thread_env(child.pid)
        assert got is not None and got["OMP_NUM_THREADS"] == "3"
        assert "leak-me-not" not in repr(got)
        assert read_pools(child.pid) is not None
    finally:
        child.kill()
        child.wait()


def test_pool_mapped_beyond_the_first_read_of_maps(tmp_path: Path) -> None:
    # The kernel hands out /proc/PID/maps about a page per read(), so a short read is not the
    # end of the file; reading one buffer only once missed torch's libgomp. A FIFO gives the
    # same short reads deterministically.
    import threading
    import time

    maps = tmp_path / "proc" / "42" / "maps"
    maps.parent.mkdir(parents=True)
    os.mkfifo(maps)
    filler = "".join(
        f"7f00{i:08x}-7f00{i + 1:08x} r--p 00000000 fe:01 {i} /usr/lib/libfiller{i}.so\n"
        for i in range(60)
    )

    def write() -> None:
        with open(maps, "w") as fifo:
            fifo.write(filler)
            fifo.flush()
            time.sleep(0.1)  # the reader gets the first chunk alone
            fifo.write(maps_text(["/usr/lib/libgomp-a34b3233.so.1"]))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert read_pools(42, root=str(tmp_path)) == ("libgomp",)
    finally:
        writer.join(timeout=10)


def test_thread_variables_are_bounded() -> None:
    # A 1 MB OMP_* value gave 14.5 MB of NDJSON in 3 s: names, values and count are bounded.
    environ = b"\0".join(
        [
            b"OMP_PLACES=" + b"{0:4}," * 200_000,
            b"OMP_" + b"X" * 500 + b"=1",
            *(f"KMP_EXTRA_{i}=1".encode() for i in range(100)),
            b"OPENBLAS_NUM_THREADS=8",  # sizes a pool: kept even after 100 others
        ]
    )
    env = native.thread_env_from_bytes(environ)
    assert len(env) == native.THREAD_ENV_MAX_VARS
    assert env["OPENBLAS_NUM_THREADS"] == "8"
    places = env["OMP_PLACES"]
    assert len(places) == native.THREAD_ENV_VALUE_MAX and places.endswith("…")
    assert all(len(name) <= native.THREAD_ENV_NAME_MAX for name in env)
    assert "OMP_" + "X" * (native.THREAD_ENV_NAME_MAX - 5) + "…" in env
