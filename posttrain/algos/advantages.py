"""Outcome-reward advantage estimators: rewards [G, K] -> advantages [G, K].

G groups (one task each) x K samples; `valid` [G, K] bool is False where a reward is
missing (None) or the slot is padding. Invalid slots get advantage 0 and never enter
any statistic (their reward value, even NaN, is ignored).

With r the rewards of one group's valid samples (n of them):

- "grpo" (GRPO, Shao et al. 2024, "DeepSeekMath"):
      A = (r - mean(r)) / (std(r) + eps),  std = POPULATION std (divide by n, i.e.
      torch.std(unbiased=False)), so a group of two rewards {0, 1} gives A = {-1, +1}.
- "dr_grpo" (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like Training"):
      A = r - mean(r)   (no std scaling: avoids up-weighting near-uniform groups).
- "rloo" (RLOO, Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style ..."):
      A_i = r_i - mean_{j != i}(r_j) = n/(n-1) * (r_i - mean(r)).
- "reinforce_pp" (REINFORCE++, Hu 2025): no group baseline; over ALL valid samples of the batch
      A = (r - batch mean) / (batch population std + eps).
- "reinforce_pp_baseline" (REINFORCE++-baseline, Hu 2025): A' = r - group mean, then
      A = (A' - batch mean(A')) / (batch population std(A') + eps) over the samples of groups
      that have a baseline (>= 2 valid samples).

Group-relative estimators (all but "reinforce_pp") give advantage 0 to every sample of a
group with fewer than 2 valid samples (no baseline to compare against). All-equal rewards
give exactly 0 (no NaN): the numerator is 0 and eps keeps the denominator positive.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def _check(rewards: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [G, K] (groups x samples), got shape {tuple(rewards.shape)}")
    if valid.shape != rewards.shape:
        raise ValueError(f"valid shape {tuple(valid.shape)} != rewards shape {tuple(rewards.shape)}")
    valid = valid.to(torch.bool)
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    if not torch.isfinite(rewards[valid]).all():
        raise ValueError("rewards must be finite wherever valid is True (mark missing rewards invalid)")
    r = torch.where(valid, rewards.to(dtype), torch.zeros((), dtype=dtype))
    return r, valid


def _group_stats(r: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group count n [G,1], mean [G,1] and population std [G,1] over valid samples."""
    m = valid.to(r.dtype)
    n = m.sum(dim=1, keepdim=True)
    mean = (r * m).sum(dim=1, keepdim=True) / n.clamp(min=1)
    var = (((r - mean) * m) ** 2).sum(dim=1, keepdim=True) / n.clamp(min=1)
    return n, mean, var.sqrt()


def _batch_normalise(a: Tensor, use: Tensor, eps: float) -> Tensor:
    m = use.to(a.dtype)
    n = m.sum().clamp(min=1)
    mean = (a * m).sum() / n
    std = ((((a - mean) * m) ** 2).sum() / n).sqrt()
    return torch.where(use, (a - mean) / (std + eps), torch.zeros((), dtype=a.dtype))


def grpo(rewards: Tensor, valid: Tensor, eps: float = 1e-6) -> Tensor:
    r, valid = _check(rewards, valid)
    n, mean, std = _group_stats(r, valid)
    use = valid & (n >= 2)
    return torch.where(use, (r - mean) / (std + eps), torch.zeros((), dtype=r.dtype))


def dr_grpo(rewards: Tensor, valid: Tensor) -> Tensor:
    r, valid = _check(rewards, valid)
    n, mean, _ = _group_stats(r, valid)
    use = valid & (n >= 2)
    return torch.where(use, r - mean, torch.zeros((), dtype=r.dtype))


def rloo(rewards: Tensor, valid: Tensor) -> Tensor:
    r, valid = _check(rewards, valid)
    m = valid.to(r.dtype)
    n = m.sum(dim=1, keepdim=True)
    total = (r * m).sum(dim=1, keepdim=True)
    loo_mean = (total - r) / (n - 1).clamp(min=1)
    use = valid & (n >= 2)
    return torch.where(use, r - loo_mean, torch.zeros((), dtype=r.dtype))


def reinforce_pp(rewards: Tensor, valid: Tensor, eps: float = 1e-6) -> Tensor:
    r, valid = _check(rewards, valid)
    return _batch_normalise(r, valid, eps)


def reinforce_pp_baseline(rewards: Tensor, valid: Tensor, eps: float = 1e-6) -> Tensor:
    r, valid = _check(rewards, valid)
    n, mean, _ = _group_stats(r, valid)
    use = valid & (n >= 2)
    return _batch_normalise(r - mean, use, eps)


ADVANTAGES: dict[str, Callable[..., Tensor]] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
}
GROUP_RELATIVE: frozenset[str] = frozenset(ADVANTAGES) - {"reinforce_pp"}


def get_estimator(name: str) -> Callable[..., Tensor]:
    """ADVANTAGES[name], or ValueError listing the known names."""
    try:
        return ADVANTAGES[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGES)}") from None
