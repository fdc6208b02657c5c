"""`report --format html`: one self-contained page (no script, no external resource).

Charts are inline SVG (`recording.svg`): demand against N with the verdict of each interval
under it, the delay ratio against its threshold, and the CPU of the busiest processes. Then
the findings with their fixes, the episodes (each cell of the verdict strip that one covers
links to its card), the processes and the notes. A Content Security Policy in
the page forbids every request and every script, so even a page opened from an untrusted
recording can only show text; and every string from the recording goes through
`escape.html` anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from oversub.recording.svg import Line, line_chart
from oversub.recording.types import Replay
from oversub.render import episodeview
from oversub.render.escape import html
from oversub.render.phrases import (
    budget_limit_line,
    env_text,
    headline,
    number,
    pools_text,
    process_label,
    totals_line,
)

VERDICT_COLOR = {
    "ok": "#16a34a",
    "at-risk": "#ca8a04",
    "starved": "#9333ea",
    "oversubscribed": "#dc2626",
}
NOT_JUDGED_COLOR = "#6b7280"
DEMAND, BUDGET, DELAY, LIMIT = "#2563eb", "#16a34a", "#ea580c", "#6b7280"
PROCESS_COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""No fetch, no script, no frame, no form: the page can only show what it holds."""

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #111827; background: #f3f4f6; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 10px; }
.banner { color: #fff; border-radius: 8px; padding: 14px 18px; margin: 12px 0 16px; }
.banner b { font-size: 20px; letter-spacing: .02em; }
.card { background: #fff; border-radius: 8px; padding: 12px 16px; margin: 10px 0;
  box-shadow: 0 1px 2px rgba(0,0,0,.08); }
.about { color: #374151; margin: 2px 0; }
svg.chart { width: 100%; height: auto; display: block; }
svg .title { font: 600 14px system-ui, sans-serif; fill: #111827; }
svg .tick, svg .legend { font: 12px system-ui, sans-serif; fill: #374151; }
svg .label { font: 12px system-ui, sans-serif; fill: #6b7280; }
svg .grid { stroke: #e5e7eb; } svg .axis { stroke: #9ca3af; }
.finding .rule { font-weight: 600; } .sev { font-size: 12px; text-transform: uppercase;
  border-radius: 4px; padding: 1px 6px; color: #fff; margin-right: 6px; }
.fix { background: #f9fafb; border-left: 3px solid #2563eb; padding: 6px 10px;
  margin-top: 6px; white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 13px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; background: #fff; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #e5e7eb;
  vertical-align: top; }
th { background: #f9fafb; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cmd { font-family: ui-monospace, monospace; font-size: 12px; color: #4b5563;
  word-break: break-all; }
.keys span { display: inline-block; margin-right: 14px; font-size: 12px; color: #374151; }
.keys i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
footer { color: #6b7280; font-size: 12px; margin-top: 28px; }
"""

MAX_POINTS = 480
"""Points per chart at most (a long run is drawn as means of consecutive intervals)."""

SEVERITY_COLOR = {"critical": "#dc2626", "warning": "#ca8a04", "info": "#2563eb"}


def _charts(replay: Replay) -> list[str]:
    from oversub.recording.charts import series, thinned

    s = thinned(series(replay), MAX_POINTS)
    if len(s.seconds) < 2:
        return ['<p class="card">One interval or none: no chart over time.</p>']
    band = [VERDICT_COLOR.get(v, NOT_JUDGED_COLOR) for v in s.verdicts]
    demand = line_chart(
        "Demand (runnable threads) against N (usable vCPUs)",
        s.seconds,
        [
            Line("demand", DEMAND, s.demand),
            Line("N", BUDGET, [float(n) for n in s.vcpus], dashed=True),
        ],
        y_label="threads",
        band=band,
        links=_episode_links(replay, s.seconds),
        chart_id="demand",
    )
    keys = "".join(
        f'<span><i style="background:{color}"></i>{html(word)}</span>'
        for word, color in VERDICT_COLOR.items()
    )
    delay = line_chart(
        "Delay ratio: share of runnable time spent waiting for a CPU",
        s.seconds,
        [
            Line("delay ratio", DELAY, s.delay_ratio),
            Line(
                f"threshold {replay.thresholds.delay_ratio:g}",
                LIMIT,
                [replay.thresholds.delay_ratio] * len(s.seconds),
                dashed=True,
                width=1.5,
            ),
        ],
        y_label="share",
        y_top=1.0,
        chart_id="delay",
    )
    cpu = line_chart(
        "CPU per process (100 % = one vCPU), the busiest",
        s.seconds,
        [
            Line(f"{pid} {name}", PROCESS_COLORS[i % len(PROCESS_COLORS)], values)
            for i, (pid, name, values) in enumerate(s.processes)
        ],
        y_label="CPU %",
        chart_id="cpu",
    )
    return [
        f'<div class="card">{demand}<div class="keys">verdict of each interval: {keys}</div></div>',
        f'<div class="card">{delay}</div>',
        f'<div class="card">{cpu}</div>',
    ]


def _episode_links(replay: Replay, ends: Sequence[float]) -> list[tuple[str, str] | None]:
    """Per cell of the verdict strip (the span up to each end), the episode it shows, the
    worst when several: a link to its card, and its title."""
    episodes = replay.summary.episodes
    out: list[tuple[str, str] | None] = []
    start = 0.0
    for end in ends:
        hit = next((i for i, e in enumerate(episodes) if e.start_s < end and e.end_s > start), None)
        if hit is None:
            out.append(None)
        else:
            e = episodes[hit]
            out.append(
                (f"#episode-{hit + 1}", f"{e.verdict.value} at {episodeview.when(e)}: see below")
            )
        start = end
    return out


def _episodes(replay: Replay) -> list[str]:
    """A card per episode kept, the worst first, each the target of the strip's links."""
    s = replay.summary
    head = episodeview.totals_line(s)
    if head is None:
        return []
    out = [
        '<h2 id="episodes">Episodes</h2>',
        f'<p class="card">{html(head[:1].upper() + head[1:])}.</p>',
    ]
    for i, e in enumerate(s.episodes, start=1):
        color = VERDICT_COLOR.get(e.verdict.value, NOT_JUDGED_COLOR)
        spike = "" if e.counts else " (below the rule)"
        out.append(
            f'<div class="card finding" id="episode-{i}">'
            f'<span class="sev" style="background:{color}">{html(e.verdict.value)}</span>'
            f'<span class="rule">{html(episodeview.when(e))}</span> ({e.seconds:.1f} s{spike}): '
            f"{html(episodeview.figures(e, s.budget.vcpus))}"
            f"<div>Busy: {html(episodeview.busy_text(e))}</div>"
            f"<div>{html(episodeview.cause_text(e))}</div>"
            f'<div class="fix">{html(e.finding.fix)}</div></div>'
        )
    return out


def _findings(replay: Replay) -> list[str]:
    findings = replay.summary.findings
    if not findings:
        return ['<p class="card">No findings.</p>']
    out = []
    for f in findings:
        color = SEVERITY_COLOR.get(f.severity.value, NOT_JUDGED_COLOR)
        out.append(
            '<div class="card finding">'
            f'<span class="sev" style="background:{color}">{html(f.severity.value)}</span>'
            f'<span class="rule">{html(f.rule.value)}</span> ({html(f.verdict.value)})'
            f"<div>{html(f.message)}</div>"
            f'<div class="fix">{html(f.fix)}</div></div>'
        )
    return out


def _processes(replay: Replay) -> list[str]:
    s = replay.summary
    if not s.processes:
        return ['<p class="card">No process was observed.</p>']
    head = (
        "<tr><th>pid</th><th>name / command line</th><th>threads</th><th>CPU % mean / peak</th>"
        "<th>demand mean / peak</th><th>delay ratio</th><th>pools; thread variables</th></tr>"
    )
    rows = []
    cmdlines = {p.pid: p.cmdline for p in s.processes}
    for p in s.processes:
        # The name watch and the text report give it (`phrases.process_label`), then the
        # whole command line.
        label = process_label(p.name, p.cmdline, cmdlines.get(p.ppid), p.ppid)
        ratio = "–" if p.run_delay_ratio is None else f"{p.run_delay_ratio:.0%}"
        rows.append(
            f'<tr><td class="num">{p.pid}</td><td>{html(label)}'
            f'<div class="cmd">{html(p.cmdline)}</div></td>'
            f'<td class="num">{p.threads}{" (exited)" if p.exited else ""}</td>'
            f'<td class="num">{p.cpu_percent:.0f} / {p.cpu_percent_peak:.0f}</td>'
            f'<td class="num">{number(p.demand)} / {number(p.demand_peak)}</td>'
            f'<td class="num">{ratio}</td>'
            f"<td>{html(pools_text(p.pools, p.live_pools))}; "
            f"{html(env_text(p.thread_env))}</td></tr>"
        )
    return ["<table>", head, *rows, "</table>"]


def report_html(replay: Replay) -> str:
    """The page, ending in a newline."""
    from oversub.recording.charts import about_lines

    s = replay.summary
    word, meaning = headline(s)
    color = VERDICT_COLOR.get(s.verdict.value if s.verdict else "", NOT_JUDGED_COLOR)
    about = "".join(f'<p class="about">{html(line)}</p>' for line in about_lines(replay))
    means = totals_line(s.totals, s.budget.vcpus, s.thresholds)
    totals = f'<p class="about">Totals (means): {html(means)}</p>' if s.samples else ""
    notes = "".join(f'<p class="about">Note: {html(note)}</p>' for note in s.notes)
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>oversub report: {html(word)}</title>",
        f"<style>{STYLE}</style></head><body><main>",
        "<h1>oversub report</h1>",
        f'<div class="banner" style="background:{color}"><b>{html(word.upper())}</b>'
        f" &mdash; {html(meaning)}</div>",
        f'<div class="card">{about}<p class="about">{html(budget_limit_line(s.budget))}</p>'
        f"{totals}{notes}</div>",
        "<h2>Over time</h2>",
        *_charts(replay),
        "<h2>Findings and fixes</h2>",
        *_findings(replay),
        *_episodes(replay),
        "<h2>Processes</h2>",
        *_processes(replay),
        f"<footer>oversub {html(replay.recording.header.version)} recording, "
        "rendered by oversub report: a self-contained page, no script, no request.</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"
