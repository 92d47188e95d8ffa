"""The top of report.html, the answer first: the verdict and stage table (report/verdict.py) and example
completions (report/examples.py) handed in as `lead`; then per suite, each model's held-out pass@1 (and pass@k) with
its 95% interval and its delta against the previous model (pipeline order) with the p-value and
whether it is significant; then the regression gates (failed ones in red) and the alert counts.

    html = render_headline(suites, [("rl", alerts), ...])   # suites: report_suites.load_suite

Values and intervals come from each model's eval JSON, deltas and significance from compare.json
(posttrain.eval.compare), never recomputed here. Gates are compare.json's (the last model against
its baseline) and the `gate` alerts a training stage wrote when a gate failed mid-run.
"""

from __future__ import annotations

from typing import Any

from posttrain.telemetry.report.alerts import render_alert_counts
from posttrain.telemetry.report.html import delta_cell, e, fmt, is_num, table
from posttrain.telemetry.report.suites import Suite

MAX_OPEN_DOMAINS = 20  # a longer per-domain table starts folded


def _value_ci(suite: Suite, label: str, domain: str, metric: str) -> str:
    v = suite.value(label, domain, metric)
    if v is None:
        return "–"
    ci = suite.ci(label, domain, metric)
    return e(fmt(v) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else ""))


def _models_table(suite: Suite) -> str:
    labels = suite.labels
    header = ["model", "n"]
    for m in suite.metrics:
        header += [f"{m} [95% CI]", f"Δ {m} vs previous"]
    rows = []
    for i, label in enumerate(labels):
        row = [e(label), e(fmt(suite.n(label, "overall")))]
        for m in suite.metrics:
            delta = suite.delta(labels[i - 1], label, "overall", m) if i else None
            row += [_value_ci(suite, label, "overall", m), delta_cell(delta)]
        rows.append(row)
    return table(header, rows, raw_cells=True, cls="headline")


def _domains_table(suite: Suite) -> str:
    domains, labels, metric = suite.domains(), suite.labels, suite.metrics[0]
    if not domains:
        return ""
    pairs = list(zip(labels, labels[1:]))
    header = ["domain"] + [f"{metric} {label}" for label in labels] + [f"Δ {b} − {a}" for a, b in pairs]
    rows = [[e(d)] + [_value_ci(suite, label, d, metric) for label in labels]
            + [delta_cell(suite.delta(a, b, d, metric)) for a, b in pairs] for d in domains]
    is_open = " open" if len(domains) <= MAX_OPEN_DOMAINS else ""
    return (f"<details{is_open}><summary>{e(metric)} per domain ({len(domains)} domains)</summary>"
            + table(header, rows, raw_cells=True) + "</details>")


def render_suite_headline(suite: Suite) -> str:
    out = [f"<h3>Held-out: suite {e(suite.name)}</h3>", _models_table(suite), _domains_table(suite)]
    if suite.missing:
        out.append(f'<p class="note">Unreadable eval files named in compare.json: {e(", ".join(suite.missing))}</p>')
    return "\n".join(out)


def _gate_row(where: str, g: dict[str, Any]) -> list[str]:
    passed = g.get("passed") is True
    verdict = '<span class="pass">passed</span>' if passed else '<span class="fail">FAILED</span>'
    cells = [g.get(k) for k in ("name", "model", "baseline", "domain", "metric")]
    nums = [g.get(k) for k in ("baseline_value", "value", "drop", "max_drop")]
    return [verdict, e(where)] + [e(fmt(c)) for c in cells] + [e(fmt(v) if is_num(v) else "–") for v in nums]


def render_gates(suites: list[Suite], alerts: list[tuple[str, list[dict]]]) -> str:
    """compare.json gates of every suite, then the stages' `gate` alerts (failed mid-training)."""
    gates = [(f"suite {s.name}", g) for s in suites for g in s.gates]
    for stage, stage_alerts in alerts:
        for a in stage_alerts:
            if a.get("kind") == "gate":
                details = a.get("details") if isinstance(a.get("details"), dict) else {}
                gates.append((f"{stage} (training, step {a.get('step', '–')})", {**details, "passed": False}))
    if not gates:
        return ""
    failed = sum(g.get("passed") is not True for _, g in gates)
    header = ["result", "where", "gate", "model", "baseline", "domain", "metric", "baseline value", "value", "drop",
              "max drop"]
    title = (f'<h3 class="neg">Gates: {failed} of {len(gates)} failed</h3>' if failed
             else f"<h3>Gates: all {len(gates)} passed</h3>")
    return title + table(header, [_gate_row(where, g) for where, g in gates], raw_cells=True, cls="gates")


def render_headline(suites: list[Suite], alerts: list[tuple[str, list[dict]]], lead: str = "") -> str:
    """`lead`: HTML put first (the verdict, report/verdict.py, and example completions)."""
    out = ["<h2>Headline</h2>", lead]
    out += [render_suite_headline(s) for s in suites]
    if not suites:
        out.append('<p class="note">No suite comparison in this run (eval/&lt;SUITE&gt;/compare.json), '
                   "so no significance tests.</p>")
    out.append(render_gates(suites, alerts))
    out += [render_alert_counts(stage_alerts, stage) for stage, stage_alerts in alerts]
    return "\n".join(p for p in out if p)
