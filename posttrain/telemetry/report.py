"""`write_report(run_dir)`: RUN_DIR/report.html, one self-contained page (inline CSS, PNGs as data URIs).

What it finds under run_dir (a stage dir, or a pipeline dir with stage subdirs base/, sft/, rl/, ...;
checkpoints/, tb/, wandb/ and hidden folders are not searched):
- a *stage* is run_dir or any subfolder holding metrics.jsonl or config.yaml: its resolved config
  (collapsible), a summary table of every metric, and curves of every numeric metric with two or
  more points, grouped: keys sharing a prefix (`reward/<domain>`, `pass@1/<domain>`, `time/<phase>`)
  share a plot, and `eval_X` is drawn with `X`; at most MAX_PLOTS plots per stage (the summary table
  still lists the rest); a stage with alerts.jsonl (reward-hacking alerts, posttrain.verifiers.monitors)
  gets an "Alerts" section at its top: a count per kind and a table (step, kind, message);
- an *eval* is any *.json with a top-level "domains" mapping (format: posttrain.eval.harness): one table
  each, and with several of them a pass@1 comparison table and a grouped bar chart by domain.
All text from files is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.errors import PosttrainError
from posttrain.telemetry.metrics import METRICS_FILE, read_metrics
from posttrain.fsio import write_text_atomic
from posttrain.telemetry.plots import grouped_bar_plot, line_plot, png_data_uri
from posttrain.telemetry.report_alerts import render_alerts
from posttrain.verifiers.monitors import ALERTS_FILE, read_alerts

MAX_PLOTS = 12
REPORT_FILE = "report.html"
SKIP_DIRS = {"checkpoints", "tb", "wandb", "__pycache__"}
STAGE_ORDER = ["base", "sft", "rl", "eval"]  # the stage folders `posttrain run` writes, in pipeline order
PLOT_PRIORITY = [r"loss", r"eval_loss", r"pass@\d+", r"reward", r"pass_rate", r"temperature", r"eval(_.*)?", r"lr", r"grad_norm",
                 r"tokens_per_s", r"time", r"zero_variance_frac", r"completion_len"]
MAX_EVAL_BYTES = 50_000_000
MAX_POINTS = 2000  # per curve; longer series are thinned (evenly, the last point kept)


@dataclass
class Stage:
    name: str
    path: Path
    config: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    has_metrics: bool = False
    alerts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Eval:
    name: str
    path: Path
    data: dict[str, Any]


# ---------------------------------------------------------------- discovery


def _walk(run_dir: Path):
    for dirpath, dirnames, filenames in os.walk(run_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        yield Path(dirpath), filenames


def _order_key(rel: Path) -> tuple:
    parts = rel.with_suffix("").parts if rel.suffix == ".json" else rel.parts
    ranks = [STAGE_ORDER.index(p) if p in STAGE_ORDER else len(STAGE_ORDER) for p in parts]
    return (len(parts), ranks, [str(p) for p in parts])


def find_stages(run_dir: Path) -> list[Stage]:
    stages = []
    for d, files in _walk(run_dir):
        if METRICS_FILE not in files and "config.yaml" not in files:
            continue
        rel = d.relative_to(run_dir)
        stage = Stage(name=run_dir.name if rel == Path(".") else str(rel), path=d)
        if "config.yaml" in files:
            try:
                stage.config = (d / "config.yaml").read_text(encoding="utf-8", errors="replace")
            except OSError:
                stage.config = None
        if METRICS_FILE in files:
            stage.has_metrics = True
            try:
                stage.records = read_metrics(d / METRICS_FILE)
            except OSError:
                stage.records = []
        if ALERTS_FILE in files:
            try:
                stage.alerts = read_alerts(d)
            except PosttrainError:
                stage.alerts = []
        stages.append(stage)
    return sorted(stages, key=lambda s: _order_key(s.path.relative_to(run_dir)))


def find_evals(run_dir: Path) -> list[Eval]:
    found = []
    for d, files in _walk(run_dir):
        for name in sorted(files):
            f = d / name
            if not name.endswith(".json") or f.stat().st_size > MAX_EVAL_BYTES:
                continue
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("domains"), dict):
                found.append(f)
    found.sort(key=lambda f: _order_key(f.relative_to(run_dir)))
    parents = {f.parent for f in found}
    evals = []
    for f in found:
        label = f.stem if len(parents) == 1 else str(f.relative_to(run_dir).with_suffix(""))
        evals.append(Eval(label, f, json.loads(f.read_text(encoding="utf-8"))))
    return evals


# ---------------------------------------------------------------- metrics


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def metric_series(records: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[float | None]]]:
    """key -> (steps, values) for every key that has at least one number (null -> None, a gap)."""
    series: dict[str, tuple[list[int], list[float | None]]] = {}
    numeric: set[str] = set()
    for rec in records:
        for key, value in rec.items():
            if key in ("step", "time") or not (value is None or _is_num(value)):
                continue
            xs, ys = series.setdefault(key, ([], []))
            xs.append(rec["step"])
            ys.append(None if value is None else float(value))
            if value is not None:
                numeric.add(key)
    return {k: v for k, v in series.items() if k in numeric}


def thin(xs: list, ys: list, max_points: int = MAX_POINTS) -> tuple[list, list]:
    if len(xs) <= max_points:
        return xs, ys
    stride = -(-len(xs) // max_points)
    idx = list(range(0, len(xs), stride))
    if idx[-1] != len(xs) - 1:
        idx.append(len(xs) - 1)
    return [xs[i] for i in idx], [ys[i] for i in idx]


def group_metrics(keys: list[str]) -> list[tuple[str, list[str]]]:
    """Plot groups: `a/b` keys by the prefix before the last '/', `eval_X` with `X`, others alone; ordered."""
    keyset = set(keys)
    groups: dict[str, list[str]] = {}
    for key in sorted(keys):
        if "/" in key:
            name = key.rsplit("/", 1)[0]
        elif key.startswith("eval_") and key[len("eval_"):] in keyset:
            name = key[len("eval_"):]
        else:
            name = key
        groups.setdefault(name, []).append(key)

    def rank(name: str) -> tuple:
        for i, pattern in enumerate(PLOT_PRIORITY):
            if re.fullmatch(pattern, name):
                return (i, name)
        return (len(PLOT_PRIORITY), name)

    return [(name, sorted(groups[name], key=lambda k: (k != name, k))) for name in sorted(groups, key=rank)]


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, list) and v and all(_is_num(x) for x in v):  # an interval, e.g. pass@1_ci95
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, bool) or not _is_num(v):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if v == 0 or (1e-3 <= abs(v) < 1e5):
        return f"{v:.4f}".rstrip("0").rstrip(".") if abs(v) < 1 else f"{v:.4g}"
    return f"{v:.3e}"


# ---------------------------------------------------------------- HTML pieces

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1100px;
color:#222;line-height:1.45;padding:0 1rem}
h1{margin-bottom:.2rem}h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2.5rem}
.meta{color:#666}table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}tr:nth-child(even) td{background:#fafafa}
pre{background:#f7f7f7;padding:.8rem;overflow:auto;font-size:.85rem}
.plots{display:flex;flex-wrap:wrap;gap:.5rem}.plots img{max-width:540px;width:100%;border:1px solid #eee}
.alerts td{text-align:left}.note{color:#a60}.pos{color:#070}.neg{color:#b00}summary{cursor:pointer;font-weight:600}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _table(header: list[str], rows: list[list[str]], raw_cells: bool = False) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if raw_cells else _e(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: bytes, alt: str) -> str:
    return f'<img src="{png_data_uri(png)}" alt="{_e(alt)}">'


def render_stage(stage: Stage) -> str:
    kind = "Stage" if stage.has_metrics else "Config"
    out = [f"<h2>{kind}: {_e(stage.name)}</h2>", f'<p class="meta">{_e(stage.path)}</p>', render_alerts(stage.alerts)]
    if stage.config is not None:
        out.append(f"<details><summary>Resolved config</summary><pre>{_e(stage.config)}</pre></details>")
    if not stage.has_metrics:
        return "\n".join(out)
    recs = stage.records
    if not recs:
        out.append('<p class="note">metrics.jsonl holds no records.</p>')
        return "\n".join(out)
    times = [r["time"] for r in recs if _is_num(r.get("time"))]
    wall = f", {max(times) - min(times):.1f} s wall" if len(times) > 1 else ""
    out.append(f'<p class="meta">{len(recs)} records, steps {recs[0]["step"]}–{recs[-1]["step"]}{wall}</p>')
    series = metric_series(recs)
    rows = []
    for key in sorted(series):
        vals = [v for v in series[key][1] if v is not None and math.isfinite(v)]
        last = next((v for v in reversed(series[key][1]) if v is not None), None)
        rows.append([key, _fmt(last), _fmt(min(vals)), _fmt(max(vals)), str(len(vals))])
    if rows:
        out.append(_table(["metric", "last", "min", "max", "points"], rows))
    # one-off facts (a count logged once at step 0) are in the table; curves need two points
    curves = [k for k, (_, ys) in series.items() if sum(y is not None for y in ys) >= 2]
    groups = group_metrics(curves)
    imgs = [_img(line_plot({k: thin(*series[k]) for k in keys}, title=name), name) for name, keys in groups[:MAX_PLOTS]]
    out.append('<div class="plots">' + "".join(imgs) + "</div>")
    if len(groups) > MAX_PLOTS:
        rest = ", ".join(name for name, _ in groups[MAX_PLOTS:])
        out.append(f'<p class="note">Not plotted (over {MAX_PLOTS} plots; see the table): {_e(rest)}</p>')
    return "\n".join(out)


def _eval_columns(domains: dict[str, Any]) -> list[str]:
    keys: list[str] = []
    for d in domains.values():
        if isinstance(d, dict):
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
    rows = [[name] + [_fmt(domains[name].get(c)) for c in cols] for name in sorted(domains)]
    overall = data.get("overall")
    if isinstance(overall, dict):
        rows.append(["overall"] + [_fmt(overall.get(c)) for c in cols])
    meta = ", ".join(f"{k}: {data[k]}" for k in ("model", "samples", "seed") if k in data)
    bad = len(data["domains"]) - len(domains)
    note = f'<p class="note">{bad} domain entries are not objects and were skipped.</p>' if bad else ""
    return (f"<h3>Eval: {_e(ev.name)}</h3><p class=\"meta\">{_e(ev.path)}{' — ' + _e(meta) if meta else ''}</p>"
            + note + _table(["domain"] + cols, rows))


def _samples(ev: Eval) -> int:
    k = ev.data.get("samples", 1)
    return int(k) if _is_num(k) and k >= 1 else 1


def _metric(ev: Eval) -> str:
    """What an eval contributes to the comparison: pass@1 when greedy (K = 1), else pass@K, the
    ceiling sampling reaches (the base's pass@K is what RL can at best turn into pass@1)."""
    return f"pass@{_samples(ev)}"


def _value(ev: Eval, domain: str | None, key: str = "") -> float | None:
    entry = ev.data.get("overall") if domain is None else ev.data["domains"].get(domain)
    v = entry.get(key or _metric(ev)) if isinstance(entry, dict) else None
    return float(v) if _is_num(v) else None


def render_comparison(evals: list[Eval]) -> str:
    """pass@1 of every greedy eval and pass@K of every sampled one, by domain; Δ is the last greedy
    eval minus the first (when there are two), else the last eval's pass@1 minus the first's."""
    domains = sorted({d for ev in evals for d, v in ev.data["domains"].items() if isinstance(v, dict)})
    greedy = [ev for ev in evals if _samples(ev) == 1]
    first, last = (greedy[0], greedy[-1]) if len(greedy) >= 2 else (evals[0], evals[-1])
    rows = []
    for d in domains + [None]:
        vals = [_value(ev, d) for ev in evals]
        a, b = _value(first, d, "pass@1"), _value(last, d, "pass@1")
        if a is not None and b is not None:
            delta = b - a
            cls = "pos" if delta > 0 else "neg" if delta < 0 else ""
            dcell = f'<span class="{cls}">{delta:+.3f}</span>'
        else:
            dcell = "–"
        rows.append([_e("overall" if d is None else d)] + [_e(_fmt(v)) for v in vals] + [dcell])
    table = _table(["domain"] + [f"{_metric(ev)} {ev.name}" for ev in evals] + [f"Δ pass@1 {last.name} − {first.name}"],
                   rows, raw_cells=True)
    cats = domains + ["overall"]
    chart = grouped_bar_plot(cats, {f"{ev.name} ({_metric(ev)})": [_value(ev, d) for d in domains + [None]]
                                    for ev in evals}, title="pass@1 (greedy) and pass@K (sampled) by domain",
                             ylabel="pass rate")
    return ("<h3>Comparison: greedy pass@1 against sampled pass@K, by domain</h3>" + table + '<div class="plots">'
            + _img(chart, "pass@1 by domain") + "</div>")


# ---------------------------------------------------------------- the page


def render_report(run_dir: Path, stages: list[Stage], evals: list[Eval]) -> str:
    now = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>posttrain report — {_e(run_dir.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>posttrain report: {_e(run_dir.name)}</h1>",
        f'<p class="meta">{_e(run_dir)} — generated {_e(now)} — {len(stages)} stage(s), {len(evals)} eval file(s)</p>',
    ]
    parts += [render_stage(s) for s in stages]
    if evals:
        parts.append("<h2>Evaluations</h2>")
        parts += [render_eval(ev) for ev in evals]
        if len(evals) > 1:
            parts.append(render_comparison(evals))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dir: str | os.PathLike) -> Path:
    """Write run_dir/report.html and return its path."""
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise PosttrainError(f"report: run directory {run_dir} does not exist")
    stages, evals = find_stages(run_dir), find_evals(run_dir)
    if not stages and not evals:
        raise PosttrainError(f"report: nothing to report in {run_dir} (no metrics.jsonl, config.yaml or eval JSON)")
    page = render_report(run_dir, stages, evals)
    out = run_dir / REPORT_FILE
    try:
        write_text_atomic(out, page)
    except OSError as e:
        raise PosttrainError(f"report: cannot write {out}: {e.strerror or e}") from None
    return out
