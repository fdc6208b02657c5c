"""The metric contract of `oversub serve` as data: docs/metrics.md's tables, the selectors of
a PromQL expression, and the series of a Prometheus text exposition.

docs/metrics.md is the one source: the alert rules, the dashboard and the example scrape are
checked against what these functions read from it
(tests/unit/render/test_metrics_contract.py), and the exporter's own tests compare a real
scrape with it the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRICS_DOC = ROOT / "docs" / "metrics.md"
EXAMPLE_SCRAPE = ROOT / "docs" / "metrics.example.prom"
RULES_FILE = ROOT / "deploy" / "prometheus" / "oversub.rules.yml"
RULES_TEST_FILE = ROOT / "deploy" / "prometheus" / "oversub.rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "oversub-dashboard.json"

METRIC_HEADER = "| metric | type | labels | value |"
LABEL_HEADER = "| label | values |"
SCRAPE_LABELS = ("instance", "job")
"""Labels Prometheus adds to every scraped series (the target's, not the exporter's)."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str
    """"gauge", "counter" or "info" (an info metric is exposed as a gauge of value 1)."""
    labels: tuple[str, ...]


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of every row of every Markdown table that starts with `header`."""
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.strip() == header:
            inside = True
        elif inside and line.startswith("|"):
            if not set(line) <= set("|- "):
                rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        else:
            inside = False
    return rows


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def documented_metrics(text: str | None = None) -> dict[str, MetricSpec]:
    """Every metric of the doc's metric tables, in order."""
    text = METRICS_DOC.read_text("utf-8") if text is None else text
    specs: dict[str, MetricSpec] = {}
    for cells in _table_rows(text, METRIC_HEADER):
        assert len(cells) == 4, cells
        (name,) = _ticked(cells[0])
        assert name not in specs, f"{name} is documented twice"
        specs[name] = MetricSpec(name, cells[1], tuple(_ticked(cells[2])))
    return specs


def documented_label_values(text: str | None = None) -> dict[str, list[str]]:
    """label -> its documented values, from the doc's "Label values" table."""
    text = METRICS_DOC.read_text("utf-8") if text is None else text
    values: dict[str, list[str]] = {}
    for cells in _table_rows(text, LABEL_HEADER):
        assert len(cells) == 2, cells
        (label,) = _ticked(cells[0])
        values[label] = _ticked(cells[1])
    return values


# --------------------------------------------------------------------------- PromQL

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
   |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
   |(?P<var>\$\{[^}]*\}|\$\w+)
   |(?P<range>\[[^\]]*\])
   |(?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*\b)
   |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
   |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
   |(?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}])
    """,
    re.VERBOSE,
)
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_AGGREGATORS = {
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[tuple[str, str, str], ...]
    """(label, operator, value) with the quotes removed."""


@dataclass(frozen=True)
class Query:
    selectors: tuple[Selector, ...]
    grouping: tuple[str, ...]
    """Labels named in by/without/on/ignoring/group_left/group_right clauses."""


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot read PromQL at {expr[pos : pos + 20]!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append((kind, match.group()))
    return tokens


def parse_query(expr: str) -> Query:
    """The metric selectors and grouping labels of a PromQL expression.

    A scanner, not a parser: enough to say which metric names and labels an expression
    uses. Function and aggregation names are told from metric names by the parenthesis that
    follows them; `promtool check rules` checks the syntax for real.
    """
    tokens = _tokens(expr)
    selectors: list[Selector] = []
    grouping: list[str] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "op" and text == "{":
            raise ValueError(f"a selector without a metric name in {expr!r}")
        if kind != "ident":
            i += 1
            continue
        if text in _GROUPING:
            i += 1
            if following == ("op", "("):
                i += 1
                while tokens[i] != ("op", ")"):
                    if tokens[i][0] == "ident":
                        grouping.append(tokens[i][1])
                    i += 1
                i += 1
            continue
        if text in _KEYWORDS or text in _AGGREGATORS or following == ("op", "("):
            i += 1
            continue
        matchers: list[tuple[str, str, str]] = []
        i += 1
        if following == ("op", "{"):
            i += 1
            while tokens[i] != ("op", "}"):
                (lk, label), (ok, op), (vk, value) = tokens[i : i + 3]
                if lk != "ident" or ok != "op" or vk != "string":
                    raise ValueError(f"cannot read the matchers of {text} in {expr!r}")
                matchers.append((label, op, value[1:-1]))
                i += 3
                if tokens[i] == ("op", ","):
                    i += 1
            i += 1
        selectors.append(Selector(text, tuple(matchers)))
    return Query(tuple(selectors), tuple(grouping))


# --------------------------------------------------------------------------- exposition


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    samples: tuple[Sample, ...]


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def _labels(inner: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        match = _LABEL.match(inner, pos)
        if match is None:
            raise ValueError(f"cannot read labels {inner!r}")
        assert match.group(1) not in labels, f"label {match.group(1)} twice in {inner!r}"
        labels[match.group(1)] = match.group(2)
        pos = match.end()
    return labels


def parse_exposition(text: str) -> dict[str, Family]:
    """The families of a Prometheus text exposition (format 0.0.4), strictly: every sample
    follows the `# TYPE` line of its own family, and a family appears once."""
    families: dict[str, Family] = {}
    current: tuple[str, str] | None = None
    samples: list[Sample] = []

    def close() -> None:
        if current is not None:
            families[current[0]] = Family(current[0], current[1], tuple(samples))

    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            close()
            name, kind = line.split()[2:4]
            assert name not in families, f"family {name} appears twice"
            current, samples = (name, kind), []
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ValueError(f"not a sample line: {line!r}")
        assert current is not None and match.group(1) == current[0], line
        samples.append(Sample(match.group(1), _labels(match.group(2) or ""), float(match.group(3))))
    close()
    return families
