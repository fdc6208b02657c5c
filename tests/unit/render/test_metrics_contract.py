"""The exporter's metric contract (docs/metrics.md, issue 15) holds together before the
exporter exists: names follow Prometheus's conventions, the label values are the rule
catalogue's, the example scrape is exactly the tables, and every metric the alert rules and
the Grafana dashboard query is documented, with labels it has. `make test-rules` runs
promtool on the same files."""

from __future__ import annotations

import json
import re
import typing
from collections import Counter
from typing import Any

import pytest
import yaml

from oversub.core.model import LimitSource
from oversub.core.names import Verdict
from oversub.core.rules import RUNTIME_RULES as RULES
from tests.support.metrics_contract import (
    DASHBOARD,
    EXAMPLE_SCRAPE,
    METRICS_DOC,
    ROOT,
    RULES_FILE,
    RULES_TEST_FILE,
    SCRAPE_LABELS,
    MetricSpec,
    Query,
    Selector,
    documented_label_values,
    documented_metrics,
    parse_exposition,
    parse_query,
)

DOC = METRICS_DOC.read_text("utf-8")
METRICS = documented_metrics()
VALUES = documented_label_values()
PROMETHEUS_OWN = {"up"}
"""Series Prometheus itself records for every scrape target."""
NODE_ABSENT = {
    "oversub_quota_cpus",
    "oversub_outside_cpus",
    "oversub_throttled_ratio",
    "oversub_throttled_seconds_total",
    "oversub_verdict",
    "oversub_findings",
}
"""What the node's `/` never has (no quota, nothing outside it, no verdict)."""


def _per_target() -> list[MetricSpec]:
    return [m for m in METRICS.values() if "target" in m.labels]


# --------------------------------------------------------------------------- the tables


def test_names_follow_prometheus_conventions() -> None:
    assert len(METRICS) >= 20
    for m in METRICS.values():
        assert re.fullmatch(r"oversub_[a-z][a-z0-9_]*[a-z]", m.name), m.name
        assert m.type in {"gauge", "counter", "info"}, m
        assert (m.type == "counter") == m.name.endswith("_total"), m.name
        assert (m.type == "info") == m.name.endswith("_info"), m.name
        assert len(set(m.labels)) == len(m.labels), m
        assert not set(m.labels) & set(SCRAPE_LABELS), m
        # Never a pid or a command line in a label: unbounded, and the process's to choose.
        assert not set(m.labels) & {"pid", "ppid", "cmdline", "command", "name", "comm"}, m
    per_target = _per_target()
    assert all(m.labels[0] == "target" for m in per_target)
    assert {m.name for m in METRICS.values()} - {m.name for m in per_target} == {
        "oversub_build_info",
        "oversub_up",
        "oversub_last_sample_timestamp_seconds",
        "oversub_sample_duration_seconds",
        "oversub_sample_interval_seconds",
        "oversub_targets",
    }


def test_units_are_base_units() -> None:
    for name in METRICS:
        words = name.removesuffix("_total").split("_")
        assert not {"milliseconds", "microseconds", "ms", "us", "percent", "minutes"} & set(words)
        if "seconds" in words:
            assert words[-1] == "seconds", f"{name}: the unit ends the name"


def test_enumerated_labels_are_the_catalogue() -> None:
    assert VALUES["verdict"] == [v.value for v in Verdict] + ["not-judged"]
    assert VALUES["rule"] == list(RULES)
    assert VALUES["limited_by"] == list(typing.get_args(LimitSource))
    assert VALUES["kind"] == ["cgroup", "tree", "node"]
    summary_json = (ROOT / "docs" / "cli.md").read_text("utf-8")  # its Summary JSON table
    (row,) = [line for line in summary_json.splitlines() if line.startswith("| `unavailable` |")]
    assert VALUES["signal"] == re.findall(r"`([a-z_-]+)`(?=,| \()", row)
    for label in VALUES:
        assert any(label in m.labels for m in METRICS.values()), label


def test_stated_series_counts_follow_from_the_tables() -> None:
    per_target = _per_target()
    numeric = [m for m in per_target if m.labels == ("target",)]
    assert len(numeric) == 17
    assert len([m for m in numeric if m.type == "gauge"]) == 12
    one_target = len(numeric) + len(VALUES["verdict"]) + len(VALUES["rule"])
    one_target += len(VALUES["signal"]) + 1
    node = len(numeric) - len(NODE_ABSENT & {m.name for m in numeric})
    node += len(VALUES["signal"]) + 1
    own = len(METRICS) - len(per_target)
    assert f"at most {one_target}. The node" in DOC
    signals = len(VALUES["signal"])
    assert f"at most 13 numeric, {signals} signals and 1 info, {node}." in DOC
    assert f"adds {own} of its own: at most {one_target} × K + {node + own} series" in DOC
    top = re.search(r"`--top K` targets \(default (\d+)", DOC)
    assert top, "the default --top is stated"
    default_top = int(top[1])
    assert f"{one_target * default_top + node + own} with the default K" in DOC


# --------------------------------------------------------------------------- the example


def _example() -> dict[str, Any]:
    return parse_exposition(EXAMPLE_SCRAPE.read_text("utf-8"))


def test_example_scrape_is_exactly_the_documented_families() -> None:
    families = _example()
    assert list(families) == list(METRICS)
    for name, family in families.items():
        spec = METRICS[name]
        assert family.type == ("gauge" if spec.type == "info" else spec.type), name
        for sample in family.samples:
            assert tuple(sample.labels) == spec.labels, (name, sample.labels)
            for label, value in sample.labels.items():
                if label in VALUES:
                    assert value in VALUES[label], (name, label, value)
            if spec.type == "info":
                assert sample.value == 1.0
            if spec.type == "counter" or name.endswith(("_cpus", "_seconds", "_ratio")):
                assert sample.value >= 0.0, sample
            if name.endswith("_ratio"):
                assert sample.value <= 1.0, sample


def test_example_targets_have_every_state_rule_and_signal() -> None:
    families = _example()
    info = {s.labels["target"]: s.labels for s in families["oversub_target_info"].samples}
    assert sorted(i["kind"] for i in info.values()) == ["cgroup", "cgroup", "node"]
    assert families["oversub_targets"].samples[0].value == 2  # the node is not counted
    for target, labels in info.items():
        judged = labels["kind"] != "node"
        verdicts = {
            s.labels["verdict"]: s.value
            for s in families["oversub_verdict"].samples
            if s.labels["target"] == target
        }
        findings = [s for s in families["oversub_findings"].samples if s.labels["target"] == target]
        signals = [
            s.labels["signal"]
            for s in families["oversub_signal_unavailable"].samples
            if s.labels["target"] == target
        ]
        assert signals == VALUES["signal"]
        if not judged:
            assert target == "/" and not verdicts and not findings
            continue
        assert list(verdicts) == VALUES["verdict"] and sum(verdicts.values()) == 1
        assert [s.labels["rule"] for s in findings] == VALUES["rule"]
        (verdict,) = [v for v, on in verdicts.items() if on]
        fired = {s.labels["rule"] for s in findings if s.value}
        # The verdict is the worst fired rule's (docs/rules.md: severity -> verdict).
        assert any(rule.startswith(verdict) for rule in fired), (target, verdict, fired)
    per_target = Counter(
        s.labels["target"] for f in families.values() for s in f.samples if "target" in s.labels
    )
    assert max(per_target.values()) == 44 and per_target["/"] == 22


# --------------------------------------------------------------------------- PromQL


def test_query_scanner_finds_selectors_and_grouping() -> None:
    q = parse_query(
        'sum by (target) (rate(oversub_cpu_seconds_total{target=~"$target", job="x"}[5m]))'
        " / on(instance) group_left(kind) max without (rule) (oversub_findings > bool 0)"
        ' and time() - up{instance="a"} offset 5m > 0.5e1'
    )
    assert q.selectors == (
        Selector("oversub_cpu_seconds_total", (("target", "=~", "$target"), ("job", "=", "x"))),
        Selector("oversub_findings", ()),
        Selector("up", (("instance", "=", "a"),)),
    )
    assert q.grouping == ("target", "instance", "kind", "rule")
    assert parse_query("avg_over_time((oversub_up > bool 0)[10m:1m])").selectors == (
        Selector("oversub_up", ()),
    )
    with pytest.raises(ValueError):
        parse_query('{__name__="oversub_up"}')
    with pytest.raises(ValueError):
        parse_query("oversub_up # comment")


def _check_query(expr: str, where: str, recorded: dict[str, tuple[str, ...]]) -> None:
    """Every metric `expr` selects is documented (or recorded, or Prometheus's own), and every
    label it matches or groups by is one those metrics have, with a documented value."""
    query: Query = parse_query(expr)
    assert query.selectors, f"{where}: no metric in {expr!r}"
    known: set[str] = set(SCRAPE_LABELS)
    for sel in query.selectors:
        if sel.metric in METRICS:
            labels = METRICS[sel.metric].labels
        elif sel.metric in recorded:
            labels = recorded[sel.metric]
        else:
            assert sel.metric in PROMETHEUS_OWN, f"{where}: {sel.metric} is not in docs/metrics.md"
            labels = ()
        known |= set(labels)
        for label, op, value in sel.matchers:
            assert label in set(labels) | set(SCRAPE_LABELS), (
                f"{where}: {sel.metric} has no {label}"
            )
            if label in VALUES and op in {"=", "!="}:
                assert value in VALUES[label], f"{where}: {label}={value!r} is not documented"
    for label in query.grouping:
        assert label in known, f"{where}: grouping by {label}, which no selected metric has"


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES_FILE.read_text("utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _recorded() -> dict[str, tuple[str, ...]]:
    """Recording rule -> the labels its series keep (those of the metrics it is made of)."""
    recorded: dict[str, tuple[str, ...]] = {}
    for rule in _rules():
        if "record" in rule:
            metrics = [s.metric for s in parse_query(rule["expr"]).selectors]
            recorded[rule["record"]] = METRICS[metrics[0]].labels
            assert re.fullmatch(r"[a-z_]+:oversub_[a-z_]+:[a-z0-9_]+", rule["record"])
    return recorded


def test_rules_query_only_documented_metrics() -> None:
    rules = _rules()
    recorded = _recorded()
    assert len(recorded) >= 3
    alerts = [r for r in rules if "alert" in r]
    assert {a["alert"] for a in alerts} >= {
        "OversubscribedTarget",
        "StarvedTarget",
        "DemandAboveBudget",
        "PoolAtRisk",
        "ForkHang",
        "OversubExporterDown",
        "OversubSamplingStale",
    }
    for rule in rules:
        _check_query(rule["expr"], rule.get("alert") or rule["record"], recorded)
    for alert in alerts:
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert
        assert {"summary", "description"} <= set(alert["annotations"]), alert["alert"]
        # Each says what to do, and never an instruction to run something that is not oversub
        # or a value nobody can act on.
        assert re.search(r"oversub|restart|Check|Stop", alert["annotations"]["description"])
    # The docs/metrics.md alert table lists exactly these alerts.
    documented = re.findall(r"^\| `([A-Za-z]+)` \| (critical|warning|info) \|", DOC, re.M)
    assert documented == [(a["alert"], a["labels"]["severity"]) for a in alerts]


def test_rule_tests_feed_documented_series_and_test_every_alert() -> None:
    tests = yaml.safe_load(RULES_TEST_FILE.read_text("utf-8"))
    assert tests["rule_files"] == [RULES_FILE.name]
    recorded = _recorded()
    tested: Counter[str] = Counter()
    for group in tests["tests"]:
        for series in group["input_series"]:
            _check_query(series["series"], f"input of {group['name']}", {})
        for case in group.get("alert_rule_test", []):
            tested[case["alertname"] + (":fires" if case.get("exp_alerts") else ":quiet")] += 1
        for case in group.get("promql_expr_test", []):
            _check_query(case["expr"], f"expression test of {group['name']}", recorded)
    for alert in (r["alert"] for r in _rules() if "alert" in r):
        assert tested[f"{alert}:fires"], f"{alert} is never shown firing"
        assert tested[f"{alert}:quiet"] or alert in {"StarvedTarget", "OversubNotJudged"}, alert


# --------------------------------------------------------------------------- dashboard


def _dashboard() -> dict[str, Any]:
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text("utf-8"))
    return dash


def test_dashboard_queries_only_documented_metrics() -> None:
    dash = _dashboard()
    exprs = 0
    for panel in dash["panels"]:
        for target in panel["targets"]:
            _check_query(target["expr"], f"panel {panel['title']!r}", {})
            exprs += 1
    assert exprs >= 15
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert match, var["query"]
        _check_query(match[1], f"variable {var['name']}", {})
        (sel,) = parse_query(match[1]).selectors
        assert match[2] in METRICS[sel.metric].labels + SCRAPE_LABELS


def test_dashboard_covers_the_contract() -> None:
    """The panels the issue asks for are there: every per-target quantity is shown."""
    dash = _dashboard()
    shown = {
        sel.metric
        for panel in dash["panels"]
        for target in panel["targets"]
        for sel in parse_query(target["expr"]).selectors
    }
    missing = {m.name for m in _per_target()} - shown
    assert missing == {
        "oversub_quota_cpus",  # N is shown; the exact quota is in `oversub cpus`
        "oversub_busy_processes",
        "oversub_processes",
        "oversub_pool_processes",
        "oversub_run_delay_seconds_total",  # the delay ratio gauge is shown
        "oversub_voluntary_context_switches_total",
        "oversub_signal_unavailable",
    }


def test_dashboard_model_is_importable() -> None:
    dash = _dashboard()
    assert dash["schemaVersion"] == 42  # Grafana 12-13's classic JSON model
    assert re.fullmatch(r"[a-z0-9-]{8,40}", dash["uid"])
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["target"]["multi"] and variables["target"]["includeAll"]
    # Every query goes through the datasource variable: nothing to edit on import.
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids)
    cells: set[tuple[int, int]] = set()
    for panel in dash["panels"]:
        assert panel["datasource"] == datasource, panel["title"]
        assert panel["type"] in {"timeseries", "state-timeline", "table"}
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        assert all(t["datasource"] == datasource for t in panel["targets"])
        for override in panel["fieldConfig"]["overrides"]:
            if override["matcher"]["id"] == "byFrameRefID":
                assert override["matcher"]["options"] in refs, panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == datasource


def test_verdict_timeline_maps_every_state() -> None:
    (panel,) = [p for p in _dashboard()["panels"] if p["type"] == "state-timeline"]
    expr = panel["targets"][0]["expr"]
    codes = dict(re.findall(r'verdict="([a-z-]+)"\} == 1\) \* (\d)', expr))
    assert sorted(codes) == sorted(VALUES["verdict"])
    (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
    texts = {code: m["text"] for code, m in mapping["options"].items()}
    assert {texts[code].replace(" ", "-") for code in codes.values()} == set(VALUES["verdict"])
    assert all(texts[codes[v]].replace(" ", "-") == v for v in VALUES["verdict"])
    # Worse verdicts get higher codes (Verdict.rank), so `max by` keeps the worst.
    ranked = [codes[v.value] for v in sorted(Verdict, key=lambda v: v.rank)]
    assert ranked == sorted(ranked) and codes["not-judged"] < min(ranked)
