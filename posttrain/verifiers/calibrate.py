"""Calibration: how well each verifier agrees with human labels from a spot check.

    report = calibrate("runs/rl1", "runs/rl1/spotcheck/spotcheck.jsonl")  # also writes calibration.json
    print(format_calibration(report))                  # and runs/rl1/verifier_thresholds.json
    thresholds = resolve_thresholds("runs/rl1/verifier_thresholds.json")   # {name: t}, checked

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

The thresholds file (`verifier_thresholds.json` in the run directory unless told otherwise) holds
the suggested threshold of every score-valued verifier; binary verifiers (values 0/1 only) get
none, since any threshold in (0, 1] gives them the same verdicts, and the combined score is not a
verifier. Format:
    {"thresholds": {"llm_judge": 0.4},                       # what is applied
     "measured": {"llm_judge": {"n": 8, "precision": 0.6, "recall": 0.75, "f1": 0.667}},
     "labels": "runs/rl1/spotcheck/spotcheck.jsonl", "labelled": 9}
"measured" is that threshold's precision/recall/F1 on the labels, for the reader; only
"thresholds" is read back. A domain applies the file with `verifier_thresholds: PATH` (or an
inline `{name: t}`) in its task-mixture entry, and a verifier then passes when value >= t
(ensemble.py says what a threshold does under the mean/weights rules). `resolve_thresholds` reads
and checks either form: a hand-written file may also be the flat `{name: t}` object. Bad input is a
one-line ConfigError: a missing or corrupt file names the file, a verifier that is not registered
names it and lists the registered ones, a threshold that is not a number in [0, 1] names its key.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from posttrain.core.errors import ConfigError, DataError
from posttrain.core.fsio import write_text_atomic

THRESHOLD = 0.5
THRESHOLDS_FILE = "verifier_thresholds.json"  # in the run directory
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


def calibrate(run_dir: str | Path, labels_path: str | Path | None = None,
              thresholds_out: str | Path | None = None) -> dict:
    """The calibration report (see the module docstring); written to calibration.json beside the
    labels, and the thresholds file to `thresholds_out` (default RUN_DIR/verifier_thresholds.json),
    whose path the report gives under "thresholds_file"."""
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
    out = Path(thresholds_out) if thresholds_out is not None else Path(run_dir) / THRESHOLDS_FILE
    report["thresholds_file"] = str(out)
    write_text_atomic(path.parent / "calibration.json", json.dumps(report, indent=2) + "\n")
    write_text_atomic(out, json.dumps(thresholds_document(report), indent=2) + "\n")
    return report


def thresholds_document(report: dict) -> dict:
    """The thresholds file's content for a calibration report (format in the module docstring)."""
    thresholds, measured = {}, {}
    for name, r in report["verifiers"].items():
        if s := r.get("suggested"):
            thresholds[name] = s["threshold"]
            measured[name] = {"n": r["n"], "precision": s["precision"], "recall": s["recall"], "f1": s["f1"]}
    return {"thresholds": thresholds, "measured": measured, "labels": report["labels"],
            "labelled": report["labelled"]}


def check_thresholds(mapping, where: str = "") -> dict[str, float]:
    """{verifier: threshold} as floats, each verifier registered and each threshold in [0, 1];
    a one-line ConfigError prefixed with `where` (a file, or a config key) otherwise."""
    from posttrain.verifiers.registry import get_verifier

    at = f"{where}: " if where else ""
    if not isinstance(mapping, dict):
        raise ConfigError(f"{at}expected a mapping of verifier name -> threshold, got {type(mapping).__name__}")
    out = {}
    for name, value in mapping.items():
        try:
            get_verifier(str(name))
        except ConfigError as e:
            raise ConfigError(f"{at}threshold for a verifier that is not registered: {e}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"{at}threshold {name!r} must be a number in [0, 1], got {value!r}")
        out[str(name)] = float(value)
    return out


def read_thresholds(path: str | Path) -> dict[str, float]:
    """The checked {verifier: threshold} of a thresholds file (its "thresholds", or a flat object)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read thresholds file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"thresholds file {path}: not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"thresholds file {path}: not valid JSON ({str(e)[:80]})") from None
    if isinstance(doc, dict) and "thresholds" in doc:
        doc = doc["thresholds"]
    return check_thresholds(doc, f"thresholds file {path}")


def resolve_thresholds(value, where: str = "") -> dict[str, float] | None:
    """A domain's `verifier_thresholds`: None stays None, a str is a thresholds file to read, a
    mapping is checked inline; the result is a checked {verifier: threshold}."""
    if value is None:
        return None
    if isinstance(value, (str, Path)):
        return read_thresholds(value)
    return check_thresholds(value, where)


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
