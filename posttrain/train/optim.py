"""Optimizer, learning-rate schedule and gradient clipping for every trainer.

    opt = build_optimizer(model, cfg.optim)               # AdamW over trainable params
    sched = build_scheduler(opt, cfg.optim, total_steps)  # linear warmup, then cosine/linear/constant
    norm = clip_grad_norm(model, cfg.optim.grad_clip)      # total norm before clipping

`lr_factor` is the schedule as a pure function (multiplier of the peak lr at a step).
"""

from __future__ import annotations

import math

import torch

from posttrain.config.common import OptimConfig


def lr_factor(step: int, *, warmup_steps: int, total_steps: int, schedule: str, min_lr_ratio: float) -> float:
    """Multiplier of the peak lr for the update that follows `step` completed updates.

    Warmup ramps linearly (step+1)/warmup_steps; then 'constant' stays at 1, 'linear' and
    'cosine' decay from 1 to min_lr_ratio at the last step.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    decay_steps = max(1, total_steps - warmup_steps - 1)
    return decayed(min(1.0, (step - warmup_steps) / decay_steps), schedule, min_lr_ratio)


def decayed(progress: float, schedule: str, min_lr_ratio: float) -> float:
    """The decay after warmup: 1 at progress 0, min_lr_ratio at progress 1 ('linear' or 'cosine')."""
    if schedule == "linear":
        shape = 1.0 - progress
    elif schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown lr schedule {schedule!r}: expected cosine, linear or constant")
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Trainable params; weight decay on matrices only (not on biases, norms)."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    groups = param_groups(model, cfg.weight_decay)
    if not any(g["params"] for g in groups):
        raise ValueError("the model has no trainable parameters")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int):
    def factor(step: int) -> float:
        return lr_factor(
            step,
            warmup_steps=cfg.warmup_steps,
            total_steps=total_steps,
            schedule=cfg.schedule,
            min_lr_ratio=cfg.min_lr_ratio,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def clip_grad_norm(model: torch.nn.Module, max_norm: float) -> float:
    """Clip the global grad norm of trainable params to max_norm; returns the norm before clipping
    (inf/nan when a gradient is not finite: the grads are then unusable and the update must be skipped)."""
    params = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    if not params:
        return 0.0
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False)
    return float(norm)
