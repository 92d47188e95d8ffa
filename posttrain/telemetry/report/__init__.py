"""`write_report(run_dir)`: RUN_DIR/report.html, one self-contained page (inline CSS, PNGs as data URIs,
no scripts, nothing fetched) that leads with the answer.

    path = write_report("runs/quickstart")      # also `posttrain report RUN_DIR`; `posttrain run` ends with it

What it finds under run_dir (a stage dir, or a pipeline dir with stage subdirs base/, sft/, rl/, ...;
checkpoints/, tb/, wandb/ and hidden folders are not searched):
- a *stage* is run_dir or any subfolder holding metrics.jsonl or config.yaml (its resolved config),
  with alerts.jsonl when a monitor or a gate raised alerts (posttrain.verifiers.monitors);
- a *suite comparison* is a folder with compare.json (posttrain.eval.compare) and one eval JSON per
  model, e.g. eval/general/{base,sft,rl}.json (report/suites.py);
- a loose *eval* is any other *.json with a top-level "domains" mapping (format: posttrain.eval.run).

The page, top to bottom: the headline: a one-line verdict (first -> last model on the primary suite,
points, p, n, wall time; time-capped stages flagged) and per stage and domain what each stage changed
(report/verdict.py), best and worst example completions per stage (report/examples.py), then
(report/headline.py) per suite each model's pass@1 / pass@k
with intervals, Δ against the previous model and its significance; gates; alert counts); the
curves that matter (report/curves.py); the scheduler's utilisation, queues and per-domain table
when the RL stage logged them (report/sched.py); the evaluations (report/evals.py: per-suite delta and
domain tables, loose evals, long-context and safety tables); the stages (config, alerts); and,
folded away, every logged metric plotted with a summary table per stage (report/dump.py).
All text from files is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.core.errors import PosttrainError
from posttrain.core.fsio import write_text_atomic
from posttrain.telemetry.metrics import METRICS_FILE, read_metrics
from posttrain.telemetry.report.alerts import render_alert_table
from posttrain.telemetry.report.curves import render_curves
from posttrain.telemetry.report.dump import render_dump
from posttrain.telemetry.report.evals import Eval, render_evals
from posttrain.telemetry.report.examples import completion_notes, render_examples, suite_samples
from posttrain.telemetry.report.headline import render_headline
from posttrain.telemetry.report.html import CSS, e, is_num
from posttrain.telemetry.report.metrics import metric_series
from posttrain.telemetry.report.sched import render_scheduler
from posttrain.telemetry.report.suites import COMPARE_FILE, Suite, load_suite, read_json
from posttrain.telemetry.report.verdict import parse_config, primary, render_verdict, stage_facts, suite_order
from posttrain.verifiers.monitors import ALERTS_FILE, read_alerts

REPORT_FILE = "report.html"
SKIP_DIRS = {"checkpoints", "tb", "wandb", "__pycache__"}
STAGE_ORDER = ["base", "sft", "rl", "eval"]  # the stage folders `posttrain run` writes, in pipeline order


@dataclass
class Stage:
    name: str
    path: Path
    config: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    has_metrics: bool = False
    alerts: list[dict[str, Any]] = field(default_factory=list)


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


def find_suites(run_dir: Path) -> list[Suite]:
    """Every folder with a compare.json that is a comparison, in folder order."""
    suites = [load_suite(d / COMPARE_FILE) for d, files in _walk(run_dir) if COMPARE_FILE in files]
    return [s for s in suites if s is not None]


def find_evals(run_dir: Path, suites: list[Suite]) -> list[Eval]:
    """Loose eval JSONs: those outside the suite folders."""
    taken = {s.path for s in suites}
    found = []
    for d, files in _walk(run_dir):
        if d in taken:
            continue
        for name in sorted(files):
            data = read_json(d / name) if name.endswith(".json") else None
            if isinstance(data, dict) and isinstance(data.get("domains"), dict):
                found.append((d / name, data))
    found.sort(key=lambda fd: _order_key(fd[0].relative_to(run_dir)))
    parents = {f.parent for f, _ in found}
    return [Eval(f.stem if len(parents) == 1 else str(f.relative_to(run_dir).with_suffix("")), f, data)
            for f, data in found]


# ---------------------------------------------------------------- the page


def render_stage(stage: Stage) -> str:
    """A stage's section: where it is, its records, its resolved config (folded) and its alerts."""
    kind = "Stage" if stage.has_metrics else "Config"
    out = [f"<h3>{kind}: {e(stage.name)}</h3>", f'<p class="meta">{e(stage.path)}</p>']
    recs = stage.records
    if stage.has_metrics and not recs:
        out.append('<p class="note">metrics.jsonl holds no records.</p>')
    elif recs:
        times = [r["time"] for r in recs if is_num(r.get("time"))]
        wall = f", {max(times) - min(times):.1f} s wall" if len(times) > 1 else ""
        out.append(f'<p class="meta">{len(recs)} records, steps {recs[0]["step"]}–{recs[-1]["step"]}{wall}</p>')
    if stage.config is not None:
        out.append(f"<details><summary>Resolved config</summary><pre>{e(stage.config)}</pre></details>")
    out.append(render_alert_table(stage.alerts))
    return "\n".join(p for p in out if p)


def render_lead(run_dir: Path, stages: list[Stage], suites: list[Suite]) -> str:
    """The verdict, the stage table and example completions of the primary suite."""
    main = primary(suites, suite_order(run_dir))
    if main is None:
        return ""
    samples = suite_samples(main)
    ordered = [main] + [s for s in suites if s is not main]  # the verdict's primary() keeps the first on a tie
    return (render_verdict(ordered, stage_facts(run_dir, stages), completion_notes(samples, main))
            + render_examples(main, samples))


def render_report(run_dir: Path, stages: list[Stage], suites: list[Suite], evals: list[Eval]) -> str:
    now = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    series = [(s.name, metric_series(s.records)) for s in stages if s.records]
    configs = {s.name: parse_config(s.config) for s in stages}
    alerts = [(s.name, s.alerts) for s in stages if s.alerts]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>posttrain report — {e(run_dir.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>posttrain report: {e(run_dir.name)}</h1>",
        f'<p class="meta">{e(run_dir)} — generated {e(now)} — {len(stages)} stage(s), {len(suites)} suite '
        f"comparison(s), {len(evals)} other eval file(s)</p>",
        render_headline(suites, alerts, render_lead(run_dir, stages, suites)),
        render_curves(series, configs),
        render_scheduler(series),
        render_evals(suites, evals),
        "<h2>Stages</h2>" if stages else "",
        *[render_stage(s) for s in stages],
        render_dump(series),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p)


def write_report(run_dir: str | os.PathLike) -> Path:
    """Write run_dir/report.html and return its path."""
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise PosttrainError(f"report: run directory {run_dir} does not exist")
    stages, suites = find_stages(run_dir), find_suites(run_dir)
    evals = find_evals(run_dir, suites)
    if not stages and not suites and not evals:
        raise PosttrainError(f"report: nothing to report in {run_dir} (no metrics.jsonl, config.yaml or eval JSON)")
    page = render_report(run_dir, stages, suites, evals)
    out = run_dir / REPORT_FILE
    try:
        write_text_atomic(out, page)
    except OSError as e:
        raise PosttrainError(f"report: cannot write {out}: {e.strerror or e}") from None
    return out
