"""`oversub run -- CMD` and `check --apply -- CMD`: start CMD with the cure, sample it as
`check` does, and read back what the hook did in each process.

The cure (`analysis.cureplan`): the thread variables and OVERSUB_RUN_PLAN in CMD's environment,
and the hook's directory first on PYTHONPATH. Each hooked process writes a record into a
private directory made here (mode 0700) and removed at the end; the records are read as
hostile input (bounded, regular files only, checked field by field by
`analysis.cured.parse_record`). CMD runs, and is stopped, exactly as `check -- CMD` runs it
(`run.checking.run_command`: the one loop).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from oversub.analysis.cured import MAX_RECORD_BYTES, Watch, parse_record
from oversub.analysis.cureplan import environment
from oversub.core.cures import Cure, HookRecord

if TYPE_CHECKING:
    from oversub.core.model import Budget
    from oversub.core.results import CheckOutcome
    from oversub.run.checking import Progress
    from oversub.run.session import SessionOptions

MAX_RECORDS = 10_000
"""Records read back at most (one per Python process of the tree)."""


def hook_directory() -> str:
    """The directory whose `sitecustomize.py` loads the hook (oversub/hook/)."""
    from oversub.hook import DIRECTORY

    return DIRECTORY


class Cured(NamedTuple):
    """A run with the cure: check's outcome, the hooks' records and what sampling saw."""

    outcome: CheckOutcome
    records: tuple[HookRecord, ...]
    watch: Watch


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """While inside, this process's environment is `env` (which CMD inherits); the previous
    one is restored on exit."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cured(
    argv: list[str],
    cure: Cure,
    budget: Budget,
    session: SessionOptions,
    progress: Progress,
    *,
    timeout: float | None = None,
    grace: float = 3.0,
) -> Cured:
    """Run `argv` with the cure, sampled and stopped as `check -- CMD` is."""
    from oversub.run.checking import Tapped, run_command

    watch = Watch()
    directory = tempfile.mkdtemp(prefix="oversub-run-")
    try:
        env = environment(
            cure, os.environ, hook_dir=hook_directory(), top=os.getpid(), directory=directory
        )
        with _environment(env):
            watched = Tapped(progress, lambda iv, a, _n, _s: watch.add(iv, a.verdict))
            outcome = run_command(argv, budget, session, watched, timeout=timeout, grace=grace)
        records = read_records(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return Cured(outcome, records, watch)


def read_records(directory: str) -> tuple[HookRecord, ...]:
    """The records in `directory`: regular files named PID.json, at most MAX_RECORDS, each
    read up to its bound without following a link or blocking on a FIFO."""
    found: list[HookRecord] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return ()
    for name in names:
        if len(found) >= MAX_RECORDS:
            break
        if not name.endswith(".json") or not name[:-5].isdigit():
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            data = os.read(fd, MAX_RECORD_BYTES + 1)
        except OSError:
            continue
        finally:
            os.close(fd)
        record = parse_record(data)
        if record is not None and record.pid == int(name[:-5]):
            found.append(record)
    return tuple(found)


_PROBE = """
import importlib.util, json, sys
try:
    from importlib.metadata import packages_distributions, version
    dists = packages_distributions()
except Exception:
    dists, version = {}, None
found = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is None:
        continue
    found[name] = None
    for dist in dists.get(name, []):
        try:
            found[name] = version(dist)
            break
        except Exception:
            pass
print(json.dumps(found))
"""
"""Which of the modules an interpreter has installed, and their versions: found without
importing them (importlib.util.find_spec and the distributions' metadata)."""


def installed_modules(interpreter: str, modules: list[str]) -> dict[str, str | None]:
    """Module -> version (None: unknown) for each of `modules` `interpreter` can import;
    empty when the interpreter cannot be run."""
    import json
    import subprocess

    try:
        done = subprocess.run(
            [interpreter, "-c", _PROBE, *modules],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    try:
        found = json.loads(done.stdout[-65536:].decode("utf-8", "replace"))
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {
        m: (v[:40] if isinstance(v, str) else None)
        for m, v in found.items()
        if m in modules and (v is None or isinstance(v, str))
    }
