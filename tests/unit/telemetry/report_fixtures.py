"""A fake pipeline run dir for the report tests: an SFT and an RL stage (real MetricsLogger output with
the RL loop's metric names), a gate alert, and a suite comparison eval/general/{base,sft,rl}.json +
compare.json in the shapes posttrain.eval.run and posttrain.eval.compare write.

    run = suite_run(tmp_path / "run")                 # the values below are what the tests assert on
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.telemetry.metrics import MetricsLogger
from posttrain.verifiers.monitors import Alert, write_alerts

DOMAINS = ("gcd", "chain<sum>")
# overall pass@1 / pass@8 per model, and per-domain pass@1
OVERALL = {"base": (0.30, 0.55), "sft": (0.42, 0.66), "rl": (0.45, 0.64)}
PER_DOMAIN = {"base": (0.2, 0.4), "sft": (0.4, 0.44), "rl": (0.5, 0.4)}
DELTAS = [  # consecutive pairs, overall and per domain
    {"from": "base", "to": "sft", "domain": "overall", "metric": "pass@1", "delta": 0.12, "p_value": 0.003,
     "significant": True, "test": "paired_bootstrap", "n": 200},
    {"from": "sft", "to": "rl", "domain": "overall", "metric": "pass@1", "delta": 0.03, "p_value": 0.41,
     "significant": False, "test": "paired_bootstrap", "n": 200},
    {"from": "base", "to": "sft", "domain": "overall", "metric": "pass@8", "delta": 0.11, "p_value": 0.0004,
     "significant": True, "test": "paired_bootstrap", "n": 200},
    {"from": "sft", "to": "rl", "domain": "overall", "metric": "pass@8", "delta": -0.02, "p_value": 0.6,
     "significant": False, "test": "paired_bootstrap", "n": 200},
    {"from": "base", "to": "sft", "domain": "gcd", "metric": "pass@1", "delta": 0.2, "p_value": 0.001,
     "significant": True, "test": "mcnemar", "n": 100},
    {"from": "sft", "to": "rl", "domain": "gcd", "metric": "pass@1", "delta": 0.1, "p_value": 0.04,
     "significant": True, "test": "mcnemar", "n": 100},
    {"from": "base", "to": "sft", "domain": "chain<sum>", "metric": "pass@1", "delta": 0.04, "p_value": 0.5,
     "significant": False, "test": "mcnemar", "n": 100},
    {"from": "sft", "to": "rl", "domain": "chain<sum>", "metric": "pass@1", "delta": -0.04, "p_value": 0.45,
     "significant": False, "test": "mcnemar", "n": 100},
]
GATES = [
    {"name": "general/pass@1", "suite": "general", "metric": "pass@1", "domain": "overall", "max_drop": 0.02,
     "baseline": "base", "model": "rl", "baseline_value": 0.30, "value": 0.45, "drop": -0.15, "passed": True},
    {"name": "chain/pass@1", "suite": "general", "metric": "pass@1", "domain": "chain<sum>", "max_drop": 0.02,
     "baseline": "sft", "model": "rl", "baseline_value": 0.44, "value": 0.40, "drop": 0.04, "passed": False},
]
GATE_ALERT = {"name": "mid/pass@1", "suite": "general", "metric": "pass@1", "domain": "overall", "max_drop": 0.01,
              "baseline": "step 0", "model": "step 6", "baseline_value": 0.42, "value": 0.38, "drop": 0.04,
              "passed": False}


def _row(p1: float, p8: float, n: int) -> dict:
    return {"n": n, "pass@1": p1, "pass@1_ci95": [round(p1 - 0.05, 4), round(p1 + 0.05, 4)], "pass@8": p8,
            "pass@8_ci95": [round(p8 - 0.05, 4), round(p8 + 0.05, 4)], "mean_length": 30.0, "verifier_errors": 0}


def eval_doc(label: str, extra: dict | None = None) -> dict:
    p1, p8 = OVERALL[label]
    domains = {d: _row(v, min(1.0, v + 0.2), 100) for d, v in zip(DOMAINS, PER_DOMAIN[label])}
    return {"model": f"runs/{label}", "label": label, "suite": "general", "engine": "paged", "samples": 8,
            "metrics": ["pass@1", "pass@8"], "seed": 1_000_000, "domains": domains, "overall": _row(p1, p8, 200),
            "per_task": {"t0": {"domain": "gcd", "correct": 1, "samples": 8}}, **(extra or {})}


def _rl_metrics(s: int) -> dict:
    m = {"loss": 0.1, "reward": s / 10, "pass_rate": s / 12, "kl": 0.01 * s, "entropy": 1.0 - s / 20,
         "completion_len": 40.0 + s, "temperature": 1.0 - s / 40, "replay/share_trajectories": 0.25,
         "verify/agreement/math~exact": 0.9, "verify/disagreement/gcd": 0.1, "epoch": s // 5, "threads": 2,
         "time/rollout": 0.5, "time/update": 0.2}
    m.update({f"reward/{d}": s / (10 + i) for i, d in enumerate(DOMAINS)})
    if s % 4 == 0:  # held-out evals, the starting model's first
        m["pass@1"] = 0.3 + s / 100
        m.update({f"pass@1/{d}": 0.2 + s / (50 + i) for i, d in enumerate(DOMAINS)})
        m["suite/general/pass@1"] = 0.42 - s / 200
        m.update({f"suite/general/pass@1/{d}": 0.4 - s / (100 + i) for i, d in enumerate(DOMAINS)})
    return m


def suite_run(run: Path, extra: dict[str, dict] | None = None) -> Path:
    """The run dir; `extra`: label -> extra top-level keys of that model's eval JSON."""
    with MetricsLogger(run / "sft", tensorboard=False) as log:
        for s in range(1, 11):
            log.log(s, {"loss": 2.0 / s, "lr": 3e-4, "epoch": (s - 1) // 5, "train_examples": 270})
    with MetricsLogger(run / "rl", tensorboard=False) as log:
        for s in range(0, 13):
            log.log(s, _rl_metrics(s))
    write_alerts(run / "rl", [Alert(6, "gate", "gate mid/pass@1 failed: 0.380 at step 6", details=GATE_ALERT)])
    suite = run / "eval" / "general"
    suite.mkdir(parents=True)
    for label in OVERALL:
        (suite / f"{label}.json").write_text(json.dumps(eval_doc(label, (extra or {}).get(label))))
    models = [{"label": lb, "path": f"runs/{lb}", "file": f"{lb}.json"} for lb in OVERALL]
    (suite / "compare.json").write_text(json.dumps({"suite": "general", "metrics": ["pass@1", "pass@8"],
                                                    "models": models, "deltas": DELTAS, "gates": GATES}))
    return run


SPAN = [{"from": "base", "to": "rl", "domain": "overall", "metric": "pass@1", "delta": 0.15, "p_value": 1e-9,
         "significant": True, "test": "paired_bootstrap", "n": 200},
        {"from": "base", "to": "rl", "domain": "gcd", "metric": "pass@1", "delta": 0.3, "p_value": 1e-6,
         "significant": True, "test": "mcnemar", "n": 100}]
TIMINGS = {"base": 95.0, "sft": 180.0, "rl": 510.0, "eval": 60.0}


def _completion(i: int, domain: str, text: str, correct: bool, finish: str = "stop", score: float | None = None) -> str:
    return json.dumps({"id": f"{domain}/{i}", "domain": domain, "sample": 0, "completion": text,
                       "score": float(correct) if score is None else score, "correct": correct,
                       "finish_reason": finish, "num_tokens": 64 if finish == "length" else len(text.split()) + 1})


def lead_run(run: Path) -> Path:
    """suite_run plus what the report's lead reads: a base stage stopped by its time cap (base.json), the
    pipeline's timings.json, compare.json's `span` (base -> rl), and completions files: the base always
    runs to the 64-token cap, sft's chain<sum> completions are all empty, rl has right and wrong ones
    (one wrong completion carries HTML)."""
    suite_run(run)
    with MetricsLogger(run / "base", tensorboard=False) as log:
        for s in range(1, 6):
            log.log(s, {"loss": 5.0 / s, "total_params": 1_000_000})
    (run / "base" / "config.yaml").write_text("max_steps: 1000\nmax_seconds: 900\n")
    (run / "base" / "base.json").write_text(json.dumps({"stopped_by": "max_seconds", "steps": 412, "seconds": 900.0}))
    (run / "timings.json").write_text(json.dumps(TIMINGS))
    suite = run / "eval" / "general"
    cmp = json.loads((suite / "compare.json").read_text())
    (suite / "compare.json").write_text(json.dumps({**cmp, "span": SPAN}))
    for label in OVERALL:
        doc = json.loads((suite / f"{label}.json").read_text())
        (suite / f"{label}.json").write_text(json.dumps({**doc, "max_tokens": 64}))
    lines = {
        "base": [_completion(i, d, "1 2 3 " * 30, False, "length") for d in DOMAINS for i in range(5)],
        "sft": [_completion(i, "gcd", f"the answer is {i}", i % 2 == 0) for i in range(6)]
               + [_completion(i, "chain<sum>", "", False) for i in range(4)],
        "rl": [_completion(0, "gcd", "<b>bold</b> & wrong", False, score=0.0),
               _completion(1, "gcd", "almost", False, score=0.5),
               _completion(2, "gcd", "right", True), _completion(3, "gcd", "also right", True),
               _completion(4, "gcd", "third right", True), _completion(0, "chain<sum>", "7", True)],
    }
    for label, rows in lines.items():
        (suite / f"{label}.completions.jsonl").write_text("\n".join(rows) + "\n{torn line\n")
    return run
