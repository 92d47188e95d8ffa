"""The report's "Evaluations" section: per suite, every delta compare.json holds (with p-value, test
and n) and each model's table by domain with 95% intervals; loose eval JSONs (RUN_DIR/eval/NAME.json,
no compare.json) one table each and, with several, a comparison table and bar chart; and the extra
tables an eval JSON carries (long context, safety), drawn by the renderers EXTRA_TABLES names.

    html = render_evals(suites, evals)                       # "" when there is nothing to show
    EXTRA_TABLES["my_table"] = "my_pkg.my_module:render"     # render(value_of_that_key, KIT) -> HTML str

EXTRA_TABLES maps a top-level key of an eval JSON to "module:function"; the module is imported only
when an eval has that key, and the function gets the key's value and returns HTML (escaping any
text itself). Each table gets a section titled after the key ("long_context" -> "Long context").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from types import SimpleNamespace

from posttrain.core.registry import resolve
from posttrain.telemetry.heatmap import heatmap_plot
from posttrain.telemetry.plots import grouped_bar_plot
from posttrain.telemetry.report.html import e, fmt, img, is_num, p_text, signed, table
from posttrain.telemetry.report.suites import Suite

# the HTML toolkit a domain's renderer is handed (it never imports the report layer itself)
KIT = SimpleNamespace(e=e, img=img, table=table, heatmap=heatmap_plot)

EXTRA_TABLES: dict[str, str] = {
    "long_context": "posttrain.domains.longctx.report:render_long_context",
    "safety": "posttrain.domains.redteam.report:render_safety",
}


@dataclass
class Eval:
    name: str
    path: Path
    data: dict[str, Any]


def render_extra_tables(name: str, data: dict[str, Any]) -> str:
    out = []
    for key, target in EXTRA_TABLES.items():
        if key in data:
            out.append(f"<h3>{e(key.replace('_', ' ').capitalize())}: {e(name)}</h3>" + resolve(target)(data[key], KIT))
    return "\n".join(out)


def _eval_columns(domains: dict[str, Any]) -> list[str]:
    keys: list[str] = []
    for d in domains.values():
        keys += [k for k in d if k not in keys]

    def rank(k: str) -> tuple:
        m = re.fullmatch(r"pass@(\d+)(_ci95)?", k)  # each pass@k followed by its interval
        if k == "n":
            return (0, 0, k)
        if m:
            return (1, int(m.group(1)), k)
        return (2, 0, k)

    return sorted(keys, key=rank)


def render_eval(ev: Eval) -> str:
    data = ev.data
    domains = {k: v for k, v in data["domains"].items() if isinstance(v, dict)}
    cols = _eval_columns(domains)
    rows = [[name] + [fmt(domains[name].get(c)) for c in cols] for name in sorted(domains)]
    overall = data.get("overall")
    if isinstance(overall, dict):
        rows.append(["overall"] + [fmt(overall.get(c)) for c in cols])
    meta = ", ".join(f"{k}: {data[k]}" for k in ("model", "samples", "seed") if k in data)
    bad = len(data["domains"]) - len(domains)
    note = f'<p class="note">{bad} domain entries are not objects and were skipped.</p>' if bad else ""
    return (f"<h3>Eval: {e(ev.name)}</h3><p class=\"meta\">{e(ev.path)}{' — ' + e(meta) if meta else ''}</p>"
            + note + table(["domain"] + cols, rows))


def _samples(ev: Eval) -> int:
    k = ev.data.get("samples", 1)
    return int(k) if is_num(k) and k >= 1 else 1


def _metric(ev: Eval) -> str:
    """What a loose eval contributes to the comparison: pass@1 when greedy (K = 1), else pass@K, the
    ceiling sampling reaches (the base's pass@K is what RL can at best turn into pass@1)."""
    return f"pass@{_samples(ev)}"


def _value(ev: Eval, domain: str | None, key: str = "") -> float | None:
    entry = ev.data.get("overall") if domain is None else ev.data["domains"].get(domain)
    v = entry.get(key or _metric(ev)) if isinstance(entry, dict) else None
    return float(v) if is_num(v) else None


def render_comparison(evals: list[Eval]) -> str:
    """Loose evals side by side: pass@1 of every greedy eval and pass@K of every sampled one, by domain;
    Δ is the last greedy eval minus the first (when there are two), else the last eval's pass@1 minus
    the first's. No significance test (compare.json has those)."""
    domains = sorted({d for ev in evals for d, v in ev.data["domains"].items() if isinstance(v, dict)})
    greedy = [ev for ev in evals if _samples(ev) == 1]
    first, last = (greedy[0], greedy[-1]) if len(greedy) >= 2 else (evals[0], evals[-1])
    rows = []
    for d in domains + [None]:
        vals = [_value(ev, d) for ev in evals]
        a, b = _value(first, d, "pass@1"), _value(last, d, "pass@1")
        rows.append([e("overall" if d is None else d)] + [e(fmt(v)) for v in vals]
                    + [signed(b - a) if a is not None and b is not None else "–"])
    header = ["domain"] + [f"{_metric(ev)} {ev.name}" for ev in evals] + [f"Δ pass@1 {last.name} − {first.name}"]
    chart = grouped_bar_plot(domains + ["overall"],
                             {f"{ev.name} ({_metric(ev)})": [_value(ev, d) for d in domains + [None]] for ev in evals},
                             title="pass@1 (greedy) and pass@K (sampled) by domain", ylabel="pass rate")
    return ("<h3>Comparison: greedy pass@1 against sampled pass@K, by domain</h3>" + table(header, rows, raw_cells=True)
            + '<div class="plots">' + img(chart, "pass@1 by domain") + "</div>")


def _significance(d: dict[str, Any]) -> str:
    sig = d.get("significant")
    return "yes" if sig is True else "no" if sig is False else "–"


def _deltas_table(suite: Suite) -> str:
    rows = [[e(f"{d.get('from')} → {d.get('to')}"), e(fmt(d.get("domain"))), e(fmt(d.get("metric"))),
             signed(float(d["delta"]), bold=d.get("significant") is True) if is_num(d.get("delta")) else "–",
             e(p_text(d.get("p_value"))), _significance(d), e(fmt(d.get("test"))), e(fmt(d.get("n")))]
            for d in suite.deltas]
    if not rows:
        return '<p class="note">compare.json lists no deltas.</p>'
    return table(["models", "domain", "metric", "Δ", "p", "significant", "test", "n"], rows, raw_cells=True)


def render_suite_evals(suite: Suite) -> str:
    out = [f"<h3>Suite {e(suite.name)}: deltas between consecutive models</h3>",
           f'<p class="meta">{e(suite.path)}</p>', _deltas_table(suite)]
    for label in suite.labels:
        if label in suite.evals:
            name = f"{suite.name}/{label}"
            ev = Eval(name, suite.files[label], suite.evals[label])
            out += [render_eval(ev), render_extra_tables(name, ev.data)]
    return "\n".join(p for p in out if p)


def render_evals(suites: list[Suite], evals: list[Eval]) -> str:
    if not suites and not evals:
        return ""
    out = ["<h2>Evaluations</h2>"] + [render_suite_evals(s) for s in suites]
    for ev in evals:
        out += [render_eval(ev), render_extra_tables(ev.name, ev.data)]
    if len(evals) > 1:
        out.append(render_comparison(evals))
    return "\n".join(p for p in out if p)
