"""The trainer as a Ray actor: `train_step` in an actor that holds the policy and its optimizer.

    trainer = RayTrainer(cfg)                      # builds policy (+ reference), optimizer, schedule
    metrics = trainer.train_step(groups, version)  # the same `train.step.train_step` as one process
    engine.update_weights(trainer.weights(), version + 1)

The actor builds its parts as the RL recipe does (fp32 master weights, LoRA when configured, a
frozen reference when `algo.kl_coef > 0`, `build_optimizer` / `build_scheduler` over
`train.steps x train.updates_per_step`) and runs the one `train_step` function on the groups it is
sent, so a step's metrics and weights equal the driver-side step's. `weights()` returns the
engine's state dict (`train.weights.engine_state_dict`: LoRA merged) on the driver's CPU.

Not built: supervision (a dead trainer loses its optimizer state; resume from the last
checkpoint), checkpoint save/load through the actor, and the recipe's use of it (the recipe keeps
its trainer in the driver or under torch.distributed).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import ray
import torch


@ray.remote(max_restarts=0)
class TrainerWorker:
    def __init__(self, cfg: Any, device: str = "cpu"):
        from posttrain.train.lora import apply_lora
        from posttrain.core.hf import load_model
        from posttrain.train.optim import build_optimizer, build_scheduler

        self.cfg, self.device = cfg, torch.device(device)
        self.policy = load_model(cfg.model.path, dtype="float32", device=self.device)
        if cfg.model.lora is not None:
            self.policy = apply_lora(self.policy, cfg.model.lora)
        self.ref = None
        if cfg.algo.kl_coef > 0:
            self.ref = load_model(cfg.model.path, dtype="float32", device=self.device).eval().requires_grad_(False)
        self.optimizer = build_optimizer(self.policy, cfg.optim)
        t = cfg.train
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, t.steps * t.updates_per_step)

    def train_step(self, groups: Sequence, pad_id: int, version: int | None) -> dict:
        from posttrain.train.step import train_step

        return train_step(self.policy, self.ref, self.optimizer, self.scheduler, list(groups), self.cfg,
                          pad_id=pad_id, device=self.device, version=version)

    def weights(self) -> dict:
        from posttrain.train.weights import engine_state_dict

        return {k: v.detach().to("cpu").clone() for k, v in engine_state_dict(self.policy).items()}

    def pid(self) -> int:
        return os.getpid()


class RayTrainer:
    """The driver's handle on one `TrainerWorker` (one GPU when `device` is CUDA)."""

    def __init__(self, cfg: Any, *, pad_id: int = 0, device: str = "cpu", num_cpus: float = 1):
        cuda = str(device).startswith("cuda")
        self.pad_id = pad_id
        self.actor = TrainerWorker.options(num_cpus=num_cpus, num_gpus=1 if cuda else 0).remote(
            cfg, "cuda" if cuda else "cpu")
        self.pid = ray.get(self.actor.pid.remote())

    def train_step(self, groups: Sequence, version: int | None = None) -> dict:
        return ray.get(self.actor.train_step.remote(list(groups), self.pad_id, version))

    def weights(self) -> dict:
        return ray.get(self.actor.weights.remote())

    def close(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # already gone
            pass
