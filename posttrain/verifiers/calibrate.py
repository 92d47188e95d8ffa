"""Calibration: how well each verifier agrees with human labels from a spot check.

    report = calibrate("runs/rl1", "runs/rl1/spotcheck/spotcheck.jsonl")  # also writes calibration.json
    print(format_calibration(report))

The labels file is `spotcheck.jsonl` with "label" filled in by a human: true/false, 1/0, or
"correct"/"wrong" (also "true"/"false", "yes"/"no", "incorrect"; any case). A line whose label is
null, missing or "" is unlabelled: skipped and counted. Any other label, or a line that is not a
JSON object, is a DataError naming file:line.

For each verifier in the lines' "scores", and for the combined "score", against the labels
(positive = the human says correct, predicted positive = value >= 0.5), over the labelled lines
where it has a numeric value:
    n, positives (human), predicted (verifier), tp/fp/fn/tn, precision, recall, f1, accuracy
(None when the denominator is 0; f1 = 2tp/(2tp+fp+fn), None when precision or recall is). For a score-valued
verifier (some value strictly between 0 and 1) also "suggested": the threshold among the values
seen that maximises F1 (ties -> the higher threshold) with its precision, recall and f1.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from posttrain.errors import DataError
from posttrain.fsio import write_text_atomic

THRESHOLD = 0.5
_TRUE = {"correct", "true", "yes", "1", "right", "pass"}
_FALSE = {"wrong", "false", "no", "0", "incorrect", "fail"}


def parse_label(value, where: str) -> bool | None:
    """True / False for a human label, None when unlabelled; DataError naming `where` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v == "":
            return None
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    raise DataError(f"{where}: label {value!r} is not one of true/false, 1/0, \"correct\"/\"wrong\" "
                    "(null = unlabelled)")


def _number(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x:
        return None
    return float(x)


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def confusion(pairs: list[tuple[float, bool]], threshold: float = THRESHOLD) -> dict:
    """Precision/recall/F1/accuracy of `value >= threshold` against the human label."""
    tp = sum(v >= threshold and y for v, y in pairs)
    fp = sum(v >= threshold and not y for v, y in pairs)
    fn = sum(v < threshold and y for v, y in pairs)
    tn = len(pairs) - tp - fp - fn
    p, r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    f1 = None if p is None or r is None else 2 * tp / (2 * tp + fp + fn)  # = 2PR/(P+R), exact ties
    return {"n": len(pairs), "positives": tp + fn, "predicted": tp + fp, "tp": tp, "fp": fp, "fn": fn,
            "tn": tn, "precision": p, "recall": r, "f1": f1, "accuracy": _ratio(tp + tn, len(pairs))}


def best_threshold(pairs: list[tuple[float, bool]]) -> dict | None:
    """The threshold among the values seen with the highest F1 (ties -> the higher one)."""
    best = None
    for t in sorted({v for v, _ in pairs}):
        c = confusion(pairs, t)
        if c["f1"] is not None and (best is None or c["f1"] >= best["f1"]):
            best = {"threshold": t, "precision": c["precision"], "recall": c["recall"], "f1": c["f1"]}
    return best


def evaluate(pairs: list[tuple[float, bool]]) -> dict:
    """confusion() at 0.5, plus "score_valued" and "suggested" (None unless score-valued)."""
    out = confusion(pairs)
    out["score_valued"] = any(0.0 < v < 1.0 for v, _ in pairs)
    out["suggested"] = best_threshold(pairs) if out["score_valued"] else None
    return out


def read_labels(path: Path) -> tuple[list[tuple[dict, bool]], int]:
    """[(line, label)] of the labelled lines, and the number of unlabelled ones."""
    labelled, unlabelled = [], 0
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise DataError(f"cannot read labels file {path}: {e.strerror or e}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise DataError(f"{where}: not valid JSON ({str(e)[:80]})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
            label = parse_label(rec.get("label"), where)
            if label is None:
                unlabelled += 1
            else:
                labelled.append((rec, label))
    return labelled, unlabelled


def resolve_labels(run_dir: str | Path, labels_path: str | Path | None) -> Path:
    """labels_path as given, else relative to run_dir; default RUN_DIR/spotcheck/spotcheck.jsonl."""
    if labels_path is None:
        return Path(run_dir) / "spotcheck" / "spotcheck.jsonl"
    p = Path(labels_path)
    if not p.exists() and not p.is_absolute() and (Path(run_dir) / p).exists():
        return Path(run_dir) / p
    return p


def calibrate(run_dir: str | Path, labels_path: str | Path | None = None) -> dict:
    """The calibration report (see the module docstring); written to calibration.json beside the labels."""
    path = resolve_labels(run_dir, labels_path)
    labelled, unlabelled = read_labels(path)
    if not labelled:
        raise DataError(f"{path}: no labelled lines ({unlabelled} with label null); "
                        'set "label" to true/false on the lines you checked')
    per: dict[str, list[tuple[float, bool]]] = {}
    combined: list[tuple[float, bool]] = []
    for rec, label in labelled:
        scores = rec.get("scores")
        for name, value in (scores.items() if isinstance(scores, dict) else ()):
            if (v := _number(value)) is not None:
                per.setdefault(str(name), []).append((v, label))
        if (v := _number(rec.get("score"))) is not None:
            combined.append((v, label))
    report = {
        "labels": str(path),
        "labelled": len(labelled),
        "unlabelled": unlabelled,
        "human_correct": sum(y for _, y in labelled),
        "threshold": THRESHOLD,
        "verifiers": {name: evaluate(pairs) for name, pairs in sorted(per.items())},
        "combined": evaluate(combined) if combined else None,
    }
    write_text_atomic(path.parent / "calibration.json", json.dumps(report, indent=2) + "\n")
    return report


def _f(x) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def format_calibration(report: dict) -> str:
    """A readable table of the report."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"verifier vs human labels (pass = value >= {report['threshold']})")
    for col in ("verifier", "n", "human+", "pred+", "precision", "recall", "F1", "accuracy",
                "best thr", "P@best", "R@best", "F1@best"):
        table.add_column(col, justify="left" if col == "verifier" else "right")
    rows = list(report["verifiers"].items())
    if report.get("combined"):
        rows.append(("(combined score)", report["combined"]))
    for name, r in rows:
        s = r.get("suggested") or {}
        table.add_row(name, _f(r["n"]), _f(r["positives"]), _f(r["predicted"]), _f(r["precision"]),
                      _f(r["recall"]), _f(r["f1"]), _f(r["accuracy"]), _f(s.get("threshold")),
                      _f(s.get("precision")), _f(s.get("recall")), _f(s.get("f1")))
    buf = io.StringIO()
    console = Console(file=buf, width=130, color_system=None, force_terminal=False)
    console.print(f"{report['labels']}: {report['labelled']} labelled "
                  f"({report['human_correct']} correct), {report['unlabelled']} unlabelled skipped")
    console.print(table)
    return buf.getvalue()
