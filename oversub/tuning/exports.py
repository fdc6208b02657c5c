"""`oversub tune --format json` and `--format markdown` (and `--json FILE`).

Pure: strings from a `TuneResult`; the text form and the phrases both share are in
`tuning.view`.
"""

from __future__ import annotations

import math
from typing import Any

from oversub.render.escape import markdown
from oversub.render.plan_formats import export_lines
from oversub.render.plan_text import code_lines_for
from oversub.tuning.trials import RATIO_LIMIT, Ranking, Stats, TuneResult, beyond
from oversub.tuning.view import (
    ENDED,
    about_lines,
    conclusion,
    headers,
    row,
    setting_env,
    setting_lines,
)

# --------------------------------------------------------------------------- JSON


def _finite(x: float | None) -> float | None:
    """A figure JSON can hold: None for inf (a spread beyond the largest double)."""
    return x if x is not None and math.isfinite(x) else None


def _ratio(x: float | None) -> float | None:
    """A speed-up as a figure: None beyond RATIO_LIMIT (the `*_beyond_limit` key says so)."""
    return x if x is not None and beyond(x) is None else None


def _stats_dict(s: Stats | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "n": s.n,
        "mean": s.mean,
        "sd": _finite(s.sd),
        "min": s.minimum,
        "max": s.maximum,
        "ci95_low": _finite(s.low) if s.half is not None else None,
        "ci95_high": _finite(s.high) if s.half is not None else None,
    }


def _ranking_dict(r: TuneResult, k: Ranking) -> dict[str, Any]:
    def label(i: int | None) -> str | None:
        return None if i is None else r.candidates[i].label

    ratio = None if k.default_slower is None else 1.0 + k.default_slower
    slower = _ratio(ratio)
    beyond_ratio = None if ratio is None else beyond(ratio)

    return {
        "order": [label(st.candidate) for st in k.standings],
        "best": label(k.best),
        "pick": label(k.pick),
        "tied_with_best": [label(i) for i in k.tied],
        "runner_up": label(k.runner_up),
        "runs_to_separate": k.runs_to_separate,
        "default_slower": None if slower is None else slower - 1.0,
        "default_slower_beyond_limit": None if k.default_slower is None else beyond_ratio,
        "default_distinguishable": k.default_distinguishable,
    }


def tune_dict(r: TuneResult) -> dict[str, Any]:
    """The `--format json` / `--json FILE` document.

    Keys:
      - `command` (list[str]), `vcpus` (N), `procs` (M), `procs_source` (str | null:
        "--procs", a launcher variable, "--procs-values", "trials" (the busy processes of the
        default's first trial), null: assumed), `procs_seen` (int | null: the most processes
        a trial ran busy at once).
      - `mode`: "fixed-work" or "fixed-time"; `metric` (str | null), `metric_stat`,
        `higher_is_better` (bool: false for wall time).
      - `ended`: "complete", "budget", "interrupted" or "default-failed".
      - `elapsed_s`; `plan` (object | null): `candidates`, `asked`, `warmup`, `runs`,
        `trials`, `trial_s` (expected length), `budget_s`.
      - `candidates` (list, in priority order): `label`, `threads` (int | null: inherited),
        `procs` (int | null), `roles` (list of "default", "recommended", "one thread"),
        `env` (object: every variable a trial sets), `extra` (object: the `--env` values),
        `unset` (list: inherited thread-count variables a trial removes),
        `stats` (object | null: `n`, `mean`, `sd`, `min`, `max`, `ci95_low`, `ci95_high`;
        `sd` and the interval's ends null also when beyond the largest double),
        `speedup` and `speedup_ci95` (throughput over the default's and its half width; null
        also beyond `ratio_limit` either way, which `speedup_beyond_limit` then says:
        "above" or "below", else null),
        `verdict` (str | null), `delay_ratio` (float | null), `failed` (int).
      - `trials` (list, in the order they ran): `index`, `candidate` (label), `round`,
        `warmup`, `value` (float | null), `seconds`, `status` (int | null), `failure`
        (str | null), `verdict`, `delay_ratio`, `record` (str | null).
      - `ranking`: `order` (labels, best first), `best`, `pick`, `tied_with_best`,
        `runner_up`, `runs_to_separate` (int | null), `default_slower` (fraction | null; null
        also when best/default is beyond `ratio_limit`), `default_slower_beyond_limit`
        ("above", "below" or null), `default_distinguishable` (bool).
      - `setting` (object | null): `label`, `env` (the variables to export for the pick),
        `unset` (the variables to remove), `procs`.
      - `ratio_limit`: 1000.0, the speed-up beyond which a ratio is not stated as a figure.
      - `notes` (list[str]).
    """
    standing = {st.candidate: st for st in r.ranking.standings}
    candidates = []
    for i, c in enumerate(r.candidates):
        st = standing[i]
        candidates.append(
            {
                "label": c.label,
                "threads": c.threads,
                "procs": c.procs,
                "roles": list(c.roles),
                "env": dict(c.env),
                "extra": dict(c.extra),
                "unset": list(c.unset),
                "stats": _stats_dict(st.stats),
                "speedup": _ratio(st.speedup),
                "speedup_ci95": None if _ratio(st.speedup) is None else _finite(st.speedup_half),
                "speedup_beyond_limit": None if st.speedup is None else beyond(st.speedup),
                "verdict": st.verdict.value if st.verdict is not None else None,
                "delay_ratio": st.delay_ratio,
                "failed": st.failed,
            }
        )
    trials = [
        {
            "index": t.index,
            "candidate": r.candidates[t.candidate].label,
            "round": t.round,
            "warmup": t.warmup,
            "value": t.value,
            "seconds": t.seconds,
            "status": t.status,
            "failure": t.failure,
            "verdict": t.verdict.value if t.verdict is not None else None,
            "delay_ratio": t.delay_ratio,
            "record": t.record,
        }
        for t in r.trials
    ]
    plan = None
    if r.plan is not None:
        p = r.plan
        plan = {
            "candidates": p.candidates,
            "asked": p.asked,
            "warmup": p.warmup,
            "runs": p.runs,
            "trials": p.trials,
            "trial_s": p.trial_s,
            "budget_s": p.budget_s,
        }
    setting = None
    if r.ranking.pick is not None:
        pick = r.candidates[r.ranking.pick]
        setting = {
            "label": pick.label,
            "env": setting_env(pick),
            "unset": list(pick.unset),
            "procs": pick.procs,
        }
    return {
        "command": list(r.command),
        "vcpus": r.vcpus,
        "procs": r.procs,
        "procs_source": r.procs_source,
        "procs_seen": r.procs_seen,
        "mode": "fixed-work" if r.metric is None else "fixed-time",
        "metric": r.metric,
        "metric_stat": r.metric_stat,
        "higher_is_better": r.higher_is_better,
        "ended": r.ended,
        "elapsed_s": r.elapsed_s,
        "plan": plan,
        "candidates": candidates,
        "trials": trials,
        "ranking": _ranking_dict(r, r.ranking),
        "setting": setting,
        "ratio_limit": RATIO_LIMIT,
        "notes": list(r.notes),
    }


def tune_json(r: TuneResult) -> str:
    import json

    return json.dumps(tune_dict(r), indent=2, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- Markdown


def tune_markdown(r: TuneResult) -> str:
    """A heading, what ran, the table (GitHub pipes), the conclusion and the setting as a
    shell block."""

    def cell(text: str) -> str:
        return markdown(text).replace("|", "\\|")

    lines = ["## oversub tune", ""]
    lines += [f"- {cell(line)}" for line in about_lines(r)]
    lines.append("")
    heads = headers(r)
    lines.append("| " + " | ".join(cell(h) for h in heads) + " |")
    lines.append("|" + "|".join("---" for _ in heads) + "|")
    for st in r.ranking.standings:
        lines.append("| " + " | ".join(cell(x) for x in row(r, st)) + " |")
    lines.append("")
    for line in [ENDED.get(r.ended, r.ended), *conclusion(r), *r.notes]:
        lines.append(f"- {cell(line)}")
    if r.ranking.pick is not None:
        pick = r.candidates[r.ranking.pick]
        env = setting_env(pick)
        if env:
            lines += ["", f"Setting ({cell(pick.label)}):", "", "```sh"]
            lines += [f"unset {name}" for name in pick.unset]
            lines += export_lines(env).rstrip("\n").split("\n")
            lines.append("```")
            if pick.threads is not None:
                lines += ["", "```python", *code_lines_for(pick.threads), "```"]
        else:
            lines += ["", *(f"- {cell(x)}" for x in setting_lines(r))]
    return "\n".join(lines) + "\n"
