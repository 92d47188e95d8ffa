"""Learning-rate schedule (hand-computed), AdamW param groups, gradient clipping."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.config.common import OptimConfig
from posttrain.train.optim import build_optimizer, build_scheduler, clip_grad_norm, lr_factor


def factors(schedule, total=6, warmup=2, min_lr_ratio=0.1):
    return [lr_factor(s, warmup_steps=warmup, total_steps=total, schedule=schedule, min_lr_ratio=min_lr_ratio)
            for s in range(total)]


def test_cosine_hand_values():
    # warmup (s+1)/2; then progress (s-2)/3: 0, 1/3, 2/3, 1 -> 0.1 + 0.9 * (1 + cos(pi p)) / 2
    expected = [0.5, 1.0, 1.0, 0.775, 0.325, 0.1]
    assert factors("cosine") == pytest.approx(expected)


def test_linear_and_constant_hand_values():
    assert factors("linear") == pytest.approx([0.5, 1.0, 1.0, 0.7, 0.4, 0.1])
    assert factors("constant") == pytest.approx([0.5, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert factors("cosine", warmup=0, total=1) == pytest.approx([1.0])


def test_scheduler_sets_lr_per_update():
    model = torch.nn.Linear(2, 2)
    cfg = OptimConfig(lr=0.01, warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    opt = build_optimizer(model, cfg)
    sched = build_scheduler(opt, cfg, total_steps=6)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.005, 0.01, 0.01, 0.00775, 0.00325, 0.001])


def test_weight_decay_only_on_matrices_and_frozen_params_excluded():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 1))
    model[2].weight.requires_grad_(False)
    opt = build_optimizer(model, OptimConfig(weight_decay=0.1))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and [p.shape for p in decay["params"]] == [torch.Size([3, 3])]
    assert no_decay["weight_decay"] == 0.0 and len(no_decay["params"]) == 4  # 2 biases + norm weight/bias


def test_clip_grad_norm_returns_norm_before_clipping():
    p = torch.nn.Parameter(torch.zeros(2))
    model = torch.nn.Module()
    model.p = p
    p.grad = torch.tensor([3.0, 4.0])
    assert clip_grad_norm(model, 1.0) == pytest.approx(5.0)
    assert p.grad.tolist() == pytest.approx([0.6, 0.8])
    p.grad = torch.tensor([float("inf"), 0.0])
    assert not math.isfinite(clip_grad_norm(model, 1.0))
