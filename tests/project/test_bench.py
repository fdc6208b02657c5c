"""The benchmark's own checks can fail: the start-up bench's probe of the modules a command
imports reads them at `os._exit` (oversub's way out, after which nothing runs: it used to
print after it and always said "none")."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import pytest

from tests.support.harness import ROOT


def _load(name: str) -> ModuleType:
    """bench/NAME.py as a module (bench/ is a folder of scripts, not a package)."""
    qualified = f"oversub_bench_{name}"
    spec = importlib.util.spec_from_file_location(qualified, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


startup = _load("startup")


def test_the_module_probe_reports_what_a_command_imported() -> None:
    # The live view renders through rich: the probe must say so.
    args = ("watch", str(os.getpid()), "--duration", "0.3", "--interval", "0.1")
    assert startup.loaded_modules((*args, "--format", "live")) == ("rich",)
    # Every command imports click; `cpus` no longer imports rich (start-up goal).
    assert startup.loaded_modules(("cpus",), names=("click", "rich")) == ("click",)
    assert startup.loaded_modules(("cpus", "--format", "json")) == ()


def test_the_module_probe_that_hears_nothing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_PROBE", "import sys")  # runs, reports nothing
    with pytest.raises(RuntimeError, match="reported nothing"):
        startup.loaded_modules(("cpus",))


def test_the_terminal_rows_run_on_a_terminal() -> None:
    """The rows `to a terminal` give the command a tty of 80 columns."""
    with startup.terminal() as term:
        assert os.isatty(term.slave) and os.get_terminal_size(term.slave).columns == 80
        assert startup.loaded_modules(("cpus",), stdout=term.slave) == ()
