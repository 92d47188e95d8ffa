"""SFT loss: hand-computed values and exact gradient accumulation by token-weighted mean."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algos.sft import IGNORE, count_loss_tokens, sft_loss_sum, token_weighted_mean


def test_loss_sum_hand_computed():
    # row 0: logits [0, 0] -> p = 1/2 for either label: -log(1/2) = ln 2
    # row 1: logits [ln 3, 0], label 0 -> p = 3/4: -log(3/4) = ln(4/3)
    # row 2: ignored
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0], [5.0, -5.0]])
    labels = torch.tensor([1, 0, IGNORE])
    assert sft_loss_sum(logits, labels).item() == pytest.approx(math.log(2) + math.log(4 / 3), abs=1e-6)
    assert count_loss_tokens(labels) == 2


def test_loss_sum_accepts_batched_shapes_and_bf16():
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0]]]).to(torch.bfloat16)
    labels = torch.tensor([[1, 0]])
    assert sft_loss_sum(logits, labels).item() == pytest.approx(math.log(2) + math.log(4 / 3), abs=1e-2)
    assert sft_loss_sum(logits, torch.full_like(labels, IGNORE)).item() == 0.0


def test_token_weighted_mean_is_not_the_mean_of_means():
    # micro-batch A: 1 token with loss 3; B: 3 tokens with loss 1 each -> (3 + 3) / 4 = 1.5 (mean of means: 2)
    assert token_weighted_mean([3.0, 3.0], [1, 3]) == 1.5
    with pytest.raises(ValueError):
        token_weighted_mean([0.0], [0])


def test_gradient_accumulation_is_exact():
    torch.manual_seed(0)
    w = torch.randn(4, 5, requires_grad=True)
    x = torch.randn(7, 4)
    labels = torch.tensor([0, 1, IGNORE, 3, 4, IGNORE, 2])
    # one big batch: mean over the 5 labelled tokens
    (sft_loss_sum(x @ w, labels) / 5).backward()
    full = w.grad.clone()
    w.grad = None
    # two uneven micro-batches (2 and 3 labelled tokens), each divided by the step's 5 tokens
    for part in (slice(0, 2), slice(2, 7)):
        (sft_loss_sum(x[part] @ w, labels[part]) / 5).backward()
    assert torch.allclose(w.grad, full, atol=1e-7)
