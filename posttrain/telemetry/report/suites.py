"""Suite comparisons the report leads with: RUN_DIR/eval/<SUITE>/compare.json (posttrain.eval.compare)
and the eval JSON of each model it names (posttrain.eval.run format, next to it).

    suite = load_suite(run_dir / "eval" / "general" / "compare.json")   # None: not a comparison
    suite.labels                                  # ["base", "sft", "rl"], pipeline order
    suite.value("rl", "overall", "pass@1")        # 0.41, from rl's eval JSON ("overall" or "domains"[D])
    suite.ci("rl", "gcd", "pass@1")               # [lo, hi] or None
    suite.delta("sft", "rl", "overall", "pass@1") # the compare.json delta entry (delta, p_value, significant, ...)
    suite.delta("base", "rl", "overall", "pass@1")# first -> last: compare.json's `span` (3+ models)

compare.json: {"suite", "metrics": ["pass@1", "pass@8"], "models": [{"label", "path", "file"}, ...],
"deltas": [{"from", "to", "domain", "metric", "delta", "p_value", "significant", "test", "n"}, ...],
"span": [the same, first model -> last; only with 3+ models],
"gates": [{"name", "suite", "metric", "domain", "max_drop", "baseline", "model", "baseline_value",
"value", "drop", "passed"}, ...]}. A model's "file" is looked up inside the suite folder only; a
file that is missing or unreadable leaves that model's values empty and is listed in `missing`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.telemetry.report.html import is_num

COMPARE_FILE = "compare.json"
MAX_JSON_BYTES = 50_000_000


def read_json(path: Path) -> Any:
    """The parsed file, or None when it is unreadable, not JSON, or over MAX_JSON_BYTES."""
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class Suite:
    name: str
    path: Path  # the suite folder
    compare: dict[str, Any]
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> eval JSON
    files: dict[str, Path] = field(default_factory=dict)  # label -> its eval JSON's path
    missing: list[str] = field(default_factory=list)  # files named in compare.json that could not be read

    @property
    def labels(self) -> list[str]:
        return [str(m.get("label")) for m in self.compare["models"] if isinstance(m, dict)]

    @property
    def metrics(self) -> list[str]:
        """compare.json's metrics, else the first model's eval JSON's, else pass@1."""
        for metrics in [self.compare.get("metrics")] + [ev.get("metrics") for ev in self.evals.values()]:
            if isinstance(metrics, list) and metrics:
                return [str(m) for m in metrics]
        return ["pass@1"]

    @property
    def gates(self) -> list[dict[str, Any]]:
        return [g for g in self.compare.get("gates") or [] if isinstance(g, dict)]

    @property
    def deltas(self) -> list[dict[str, Any]]:
        return [d for d in self.compare.get("deltas") or [] if isinstance(d, dict)]

    def domains(self) -> list[str]:
        """Every domain any model's eval has, sorted."""
        return sorted({d for ev in self.evals.values() for d, row in ev["domains"].items() if isinstance(row, dict)})

    def _row(self, label: str, domain: str) -> dict[str, Any]:
        ev = self.evals.get(label, {})
        row = ev.get("overall") if domain == "overall" else ev.get("domains", {}).get(domain)
        return row if isinstance(row, dict) else {}

    def value(self, label: str, domain: str, metric: str) -> float | None:
        v = self._row(label, domain).get(metric)
        return float(v) if is_num(v) else None

    def ci(self, label: str, domain: str, metric: str) -> list[float] | None:
        v = self._row(label, domain).get(f"{metric}_ci95")
        return [float(x) for x in v] if isinstance(v, list) and len(v) == 2 and all(is_num(x) for x in v) else None

    def n(self, label: str, domain: str) -> int | None:
        v = self._row(label, domain).get("n")
        return int(v) if is_num(v) else None

    def delta(self, a: str, b: str, domain: str, metric: str) -> dict[str, Any] | None:
        span = [d for d in self.compare.get("span") or [] if isinstance(d, dict)]
        return next((d for d in self.deltas + span if (d.get("from"), d.get("to"), d.get("domain"), d.get("metric"))
                     == (a, b, domain, metric)), None)


def load_suite(compare_path: Path) -> Suite | None:
    """The suite whose compare.json this is; None when the file is not a comparison (no "models" list)."""
    compare = read_json(compare_path)
    if not isinstance(compare, dict) or not isinstance(compare.get("models"), list):
        return None
    folder = compare_path.parent
    suite = Suite(name=str(compare.get("suite") or folder.name), path=folder, compare=compare)
    for model in compare["models"]:
        if not isinstance(model, dict):
            continue
        name = Path(str(model.get("file") or f"{model.get('label')}.json")).name
        data = read_json(folder / name)
        if isinstance(data, dict) and isinstance(data.get("domains"), dict):
            suite.evals[str(model.get("label"))], suite.files[str(model.get("label"))] = data, folder / name
        else:
            suite.missing.append(name)
    return suite
