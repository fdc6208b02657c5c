"""`oversub doctor`'s text and JSON, from model objects: every key documented, every string
from the environment under test escaped, every row true for what was measured."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from oversub.analysis.selfsizing import absent_row, row
from oversub.core.checkups import (
    CHECKUPS_BY_KEY,
    Confined,
    DoctorReport,
    Measurement,
    RunKind,
    RunSpec,
    SeenBudget,
    Status,
)
from oversub.render import DoctorFormat, render_doctor
from oversub.render.doctorview import doctor_dict, doctor_text

CLI_DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"

HOST = SeenBudget(2, 2, None, 2)
ONE_CPU = SeenBudget(2, 1, None, 1)
QUOTA_1 = SeenBudget(2, 2, 1.0, 1)

BUDGET = Confined(RunSpec(RunKind.BUDGET, None, 1.0), True, "/oversub-doctor-1-budget", 1, None)
HOST_RUN = Confined(RunSpec(RunKind.HOST, None, None), True, None, None, None)
AFFINITY_RUN = Confined(RunSpec(RunKind.AFFINITY, (0,), None), True, None, None, None)


def _m(
    kind: RunKind, budget: SeenBudget, started: dict[str, int], busy: int | None = None
) -> Measurement:
    return Measurement(
        kind, Status.MEASURED, budget, started, 0, busy, {"x()": "2"}, "1.0", None, 0.5
    )


def report(
    *, version: str = "2.4.6", runs: tuple[Confined, ...] = (BUDGET, HOST_RUN, AFFINITY_RUN)
) -> DoctorReport:
    numpy = CHECKUPS_BY_KEY["numpy"]
    polars = CHECKUPS_BY_KEY["polars"]
    torch = CHECKUPS_BY_KEY["torch"]
    rows = (
        row(
            numpy,
            version,
            [
                _m(RunKind.BUDGET, QUOTA_1, {"openblas": 1}, 2),
                _m(RunKind.HOST, HOST, {"openblas": 1}),
                _m(RunKind.AFFINITY, ONE_CPU, {}),
            ],
            RunKind.BUDGET,
            vcpus=1,
            procs=1,
            env={},
        ),
        row(
            polars,
            "2.1.0",
            [
                _m(RunKind.BUDGET, QUOTA_1, {"polars": 3, "jemalloc": 3}, 1),
                _m(RunKind.HOST, HOST, {"polars": 5, "jemalloc": 4}),
                _m(RunKind.AFFINITY, ONE_CPU, {"polars": 3, "jemalloc": 1}),
            ],
            RunKind.BUDGET,
            vcpus=1,
            procs=1,
            env={},
        ),
        row(
            torch,
            None,
            [
                Measurement(
                    RunKind.BUDGET, Status.CRASHED, error="killed by SIGSEGV: \x1b[31mboom"
                ),
                Measurement(RunKind.HOST, Status.TIMED_OUT, error="not done within 60 s"),
                Measurement(RunKind.AFFINITY, Status.FAILED, error="import: ImportError: no"),
            ],
            RunKind.BUDGET,
            vcpus=1,
            procs=1,
            env={},
        ),
        absent_row(CHECKUPS_BY_KEY["duckdb"], 1, 1),
    )
    return DoctorReport(
        "/venv/bin/python", "3.11.7", "/venv", runs, 1, 1, 1, rows, {"OMP_NUM_THREADS": "4"}, ()
    )


def test_text_has_a_row_per_installed_runtime_and_says_what_it_measured() -> None:
    text = doctor_text(report())
    lines = text.splitlines()
    assert lines[0] == "oversub doctor: Python 3.11.7 at /venv/bin/python"
    assert "a CPU quota of 1 CPU (cgroup v1 /oversub-doctor-1-budget): N = 1" in lines[1]
    header = next(line for line in lines if line.startswith("runtime"))
    assert "host N=2" in header and "at M=1 on N=1" in header
    numpy = next(line for line in lines if line.startswith("numpy"))
    assert re.search(
        r"2\.4\.6\s+1 \(openblas\)\s+1\s+affinity, ignores the quota\s+yes: 1 x 2 > 1", numpy
    )
    assert numpy.rstrip().endswith("OPENBLAS_NUM_THREADS=1")
    polars = next(line for line in lines if line.startswith("polars"))
    assert re.search(r"3 \(polars\)\s+5\s+its N \(affinity and quota\)\s+no: 1 x 1 <= 1", polars)
    torch = next(line for line in lines if line.startswith("torch"))
    assert re.search(r"\?\s+crashed\s+timed out\s+not measured\s+-\s+OMP_NUM_THREADS=1", torch)
    assert "ignore a CPU quota (measured): numpy" in text
    assert "follow a CPU quota (measured): polars" in text
    assert "oversubscribe at M = 1: numpy: set the knob of each to T = 1" in text
    assert "torch (budget): crashed: killed by SIGSEGV: \\x1b[31mboom" in text
    assert "torch (host): timed out: not done within 60 s" in text
    assert "not installed: duckdb" in text
    assert "; affinity: affinity to CPU 0" in text  # a CPU's id, not a count
    assert "inherited OMP_NUM_THREADS=4" in text
    assert "\x1b" not in text


def test_text_escapes_what_the_environment_wrote() -> None:
    text = doctor_text(report(version="1.0\x1b]0;pwned\x07\n"))
    assert "\x1b" not in text and "\x07" not in text
    assert "1.0\\x1b]0;pwned\\x07\\n" in text


def test_text_says_when_a_quota_could_not_be_applied() -> None:
    refused = Confined(
        RunSpec(RunKind.BUDGET, None, 1.5),
        False,
        None,
        1,
        "creating a cgroup under /sys/fs/cgroup/cpu needs root",
    )
    text = doctor_text(report(runs=(refused, HOST_RUN, AFFINITY_RUN)))
    assert "a CPU quota of 1.5 CPUs NOT APPLIED" in text
    assert "not applied: budget: creating a cgroup under /sys/fs/cgroup/cpu needs root" in text
    assert "whether a runtime reads one is not measured" in text


def _paths(value: Any, prefix: str) -> set[str]:
    """Every key of a JSON value as a documented path: `runs[].kind`, `python.version`."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            found.add(path)
            if key not in ("started", "reported", "variables", "thread_env"):  # open maps
                found |= _paths(inner, path)
    elif isinstance(value, list):
        for item in value:
            found |= _paths(item, f"{prefix}[]")
    return found


def documented_keys() -> set[str]:
    text = CLI_DOC.read_text("utf-8")
    section = text[text.index("### `oversub doctor --format json`") :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    return set(re.findall(r"^\| `([a-z_\[\].]+)` \|", section, flags=re.MULTILINE))


def test_every_json_key_is_documented_and_every_documented_key_is_there() -> None:
    data = json.loads(render_doctor(report(), DoctorFormat.JSON))
    assert _paths(data, "") == documented_keys()


def test_json_keeps_every_measurement() -> None:
    data = doctor_dict(report())
    numpy = data["runtimes"][0]
    assert numpy["sized_from"] == "affinity" and numpy["ignores_quota"] is True
    assert [m["kind"] for m in numpy["measurements"]] == ["budget", "host", "affinity"]
    assert numpy["measurements"][0]["threads"] == 1 and numpy["measurements"][0]["busy"] == 2
    polars = data["runtimes"][1]
    assert polars["measurements"][1]["started"] == {"jemalloc": 4, "polars": 5}
    assert polars["measurements"][1]["threads"] == 5
    torch = data["runtimes"][2]
    assert torch["measurements"][0]["status"] == "crashed" and torch["threads"] is None
    duckdb = data["runtimes"][3]
    assert duckdb["installed"] is False and duckdb["measurements"] == []
    assert data["runs"][0] == {
        "kind": "budget",
        "affinity": None,
        "quota_cpus": 1.0,
        "applied": True,
        "cgroup": "/oversub-doctor-1-budget",
        "cgroup_version": 1,
        "note": None,
    }


def test_inside_a_container_the_inherited_quota_is_what_a_count_is_judged_against() -> None:
    container = SeenBudget(2, 2, 1.5, 1)
    container_one_cpu = SeenBudget(2, 1, 1.5, 1)
    runs = (
        HOST_RUN,
        AFFINITY_RUN,
        Confined(
            RunSpec(RunKind.QUOTA, None, 1.0),
            False,
            None,
            1,
            "cannot create a cgroup under /sys/fs/cgroup/cpu: Read-only file system",
        ),
    )
    numpy = row(
        CHECKUPS_BY_KEY["numpy"],
        "2.4.6",
        [
            _m(RunKind.HOST, container, {"openblas": 1}, 2),
            _m(RunKind.AFFINITY, container_one_cpu, {}),
            Measurement(RunKind.QUOTA, Status.NOT_RUN, error="read-only"),
        ],
        RunKind.HOST,
        vcpus=1,
        procs=1,
        env={},
    )
    text = doctor_text(DoctorReport("/p", "3.11.7", "/v", runs, 1, 1, 1, (numpy,), {}, ()))
    assert (
        "budget: as oversub runs here (2 CPUs of affinity, a CPU quota of 1.5 CPUs): N = 1" in text
    )
    assert "a CPU quota of 1 CPU NOT APPLIED" in text
    assert "told from the 1.5-CPU quota it runs under" in text
    assert "ignore a CPU quota (measured): numpy" in text
    assert "host N=" not in text  # the asked budget is the host's: one column
