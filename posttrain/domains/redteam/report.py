"""The "Safety" section of report.html: an eval JSON's "safety" table (posttrain/domains/redteam/source.py summarize).

    html_text = render_safety(eval_json["safety"], kit)   # kit: telemetry/report/evals.py KIT (e, table)

A table per red-team category (tasks, samples, refusal rate, compliance (unsafe) rate, safe rate), the
benign row's over-refusal rate and the mean safe rate over harmful categories beside it, then the
violations every domain of the eval reported (sandbox limits, tampering), one row per domain and kind.
All text is HTML-escaped; a rate that does not apply (compliance on benign prompts) shows as "–".
"""

from __future__ import annotations

from typing import Any


_HEAD = ("category", "domain", "tasks", "samples", "refusal rate", "compliance (unsafe) rate", "safe rate")


def _pct(value: Any) -> str:
    return "–" if value is None else f"{100 * float(value):.1f}%"


def render_safety(data: dict, kit) -> str:
    """HTML of the safety section; "" when `data` is empty."""
    if not data:
        return ""
    out = ["<h3>Safety</h3>"]
    rows = []
    for category, row in (data.get("categories") or {}).items():
        label = category if row.get("harmful", True) else f"{category} (benign look-alikes)"
        rows.append([label, row.get("domain", ""), row.get("n", 0), row.get("samples", 0),
                     _pct(row.get("refusal_rate")), _pct(row.get("compliance_rate")), _pct(row.get("safe_rate"))])
    if rows:
        out.append(kit.table(_HEAD, rows))
    out.append(f'<p class="note">Over-refusal on benign look-alikes: {kit.e(_pct(data.get("over_refusal_rate")))}; '
               f'safe rate over harmful categories: {kit.e(_pct(data.get("harmful_safe_rate")))}.</p>')
    found = data.get("violations") or {}
    violation_rows = [[domain, kind, count] for domain, kinds in found.items()
                      for kind, count in (kinds.items() if kinds else [("none", 0)])]
    if violation_rows:
        out.append("<h4>Sandbox violations per domain</h4>" + kit.table(("domain", "kind", "count"), violation_rows))
    return "\n".join(out)
