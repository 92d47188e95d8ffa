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
from posttrain.recipes.rl_groups import ScoredGroup
from posttrain.rollout.engine import SamplingParams
from posttrain.types import Task
from posttrain.verifiers import run_verifiers, task_score


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _summary(groups: list[ScoredGroup]) -> dict[str, float]:
    raw = [r for g in groups for r in g.raw if r is not None]
    lengths = [sum(t.loss_mask) for g in groups for t in g.trajectories[g.replayed:]]
    return {
        "score": _mean(raw),
        "pass_rate": _mean([float(r >= CORRECT) for r in raw]),
        "zero_variance_frac": _mean([float(not g.has_signal) for g in groups]),
        "completion_len": _mean([float(n) for n in lengths]),
    }


def domain_metrics(kept: list[ScoredGroup], generated: list[ScoredGroup]) -> dict[str, float]:
    out = _summary(generated)
    rewards = [t.reward for g in kept for t in g.trajectories if t.reward is not None]
    out["reward"] = _mean(rewards)
    by_domain: dict[str, list[ScoredGroup]] = defaultdict(list)
    for g in generated:
        by_domain[g.task.domain].append(g)
    for domain, groups in sorted(by_domain.items()):
        out.update({f"{k}/{domain}": v for k, v in _summary(groups).items()})
        kept_rewards = [t.reward for g in kept if g.task.domain == domain for t in g.trajectories
                        if t.reward is not None]
        out[f"reward/{domain}"] = _mean(kept_rewards)
    return out


def evaluate(engine, tokenizer, eval_sets: dict[str, list[Task]], stop_ids, max_tokens: int) -> dict[str, float]:
    tasks = [t for domain in sorted(eval_sets) for t in eval_sets[domain]]
    if not tasks:
        return {}
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop_token_ids=tuple(stop_ids))
    trajs = rollout(engine, tokenizer, tasks, [1] * len(tasks), params, [0] * len(tasks), engine.version)
    correct: dict[str, list[float]] = defaultdict(list)
    for task, (traj,) in zip(tasks, trajs):
        scores, errors = run_verifiers(task, traj)
        value = task_score(scores, task)
        correct[task.domain].append(float(not errors and value is not None and value >= CORRECT))
    out = {f"pass@1/{d}": _mean(v) for d, v in sorted(correct.items())}
    out["pass@1"] = _mean(list(out.values()))
    return out
