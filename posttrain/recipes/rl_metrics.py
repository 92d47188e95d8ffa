"""What the RL loop reports about its samples (its held-out eval is `eval/suite.evaluate_in_loop`,
the same code as `posttrain eval`).

- `domain_metrics`: per step, over every generated group (dropped ones included): mean raw
  `score`, `pass_rate`, `zero_variance_frac`, `completion_len`, and the mean shaped `reward`
  over the groups actually trained on; overall and per domain as `<metric>/<domain>` (so the
  report draws one plot per metric with a line per domain); and each reward source on its own:
  `verifier/<name>` (and `verifier/<name>/<domain>`), the mean value that verifier gave the
  current policy's samples (a reward model next to a verifiable reward shows as two lines);
"""

from __future__ import annotations

from collections import defaultdict

from posttrain.eval.run import CORRECT
from posttrain.core.types import Group


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _summary(groups: list[Group]) -> dict[str, float]:
    raw = [r for g in groups for r in g.raw[g.replayed:] if r is not None]  # what the current policy did
    lengths = [sum(t.loss_mask) for g in groups for t in g.fresh]
    by_verifier: dict[str, list[float]] = defaultdict(list)
    for g in groups:
        for t in g.fresh:
            for s in t.scores:
                by_verifier[s.verifier].append(s.value)
    return {
        "score": _mean(raw),
        "pass_rate": _mean([float(r >= CORRECT) for r in raw]),
        "zero_variance_frac": _mean([float(not g.has_signal) for g in groups]),
        "completion_len": _mean([float(n) for n in lengths]),
        **{f"verifier/{name}": _mean(values) for name, values in sorted(by_verifier.items())},
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
