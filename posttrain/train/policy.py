"""The RL policy and its frozen reference model, loaded the same way on every trainer rank."""

from __future__ import annotations

from posttrain.core.hf import load_model
from posttrain.train.lora import apply_lora


def load_policy(cfg, device) -> tuple:
    """An RL config's policy (fp32 master weights, LoRA adapters when `model.lora`) and its frozen
    reference model (only when `algo.kl_coef > 0`, else None): the same on every trainer rank."""
    policy = load_model(cfg.model.path, dtype="float32", device=device)
    if cfg.model.lora is not None:
        policy = apply_lora(policy, cfg.model.lora)
    ref = None
    if cfg.algo.kl_coef > 0:
        ref = load_model(cfg.model.path, dtype="float32", device=device).eval().requires_grad_(False)
    return policy, ref
