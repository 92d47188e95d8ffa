"""Side-by-side evals: deltas between models on the same tasks, their significance, and gates.

    cmp = compare([("base", base_json), ("sft", sft_json), ("rl", rl_json)], suite="general")
    cmp["deltas"][0]   # {"from": "base", "to": "sft", "domain": "chain_sum", "metric": "pass@1", "delta": 0.12,
                       #  "p_value": 0.003, "significant": True, "test": "mcnemar", "n": 200}
    cmp["span"]        # with 3+ models: the first model against the last, the same tests (the report's verdict)
    gates = check_gates(cfg.gates, cmp)   # one row per gate: baseline and model values, drop, passed

Each eval JSON (eval/run.py) carries `per_task`: task id -> samples correct of K. Two models
are compared over the tasks both saw (they must be the same tasks: the same suite, seed and
spec give the same ids; a mismatch is a ConfigError). Tests, both paired over tasks, alpha 0.05:

- **exact McNemar** for pass@1 of a domain when both evals took one sample per task: the tasks
  where exactly one model was right are the only evidence; under "no difference" each such
  task goes either way with probability 1/2, so the two-sided p-value is the binomial tail
  2 * P(X <= min(b, c)) for X ~ Bin(b + c, 1/2), capped at 1 (b + c = 0 gives p = 1).
- **paired bootstrap** otherwise (pass@k from K > 1 samples, and every `overall` row, which is
  the mean over domains): resample the tasks with replacement (within each domain, so every
  domain keeps its size), 10,000 times from a fixed seed, recompute the delta of the metric on
  the resample for both models together, and take p = 2 * min(P(delta* <= 0), P(delta* >= 0)),
  capped at 1. A delta whose resamples all lie on one side has p = 2 / (B + 1) at most.

A gate fails when baseline - value > max_drop (value and baseline: the metric of the gate's
domain, or of `overall`), whatever the significance: a gate is a contract on the number.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from posttrain.core.errors import ConfigError
from posttrain.eval.passk import pass_at_k

ALPHA = 0.05
BOOTSTRAP = 10_000
SEED = 0


def mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (only A right) and c (only B right)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def _task_values(per_task: dict[str, dict[str, Any]], ids: Sequence[str], k: int) -> np.ndarray:
    return np.array([pass_at_k(per_task[i]["samples"], per_task[i]["correct"], k) for i in ids])


def bootstrap_p(groups: Sequence[tuple[np.ndarray, np.ndarray]], seed: int = SEED, rounds: int = BOOTSTRAP) -> float:
    """p-value of the paired bootstrap for delta = mean over groups of mean(b - a) (module docstring)."""
    rng = np.random.default_rng(seed)
    deltas = np.zeros(rounds)
    for a, b in groups:
        diff = b - a
        picks = rng.integers(0, len(diff), size=(rounds, len(diff)))
        deltas += diff[picks].mean(axis=1)
    deltas /= len(groups)
    p = 2.0 * min(float(np.mean(deltas <= 0)), float(np.mean(deltas >= 0)))
    return min(1.0, max(p, 2.0 / (rounds + 1)) if np.any(deltas != 0) else 1.0)


def _by_domain(per_task: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for task_id, row in per_task.items():
        out.setdefault(row["domain"], []).append(task_id)
    return {d: sorted(ids) for d, ids in sorted(out.items())}


def paired_delta(a: dict[str, Any], b: dict[str, Any], metric: str, domain: str | None) -> dict[str, Any]:
    """delta = b - a of `metric` on `domain` (None: overall, the mean over domains), with its test."""
    k = int(metric.split("@")[1])
    pa, pb = a["per_task"], b["per_task"]
    domains = _by_domain(pa)
    if domain is not None:
        domains = {domain: domains[domain]}
    groups = [(_task_values(pa, ids, k), _task_values(pb, ids, k)) for ids in domains.values()]
    delta = float(np.mean([gb.mean() - ga.mean() for ga, gb in groups]))
    binary = k == 1 and all(pa[i]["samples"] == 1 and pb[i]["samples"] == 1 for ids in domains.values() for i in ids)
    if domain is not None and binary:
        ga, gb = groups[0]
        p, test = mcnemar_p(int(np.sum((ga == 1) & (gb == 0))), int(np.sum((ga == 0) & (gb == 1)))), "mcnemar"
    else:
        p, test = bootstrap_p(groups), "paired_bootstrap"
    return {"domain": domain or "overall", "metric": metric, "delta": delta, "p_value": p,
            "significant": bool(p < ALPHA), "test": test, "n": sum(len(ids) for ids in domains.values())}


def _check_same_tasks(label_a: str, a: dict[str, Any], label_b: str, b: dict[str, Any]) -> None:
    ta, tb = set(a.get("per_task") or {}), set(b.get("per_task") or {})
    if not ta or not tb:
        missing = label_a if not ta else label_b
        raise ConfigError(f"compare: the eval of {missing!r} has no per_task results (re-run it with this version)")
    if ta != tb:
        only = sorted(ta ^ tb)[0]
        raise ConfigError(f"compare: {label_a!r} and {label_b!r} were evaluated on different tasks "
                          f"(e.g. {only!r}); compare evals of the same suite and seed")


def compare(results: Sequence[tuple[str, dict[str, Any]]], suite: str | None = None) -> dict[str, Any]:
    """Deltas of every consecutive pair (per domain and overall, every metric both report); with three
    or more models also `span`, the first against the last."""
    if not results:
        raise ConfigError("compare: no evals to compare")
    metrics = [m for m in results[0][1]["metrics"] if all(m in r["metrics"] for _, r in results)]
    deltas = []
    for (la, a), (lb, b) in zip(results, results[1:]):
        _check_same_tasks(la, a, lb, b)
        for metric in metrics:
            for domain in [*a["domains"], None]:
                deltas.append({"from": la, "to": lb, **paired_delta(a, b, metric, domain)})
    out = {"suite": suite, "metrics": metrics,
           "models": [{"label": label, "path": r.get("model")} for label, r in results], "deltas": deltas}
    if len(results) > 2:  # the whole pipeline's change, first model to last, with the same tests
        (la, a), (lb, b) = results[0], results[-1]
        out["span"] = [{"from": la, "to": lb, **paired_delta(a, b, metric, domain)}
                       for metric in metrics for domain in [*a["domains"], None]]
    return out


def metric_value(result: dict[str, Any], metric: str, domain: str | None) -> float:
    row = result["overall"] if domain is None else result["domains"].get(domain)
    if row is None or metric not in row:
        raise ConfigError(f"gate: the eval of {result.get('label')!r} has no {metric} for "
                          f"{domain or 'overall'} (domains: {', '.join(result['domains'])})")
    return float(row[metric])


def gate_row(gate, baseline_label: str, baseline_value: float, label: str, value: float) -> dict[str, Any]:
    drop = baseline_value - value
    return {"name": gate.name, "suite": gate.suite, "metric": gate.metric, "domain": gate.domain or "overall",
            "max_drop": gate.max_drop, "baseline": baseline_label, "model": label, "baseline_value": baseline_value,
            "value": value, "drop": drop, "passed": bool(drop <= gate.max_drop + 1e-12)}


def check_gates(gates: Sequence[Any], suite: str, results: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each gate of `suite`: the last model against the gate's baseline (default the first model)."""
    rows = []
    by_label = dict(results)
    for gate in (g for g in gates if g.suite == suite):
        base_label = gate.baseline or results[0][0]
        if base_label not in by_label:
            raise ConfigError(f"gates: baseline {base_label!r} is not among the compared models "
                              f"({', '.join(by_label)})")
        label, last = results[-1]
        rows.append(gate_row(gate, base_label, metric_value(by_label[base_label], gate.metric, gate.domain),
                             label, metric_value(last, gate.metric, gate.domain)))
    return rows
