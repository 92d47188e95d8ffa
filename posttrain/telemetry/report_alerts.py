"""The "Alerts" section of a stage in report.html: reward-hacking alerts read from RUN_DIR/alerts.jsonl
(format: posttrain.verifiers.monitors), a count per kind and a table (step, kind, message).

All text from the file is HTML-escaped (messages can quote completions); long messages are cut to
MAX_MESSAGE_CHARS and at most MAX_ROWS alerts are listed (the most recent; the counts cover all).
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

MAX_ROWS = 200
MAX_MESSAGE_CHARS = 600


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _rows(rows: list[list[Any]]) -> str:
    return "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)


def render_alerts(alerts: list[dict]) -> str:
    """HTML of the alerts section; "" when there are none."""
    if not alerts:
        return ""
    counts = Counter(str(a.get("kind", "?")) for a in alerts)
    out = [f'<h3 class="neg">Alerts ({len(alerts)})</h3>',
           "<table><thead><tr><th>kind</th><th>alerts</th><th>first step</th><th>last step</th></tr></thead><tbody>"]
    for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        steps = [a.get("step") for a in alerts if str(a.get("kind", "?")) == kind]
        steps = [s for s in steps if isinstance(s, int)]
        out.append(_rows([[kind, n, min(steps) if steps else "–", max(steps) if steps else "–"]]))
    out.append("</tbody></table>")
    shown = alerts[-MAX_ROWS:]
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
