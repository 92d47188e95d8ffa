"""Alerts in report.html, read from a stage's alerts.jsonl (format: posttrain.verifiers.monitors):
a count per kind near the top of the page (the headline), and the table (step, kind, message) in
the stage's section.

    render_alert_counts(alerts, "rl")   # '<h3 class="neg">Alerts (3) — rl</h3>' + kind, count, first/last step
    render_alert_table(alerts)          # the last MAX_ROWS alerts, messages cut to MAX_MESSAGE_CHARS

Both are "" when there are no alerts. All text from the file is HTML-escaped (messages can quote
completions); the counts cover every alert.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from posttrain.telemetry.report.html import e

MAX_ROWS = 200
MAX_MESSAGE_CHARS = 600


def _rows(rows: list[list[Any]]) -> str:
    return "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)


def render_alert_counts(alerts: list[dict], stage: str) -> str:
    if not alerts:
        return ""
    counts = Counter(str(a.get("kind", "?")) for a in alerts)
    out = [f'<h3 class="neg">Alerts ({len(alerts)}) — {e(stage)}</h3>',
           "<table><thead><tr><th>kind</th><th>alerts</th><th>first step</th><th>last step</th></tr></thead><tbody>"]
    for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        steps = [a.get("step") for a in alerts if str(a.get("kind", "?")) == kind]
        steps = [s for s in steps if isinstance(s, int)]
        out.append(_rows([[kind, n, min(steps) if steps else "–", max(steps) if steps else "–"]]))
    out.append("</tbody></table>")
    return "\n".join(out)


def render_alert_table(alerts: list[dict]) -> str:
    if not alerts:
        return ""
    shown = alerts[-MAX_ROWS:]
    out = [f'<h4 class="neg">Alerts ({len(alerts)})</h4>']
    if len(shown) < len(alerts):
        out.append(f'<p class="note">Showing the last {len(shown)} of {len(alerts)} alerts.</p>')
    rows = []
    for a in shown:
        msg = str(a.get("message", ""))
        if len(msg) > MAX_MESSAGE_CHARS:
            msg = msg[:MAX_MESSAGE_CHARS] + "…"
        rows.append([a.get("step", "–"), a.get("kind", "?"), msg])
    out.append('<table class="alerts"><thead><tr><th>step</th><th>kind</th><th>message</th></tr></thead><tbody>'
               + _rows(rows) + "</tbody></table>")
    return "\n".join(out)
