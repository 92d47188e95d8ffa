"""`posttrain rl ... cluster.trainer=ddp|fsdp2 cluster.world_size=2`: the same recipe with its trainer on two
gloo ranks (this process is rank 0) gives the single-process run's update, checkpoints every rank's state
through DCP and resumes from it."""

from __future__ import annotations

import shutil

import pytest
import torch

from posttrain.checkpoint import latest_checkpoint
from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.recipes import rl
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_model
from tests.recipes.rl_toy import overrides, write_tasks

STEPS = {"train.steps": 3, "train.eval_every": 100, "train.save_every": 2, "buffer.replay_ratio": 0.0}


def run_with(tmp_path, model_dir, name, **extra):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    cfg = load_config(RLConfig, None, overrides(model_dir, tasks, tmp_path / name, **{**STEPS, **extra}))
    final = rl.run(cfg)
    rows = [r for r in read_metrics(tmp_path / name / "metrics.jsonl") if r["step"] > 0]
    return rows, load_model(str(final)).state_dict()


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_two_trainer_ranks_give_the_single_process_update(tmp_path, tiny_model_dir, kind):
    single, want = run_with(tmp_path, tiny_model_dir, "single")
    rows, got = run_with(tmp_path, tiny_model_dir, kind, **{"cluster.trainer": kind, "cluster.world_size": 2})
    # the same rollouts (same tokens while the weights agree to float rounding), the same update
    assert [r["score"] for r in rows] == [r["score"] for r in single]
    for key in ("loss", "grad_norm", "entropy"):
        assert [r[key] for r in rows] == pytest.approx([r[key] for r in single], rel=1e-4, abs=1e-6), key
    moved = max(float((want[n] - load_model(tiny_model_dir).state_dict()[n]).abs().max()) for n in want)
    diff = max(float((want[n] - got[n]).abs().max()) for n in want)
    assert moved > 1e-3 and diff < 1e-5, (moved, diff)
    ckpt = latest_checkpoint(tmp_path / kind)
    assert (ckpt / "trainer" / ".metadata").exists()  # every rank's shards, through torch.distributed.checkpoint


def test_ddp_run_resumes_from_its_dcp_checkpoint(tmp_path, tiny_model_dir):
    extra = {"cluster.trainer": "ddp", "cluster.world_size": 2}
    whole, want = run_with(tmp_path, tiny_model_dir, "whole", **extra)
    # the same run cut after its step-2 checkpoint (what a killed run leaves), then resumed on 2 ranks
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step-00000003")
    shutil.rmtree(tmp_path / "cut" / "final")
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    rl.run(load_config(RLConfig, None, overrides(tiny_model_dir, tasks, tmp_path / "cut", **{**STEPS, **extra})),
           resume=True)
    rows = [r for r in read_metrics(tmp_path / "cut" / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["loss"] == pytest.approx(whole[-1]["loss"], rel=1e-5, abs=1e-7)
    got = load_model(str(tmp_path / "cut" / "final")).state_dict()
    assert max(float((want[n] - got[n]).abs().max()) for n in want) < 1e-6
