"""Named suites on several models, side by side: `posttrain eval --suite NAME --model A --model B`.

    cmp = run_suite("general", suite_cfg, [("base", "runs/q/base/model"), ("rl", "runs/q/rl/final")],
                    out_dir="runs/q/eval", gates=cfg.gates)

Writes, each atomically, under out_dir/NAME/: `LABEL.json` (+ `LABEL.completions.jsonl`) for
every model (eval/run.py's format, with "suite" and "label" set) and `compare.json`:

    {"suite", "metrics", "models": [{"label", "path"}], "deltas": [... compare.py ...],
     "span": [first model -> last, when 3+ models],
     "gates": [{"name", "suite", "metric", "domain", "max_drop", "baseline", "model",
                "baseline_value", "value", "drop", "passed"}]}

then prints one table: each model's pass@k [95% CI] per domain and overall, and the delta of
each model against the one before with its p-value (`*` marks p < 0.05). Every model sees the
same tasks (the suite's spec, n and seed). Suites come from a config's `suites:` or
`eval: {suites:}` mapping (`load_suites`; configs/suites.yaml ships `general` and others).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from posttrain.config.eval import EvalConfig, GateConfig, SuiteConfig
from posttrain.core.errors import ConfigError
from posttrain.eval.compare import check_gates, compare
from posttrain.core.fsio import write_text_atomic

console = Console(stderr=True, highlight=False)
COMPARE_FILE = "compare.json"


def load_suites(path: str | Path, overrides: Sequence[str] = ()) -> tuple[dict[str, SuiteConfig], list[GateConfig]]:
    """The suites (and gates) of a YAML file: top-level `suites:` / `gates:`, or under `eval:`;
    dotted overrides (`suites.general.n=10`) apply on top."""
    from posttrain.config.base import deep_merge, parse_overrides, read_yaml, validate
    from posttrain.config.eval import EvalSection

    raw = read_yaml(path)
    section = raw["eval"] if isinstance(raw.get("eval"), dict) and "suites" in raw["eval"] else raw
    if "suites" not in section:
        raise ConfigError(f"{path}: no `suites:` mapping (expected suites: {{NAME: {{tasks: [...]}}}})")
    data = deep_merge({k: section[k] for k in ("suites", "gates") if k in section}, parse_overrides(list(overrides)))
    parsed = validate(EvalSection, data, str(path))
    return parsed.suites, parsed.gates


def eval_config(name: str, suite: SuiteConfig, label: str, model: str, out: Path, **engine: Any) -> EvalConfig:
    """The single eval run of `suite` on one model."""
    fields = suite.model_dump(exclude={"n", "models"})
    return EvalConfig(**fields, n_per_domain=suite.n, model=model, out=str(out), suite=name, label=label, **engine)


def check_models(models: Sequence[tuple[str, str]]) -> None:
    labels = [label for label, _ in models]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ConfigError(f"eval: two models are labelled {dup[0]!r}; give each --model a distinct --label")
    for label, path in models:
        if not (Path(path) / "config.json").is_file():
            raise ConfigError(f"eval: model {label!r}: {path} is not a model directory (no config.json)")


def run_suite(name: str, suite: SuiteConfig, models: Sequence[tuple[str, str]], out_dir: str | Path,
              gates: Sequence[GateConfig] = (), **engine: Any) -> dict[str, Any]:
    """Evaluate every model on the suite, compare them, check the suite's gates; returns compare.json's dict."""
    from posttrain.eval import run as harness
    from posttrain.eval.sources import parse_items

    check_models(models)
    parse_items(suite.tasks, suite.n)  # an unknown domain fails before any model loads
    folder = Path(out_dir) / name
    results = []
    for label, path in models:
        console.print(f"[bold]suite {name}[/]: {label} ({path})")
        results.append((label, harness.run(eval_config(name, suite, label, path, folder / f"{label}.json", **engine),
                                           table=False)))
    out = compare(results, suite=name)
    for entry, (label, _) in zip(out["models"], results):
        entry["file"] = f"{label}.json"
    out["gates"] = check_gates(gates, name, results)
    write_text_atomic(folder / COMPARE_FILE, json.dumps(out, indent=2) + "\n")
    print_comparison(out, dict(results))
    return out


def _delta_cell(cmp: dict[str, Any], label: str, domain: str, metric: str) -> str:
    row = next((d for d in cmp["deltas"] if d["to"] == label and d["domain"] == domain and d["metric"] == metric), None)
    if row is None:
        return ""
    star = "[bold]*[/]" if row["significant"] else ""
    return f" [dim]{row['delta']:+.3f} p={row['p_value']:.3g}[/]{star}"


def print_comparison(cmp: dict[str, Any], results: dict[str, dict[str, Any]]) -> None:
    labels = [m["label"] for m in cmp["models"]]
    first = results[labels[0]]
    table = Table(title=f"suite {cmp['suite']}: {' -> '.join(labels)} (Δ vs the model before; * p < 0.05, "
                        f"McNemar / paired bootstrap)")
    table.add_column("domain")
    table.add_column("metric")
    for label in labels:
        table.add_column(label, justify="right")
    for domain in [*first["domains"], "overall"]:
        for metric in cmp["metrics"]:
            cells = []
            for label in labels:
                row = results[label]["overall"] if domain == "overall" else results[label]["domains"][domain]
                lo, hi = row[f"{metric}_ci95"]
                cells.append(f"{row[metric]:.3f} [dim][{lo:.2f}, {hi:.2f}][/]" + _delta_cell(cmp, label, domain, metric))
            table.add_row(f"[bold]{domain}[/]" if domain == "overall" else domain, metric, *cells)
    console.print(table)
    for gate in cmp.get("gates", []):
        mark = "[green]passed[/]" if gate["passed"] else "[bold red]FAILED[/]"
        console.print(f"gate {gate['name']}: {gate['model']} {gate['value']:.3f} vs {gate['baseline']} "
                      f"{gate['baseline_value']:.3f} (drop {gate['drop']:+.3f}) {mark}")
