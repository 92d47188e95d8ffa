"""Per-token policy-gradient losses and the token weights that aggregate them over a step.

Token tensors are flat: every trained token of a micro-batch concatenated, shape [N].

ppo_clip (PPO, Schulman et al. 2017; asymmetric "clip-higher" from DAPO, Yu et al. 2025;
dual-clip from Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL",
written as in verl's compute_policy_loss):
    r      = exp(logp - old_logp)                      (log-ratio clamped to [-20, 20])
    L_clip = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))
    L      = min(L_clip, -dual_clip * A)  where A < 0  (bounds the loss of a bad action whose
             ratio has blown up: |L| <= dual_clip * |A|);  L = L_clip where A >= 0
    Clipped tokens (the clamp or the dual clip is the active branch) get zero gradient.

token_weights: the step loss is sum_tokens w * L over every token of the optimizer step, so
summing micro-batch losses (gradient accumulation) equals one big batch exactly:
    "token_mean"   w = 1 / sum(seq_lengths)            (DAPO token-level loss)
    "seq_mean"     w = 1 / (seq_lengths[seq] * S)      (GRPO: mean over tokens, then over sequences)
    "seq_sum_norm" w = 1 / (max_tokens * S)            (Dr. GRPO: constant, no length normalisation)
where S = len(seq_lengths) = sequences in the step and seq_lengths[s] = trained tokens of s.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

AGGREGATIONS = ("token_mean", "seq_mean", "seq_sum_norm")


def ppo_clip(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token clipped surrogate loss [N] and detached scalar stats.

    stats: clip_frac (fraction of tokens where the ratio clamp is active), dual_clip_frac
    (fraction where the dual clip is active), ratio_mean, ratio_max.
    """
    if not (logprobs.shape == old_logprobs.shape == advantages.shape) or logprobs.dim() != 1:
        raise ValueError(
            "ppo_clip needs flat [N] tensors of one shape, got logprobs "
            f"{tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)}, advantages {tuple(advantages.shape)}"
        )
    if clip_low < 0 or clip_low >= 1 or clip_high < 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None to disable), got {dual_clip}")
    adv = advantages.detach().to(logprobs.dtype)
    ratio = torch.exp(torch.clamp(logprobs - old_logprobs.detach(), -20.0, 20.0))
    loss_unclipped = -adv * ratio
    loss_clamped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clamped)
    clipped = loss_clamped > loss_unclipped
    dual = torch.zeros_like(clipped)
    if dual_clip is not None:
        cap = -dual_clip * adv
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(dual, cap, loss)
    with torch.no_grad():
        n = max(1, logprobs.numel())
        stats = {
            "clip_frac": clipped.sum().float() / n,
            "dual_clip_frac": dual.sum().float() / n,
            "ratio_mean": ratio.float().sum() / n,
            "ratio_max": ratio.float().max() if ratio.numel() else torch.zeros(()),
        }
    return loss, stats


POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, Tensor]]]] = {"ppo_clip": ppo_clip}


def get_policy_loss(name: str) -> Callable[..., tuple[Tensor, dict[str, Tensor]]]:
    """POLICY_LOSSES[name], or ValueError listing the known names."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; known: {sorted(POLICY_LOSSES)}") from None


def token_weights(seq_index: Tensor, seq_lengths: Tensor, *, mode: str, max_tokens: int) -> Tensor:
    """Weight [N] (float32) of each token so that sum(w * per_token_loss) over the whole step is the step loss."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; known: {list(AGGREGATIONS)}")
    if seq_index.dim() != 1 or seq_lengths.dim() != 1:
        raise ValueError(
            f"seq_index must be [N] and seq_lengths [S], got {tuple(seq_index.shape)} and {tuple(seq_lengths.shape)}"
        )
    S = seq_lengths.numel()
    if S == 0:
        raise ValueError("seq_lengths is empty: a step needs at least one sequence")
    if seq_index.is_floating_point():
        raise ValueError(f"seq_index must be an integer tensor, got {seq_index.dtype}")
    if seq_index.numel() and (int(seq_index.min()) < 0 or int(seq_index.max()) >= S):
        raise ValueError(f"seq_index values must lie in [0, {S - 1}], got [{int(seq_index.min())}, {int(seq_index.max())}]")
    lengths = seq_lengths.to(torch.float32)
    if (lengths <= 0).any():
        raise ValueError("every seq_lengths entry must be > 0 (a sequence with no trained tokens has no place in the step)")
    if mode == "token_mean":
        return torch.full(seq_index.shape, 1.0 / float(lengths.sum()), dtype=torch.float32, device=seq_index.device)
    if mode == "seq_mean":
        return 1.0 / (lengths.to(seq_index.device)[seq_index] * S)
    if max_tokens <= 0:
        raise ValueError(f"seq_sum_norm needs max_tokens > 0, got {max_tokens}")
    return torch.full(seq_index.shape, 1.0 / (max_tokens * S), dtype=torch.float32, device=seq_index.device)
