"""SFT loss as pure tensor functions.

The step loss is the token-weighted mean over every loss token of the optimizer step:
each micro-batch contributes `sft_loss_sum(...) / step_loss_tokens`, so the gradient
accumulated over micro-batches equals the gradient of one big batch exactly, no matter
how unevenly the loss tokens fall across micro-batches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def sft_loss_sum(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE) -> torch.Tensor:
    """Sum over labelled positions of -log softmax(logits)[label].

    logits: [..., vocab] (any float dtype; computed in fp32), labels: [...] with ignore_index
    where there is no loss. Returns a scalar (0 when nothing is labelled).
    """
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1),
        ignore_index=ignore_index,
        reduction="sum",
    )


def count_loss_tokens(labels: torch.Tensor, ignore_index: int = IGNORE) -> int:
    return int((labels != ignore_index).sum())


def token_weighted_mean(loss_sums: list[float], loss_tokens: list[int]) -> float:
    """Mean loss per token over several micro-batches: sum(loss_sums) / sum(loss_tokens)."""
    total = sum(loss_tokens)
    if total <= 0:
        raise ValueError("no loss tokens: cannot take a token-weighted mean")
    return float(sum(loss_sums)) / total
