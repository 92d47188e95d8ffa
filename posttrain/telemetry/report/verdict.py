"""The first lines of report.html: a one-line verdict and, per stage and domain, what each stage changed.

    facts = stage_facts(run_dir, stages)        # label -> StageFacts(seconds, source, capped)
    text = verdict_text(suites, facts)          # "rl raised held_out pass@1 from 0.15 (base) to 0.52 (...)"
    html = render_verdict(suites, facts, samples)

The verdict names, for the primary suite (the one with the most models; on a tie the run's eval.best_by,
then the first of its eval.suites), the
first model's and the last model's overall score, the change in points with its paired test from
compare.json (`span` for first -> last with 3+ models, else the one consecutive delta; never
recomputed here), n, and the wall time of the stages after the first; then one clause per other
suite. A stage stopped early by its time cap is named in the verdict and flagged in the table.

Wall time of a stage, first found: RUN_DIR/timings.json (written by `posttrain run` after each
stage), the base's base.json `build_seconds`, else the span of its metrics.jsonl `time` (the
training loop only). A stage is *capped* when base.json says `stopped_by: max_seconds`, or its
config sets `max_seconds` (top level or under `train:`) and its last logged step is below the
configured steps (`max_steps` or `train.steps`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from posttrain.telemetry.report.html import e, fmt, is_num, p_text, signed, table
from posttrain.telemetry.report.suites import Suite, read_json

TIMINGS_FILE = "timings.json"  # recipes/pipeline.py writes it (the report cannot import recipes)
BASE_INFO_FILE = "base.json"  # recipes/base.py


@dataclass
class StageFacts:
    seconds: float | None = None
    source: str = ""  # where the wall time came from
    capped: str | None = None  # "stopped by its time cap (max_seconds = 900) at step 412 of 1000"


def parse_config(text: str | None) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _capped(path: Path, config: dict[str, Any], records: list[dict[str, Any]]) -> str | None:
    info = read_json(path / BASE_INFO_FILE)
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    cap = config.get("max_seconds", train.get("max_seconds"))
    target = config.get("max_steps", train.get("steps"))
    cap_text = f" (max_seconds = {fmt(cap)})" if is_num(cap) else ""
    if isinstance(info, dict) and info.get("stopped_by") == "max_seconds":
        return f"stopped by its time cap{cap_text} at step {fmt(info.get('steps'))} of {fmt(target)}"
    steps = [r["step"] for r in records if is_num(r.get("step"))]
    if is_num(cap) and is_num(target) and steps and max(steps) < target:
        return f"stopped by its time cap{cap_text} at step {max(steps)} of {target}"
    return None


def stage_facts(run_dir: Path, stages: list) -> dict[str, StageFacts]:
    """Facts per stage name (report.Stage objects: name, path, config, records)."""
    timings = read_json(run_dir / TIMINGS_FILE)
    timings = timings if isinstance(timings, dict) else {}
    out = {}
    for st in stages:
        facts = StageFacts(capped=_capped(st.path, parse_config(st.config), st.records))
        info = read_json(st.path / BASE_INFO_FILE)
        times = [r["time"] for r in st.records if is_num(r.get("time"))]
        if is_num(timings.get(st.name)):
            facts.seconds, facts.source = float(timings[st.name]), "stage"
        elif isinstance(info, dict) and is_num(info.get("build_seconds")):
            facts.seconds, facts.source = float(info["build_seconds"]), "build"
        elif len(times) > 1:
            facts.seconds, facts.source = max(times) - min(times), "training loop"
        out[st.name] = facts
    return out


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def points(delta: float) -> str:
    return f"{delta * 100:+.1f} points"


def main_metric(suite: Suite) -> str:
    return "pass@1" if "pass@1" in suite.metrics else suite.metrics[0]


def primary(suites: list[Suite], order: list[str] | None = None) -> Suite | None:
    """The suite with the most models; on a tie the one named first in `order` (the run's eval.best_by, then
    its eval.suites as written), else the first found."""
    rank = {name: i for i, name in enumerate(reversed(order or []))}
    return max(suites, key=lambda s: (len(s.labels), rank.get(s.name, -1)), default=None)


def suite_order(run_dir: Path) -> list[str]:
    """The run's eval.best_by, then its eval suites in the order its config.yaml writes them."""
    from_config = parse_config((run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else None)
    ev = from_config.get("eval") if isinstance(from_config.get("eval"), dict) else {}
    names = list(ev.get("suites") or {}) if isinstance(ev.get("suites"), dict) else []
    best = [ev["best_by"]] if isinstance(ev.get("best_by"), str) else []
    return best + [n for n in names if n not in best]


def _test_text(d: dict[str, Any] | None) -> str:
    """', p = 0.003, n = 400, significant' of a compare.json delta ('' when there is none)."""
    if not d:
        return ""
    sig = {True: "significant", False: "not significant"}.get(d.get("significant"), "not tested")
    return f", {p_text(d.get('p_value')).replace('=', ' = ').replace('<', ' < ')}, n = {fmt(d.get('n'))}, {sig}"


def _main_clause(suite: Suite, facts: dict[str, StageFacts]) -> str:
    labels, metric = suite.labels, main_metric(suite)
    first, last = labels[0], labels[-1]
    v0, v1 = suite.value(first, "overall", metric), suite.value(last, "overall", metric)
    if len(labels) < 2 or v0 is None or v1 is None:
        return f"suite {suite.name}: {metric} of {last} = {fmt(v1)} (no earlier model to compare)"
    d = suite.delta(first, last, "overall", metric)
    delta = float(d["delta"]) if d and is_num(d.get("delta")) else v1 - v0
    stat = points(delta) + _test_text(d)
    if d is None:  # an old compare.json without `span`: quote the last step's test
        prev = labels[-2]
        step = suite.delta(prev, last, "overall", metric)
        stat += f"; first to last not tested; {last} vs {prev}: " + (
            points(float(step["delta"])) + _test_text(step) if step and is_num(step.get("delta")) else "–")
    verb = "raised" if delta > 0 else "lowered" if delta < 0 else "did not change"
    spent = [(lb, facts[lb].seconds) for lb in labels[1:] if lb in facts and facts[lb].seconds is not None]
    cost = ""
    if spent:
        cost = f" in {duration(sum(s for _, s in spent))}"
        if len(spent) > 1:
            cost += " (" + ", ".join(f"{lb} {duration(s)}" for lb, s in spent) + ")"
    return f"{last} {verb} {suite.name} {metric} from {fmt(v0)} ({first}) to {fmt(v1)} ({stat}){cost}"


def _other_clause(suite: Suite) -> str:
    labels, metric = suite.labels, main_metric(suite)
    if len(labels) < 2:
        return f"suite {suite.name} has one model ({labels[0] if labels else '–'})"
    d = suite.delta(labels[0], labels[-1], "overall", metric)
    if not d or not is_num(d.get("delta")):
        return f"suite {suite.name} {metric}: {labels[0]} → {labels[-1]} not tested"
    return (f"suite {suite.name} {metric} moved {points(float(d['delta']))} {labels[0]} → {labels[-1]} "
            f"({_test_text(d)[2:]})")


def verdict_text(suites: list[Suite], facts: dict[str, StageFacts]) -> str:
    main = primary(suites)
    if main is None:
        return ""
    clauses = [_main_clause(main, facts)] + [_other_clause(s) for s in suites if s is not main]
    capped = [f"{name} {f.capped}" for name, f in facts.items() if f.capped]
    return "; ".join(clauses + [f"WARNING: {c}" for c in capped]) + "."


def stage_table(suite: Suite, facts: dict[str, StageFacts], notes: dict[tuple[str, str], str] | None = None) -> str:
    """Rows per (stage, domain): score [CI], Δ vs the stage before, p, significant, n, wall time, notes
    (the time cap; `notes[(label, domain)]`, e.g. empty or capped completions)."""
    metric, labels, notes = main_metric(suite), suite.labels, notes or {}
    rows = []
    for i, label in enumerate(labels):
        f = facts.get(label, StageFacts())
        for j, domain in enumerate(["overall"] + suite.domains()):
            d = suite.delta(labels[i - 1], label, domain, metric) if i else None
            v, ci = suite.value(label, domain, metric), suite.ci(label, domain, metric)
            score = "–" if v is None else fmt(v) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")
            sig = {True: "yes", False: "no"}.get(d.get("significant"), "–") if d else "–"
            note = [f'<span class="fail">{e(f.capped)}</span>'] if f.capped and not j else []
            note += [e(notes[(label, domain)])] if (label, domain) in notes else []
            rows.append([e(label) if not j else "", e(domain),
                         e(score), signed(float(d["delta"]), bold=sig == "yes") if d and is_num(d.get("delta")) else "–",
                         e(p_text(d.get("p_value"))) if d else "–", sig,
                         e(fmt(d.get("n") if d else suite.n(label, domain))),
                         e(duration(f.seconds) + (f" ({f.source})" if f.source and f.source != "stage" else ""))
                         if not j else "", "; ".join(note)])
    header = ["stage", "domain", f"{metric} [95% CI]", "Δ vs stage before", "p", "significant", "n", "wall time",
              "notes"]
    return table(header, rows, raw_cells=True, cls="stages")


def render_verdict(suites: list[Suite], facts: dict[str, StageFacts],
                   notes: dict[tuple[str, str], str] | None = None) -> str:
    text = verdict_text(suites, facts)
    main = primary(suites)
    if not text or main is None:
        return ""
    return (f'<p class="verdict">{e(text)}</p>'
            f"<h3>What each stage changed: suite {e(main.name)}</h3>" + stage_table(main, facts, notes))
