"""The trainer actor: train_step in a Ray actor gives the driver-side step's metrics and weights."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dist"))
from dist_cases import make_cfg, make_groups, single_step  # noqa: E402


def test_a_step_in_the_trainer_actor_equals_the_local_step(ray_cluster, tiny_model_dir, tiny_tokenizer):
    from posttrain.scale.trainer import RayTrainer

    cfg = make_cfg(algo={"kl_coef": 0.05}, train={"steps": 10})
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": tiny_model_dir})})
    groups = make_groups()
    pad = tiny_tokenizer.pad_token_id
    model, _, local_metrics = single_step(tiny_model_dir, groups, cfg, pad, steps=2)
    trainer = RayTrainer(cfg, pad_id=pad, num_cpus=0.5)
    try:
        assert trainer.pid != os.getpid()
        remote_metrics = [trainer.train_step(groups) for _ in range(2)]  # version None, as single_step
        for ours, theirs in zip(remote_metrics, local_metrics):
            keys = [k for k in theirs if not k.startswith("time/") and isinstance(theirs[k], float)]
            assert keys and "loss" in " ".join(keys)
            assert {k: ours[k] for k in keys} == pytest.approx({k: theirs[k] for k in keys}, rel=1e-5, abs=1e-7)
        weights, local = trainer.weights(), model.state_dict()
        assert weights.keys() == local.keys()
        assert max((weights[k] - local[k]).abs().max().item() for k in local) < 1e-6
    finally:
        trainer.close()
