"""What the RL loop reports about its samples and its held-out progress.

- `domain_metrics`: per step, over every generated group (dropped ones included): mean raw
  `score`, `pass_rate`, `zero_variance_frac`, `completion_len`, and the mean shaped `reward`
  over the groups actually trained on; overall and per domain as `<metric>/<domain>` (so the
  report draws one plot per metric with a line per domain);
- `evaluate`: greedy pass@1 on held-out tasks through the rollout engine, `pass@1/<domain>`
  and `pass@1` (the mean over domains).
"""

from __future__ import annotations

from collections import defaultdict

from posttrain.envs.single_turn import rollout
from posttrain.eval.harness import CORRECT
from posttrain.types import Group
from posttrain.rollout.engine import SamplingParams
from posttrain.types import Task
from posttrain.verifiers import run_verifiers, task_score


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _summary(groups: list[Group]) -> dict[str, float]:
    raw = [r for g in groups for r in g.raw[g.replayed:] if r is not None]  # what the current policy did
    lengths = [sum(t.loss_mask) for g in groups for t in g.fresh]
    return {
        "score": _mean(raw),
        "pass_rate": _mean([float(r >= CORRECT) for r in raw]),
        "zero_variance_frac": _mean([float(not g.has_signal) for g in groups]),
        "completion_len": _mean([float(n) for n in lengths]),
    }


def domain_metrics(kept: list[Group], generated: list[Group]) -> dict[str, float]:
    out = _summary(generated)
    rewards = [t.reward for g in kept for t in g.trajectories if t.reward is not None]
    out["reward"] = _mean(rewards)
    by_domain: dict[str, list[Group]] = defaultdict(list)
    for g in generated:
        by_domain[g.task.domain].append(g)
    for domain, groups in sorted(by_domain.items()):
        out.update({f"{k}/{domain}": v for k, v in _summary(groups).items()})
        kept_rewards = [t.reward for g in kept if g.task.domain == domain for t in g.trajectories
                        if t.reward is not None]
        out[f"reward/{domain}"] = _mean(kept_rewards)
    return out


def evaluate(engine, tokenizer, eval_sets: dict[str, list[Task]], stop_ids, max_tokens: int) -> dict[str, float]:
    from posttrain.eval.suite import evaluate_in_loop  # the same code path as `posttrain eval`

    return evaluate_in_loop(engine, tokenizer, eval_sets, stop_ids, max_tokens)
