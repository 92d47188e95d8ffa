"""Per-token KL estimators, entropy from logits, and the truncated importance-sampling weight.

kl_estimate — sample estimators of KL(pi || ref) from tokens drawn from pi (J. Schulman,
"Approximating KL Divergence", 2020), with d = logp - logr:
    k1 = d                          unbiased, high variance, can be negative
    k2 = d^2 / 2                    biased, low variance, >= 0
    k3 = exp(-d) - (-d) - 1         unbiased, low variance, >= 0  ("-d" clamped to [-20, 20])
All are differentiable in logprobs; at logp == logr the gradients w.r.t. logp are k1: 1, k2: 0, k3: 0.

entropy_from_logits — H = -sum p log p with p = softmax(z) per row, in fp32 (-inf logits allowed).

truncated_is_weight — TIS (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training"): the sampler (vLLM/SGLang/HF engine) and the trainer compute slightly
different probabilities, so the update is weighted by w = min(exp(trainer - sampler), cap),
detached (a weight, not a gradient path).
"""

from __future__ import annotations

import torch
from torch import Tensor

KL_KINDS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 20.0


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str) -> Tensor:
    """Per-token estimate [N] of KL(pi || ref); gradients flow into logprobs only."""
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; known: {list(KL_KINDS)}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(f"logprobs shape {tuple(logprobs.shape)} != ref_logprobs shape {tuple(ref_logprobs.shape)}")
    ref = ref_logprobs.detach()
    if kind == "k1":
        return logprobs - ref
    if kind == "k2":
        return 0.5 * (logprobs - ref) ** 2
    log_ratio = torch.clamp(ref - logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(log_ratio) - log_ratio - 1.0


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy [N] (nats) of softmax(logits) for logits [N, V]."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [N, V], got shape {tuple(logits.shape)}")
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # masked vocabulary entries (logit -inf) have p = 0 and contribute 0, not 0 * -inf = NaN
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(dim=-1)


def truncated_is_weight(trainer_logprobs: Tensor, sampler_logprobs: Tensor, cap: float = 2.0) -> Tensor:
    """min(exp(trainer - sampler), cap) per token [N], with no gradient."""
    if trainer_logprobs.shape != sampler_logprobs.shape:
        raise ValueError(
            f"trainer_logprobs shape {tuple(trainer_logprobs.shape)} != "
            f"sampler_logprobs shape {tuple(sampler_logprobs.shape)}"
        )
    if not cap > 0:
        raise ValueError(f"TIS cap must be > 0, got {cap}")
    with torch.no_grad():
        log_ratio = torch.clamp(trainer_logprobs - sampler_logprobs, max=LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(log_ratio), max=cap)
