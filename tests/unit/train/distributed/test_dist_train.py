"""DDP and FSDP2 over gloo with 2 real rank processes on 127.0.0.1: 2 ranks x b give the weights and
metrics of 1 rank x 2b (train_step on all the groups, in this process), gradients are reduced in
fp32 while the model computes in bf16, a DCP checkpoint saved on 2 ranks loads on 1 with equal
model and optimizer state, and a rank that raises is named in one line."""

from __future__ import annotations

import math

import pytest
import torch

import dist_cases as dc
from posttrain.train.distributed.checkpoint import load_dcp
from posttrain.train.distributed.group import launch
from posttrain.train.distributed.trainer import wrap_policy
from posttrain.core.errors import CheckpointError, ConfigError, TrainingError
from posttrain.train.optim import build_optimizer, build_scheduler

# KL in the loss (a reference model), entropy bonus, recomputed old logprobs, per-sequence
# aggregation (sequence-count normaliser), 2 updates per step, several micro-batches per rank
ALGO = {"kl_coef": 0.1, "aggregation": "seq_mean", "entropy_coef": 0.01, "recompute_old_logprobs": True}
TRAIN = {"updates_per_step": 2, "max_tokens_per_microbatch": 40}
STEPS = 2


@pytest.fixture(scope="module")
def step_inputs(tiny_model_dir, tiny_tokenizer):
    groups = dc.make_groups(n_groups=4, k=4, vocab=len(tiny_tokenizer))
    cfg = dc.make_cfg(ALGO, TRAIN)
    return groups, cfg, tiny_tokenizer.pad_token_id


@pytest.fixture(scope="module")
def single(tiny_model_dir, step_inputs):
    groups, cfg, pad = step_inputs
    return dc.single_step(tiny_model_dir, groups, cfg, pad, steps=STEPS)


def run_dist(kind, tiny_model_dir, step_inputs, out_dir, save_dcp_to=None):
    groups, cfg, pad = step_inputs
    out = launch(dc.train_rank, 2, tiny_model_dir, groups, cfg, kind, pad, str(out_dir), STEPS, save_dcp_to,
                 timeout_s=180)
    return out, torch.load(out_dir / "weights.pt")


@pytest.fixture(scope="module")
def fsdp2_run(tiny_model_dir, step_inputs, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("fsdp2")
    out, weights = run_dist("fsdp2", tiny_model_dir, step_inputs, out_dir, save_dcp_to=str(out_dir / "dcp"))
    return out, weights, out_dir


def check_same_update(single, out, weights, tiny_model_dir):
    model, _, metrics = single
    start = dc.load(tiny_model_dir).state_dict()
    own = model.state_dict()
    assert set(weights) == set(own)
    diff = max(float((weights[k] - own[k]).abs().max()) for k in own)
    moved = max(float((own[k] - start[k]).abs().max()) for k in own)
    print(f"max abs weight diff vs 1 rank: {diff:.3e} (weights moved up to {moved:.3e})")
    assert moved > 1e-3  # 2 steps x 2 updates at lr 1e-3 really moved the weights ...
    assert diff < 2e-6  # ... and both ranks' shards sum to the 1-rank update
    for dist_m, one in zip(out[0]["metrics"], metrics):  # rank 0's metrics are the global ones
        assert dist_m["skipped_updates"] == one["skipped_updates"] == 0
        for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio_max", "grad_norm", "mismatch/kl",
                    "mismatch/tis_mean"):
            assert math.isclose(dist_m[key], one[key], rel_tol=1e-5, abs_tol=1e-7), (key, dist_m[key], one[key])
    assert out[0]["metrics"] == out[1]["metrics"] or all(
        math.isclose(a[k], b[k]) for a, b in zip(out[0]["metrics"], out[1]["metrics"])
        for k in a if not k.startswith("time/") and isinstance(a[k], float))
    return diff


def test_ddp_two_ranks_equal_one_rank_with_the_whole_batch(tiny_model_dir, step_inputs, single, tmp_path):
    out, weights = run_dist("ddp", tiny_model_dir, step_inputs, tmp_path)
    check_same_update(single, out, weights, tiny_model_dir)
    full = {n: tuple(p.shape) for n, p in dc.load(tiny_model_dir).named_parameters()}
    assert out[0]["local_shapes"] == full  # DDP replicates


def test_fsdp2_two_ranks_equal_one_rank_with_the_whole_batch(tiny_model_dir, single, fsdp2_run):
    out, weights, _ = fsdp2_run
    check_same_update(single, out, weights, tiny_model_dir)
    full = {n: tuple(p.shape) for n, p in dc.load(tiny_model_dir).named_parameters()}
    for n, shape in full.items():  # every parameter is sharded along dim 0 over the two ranks
        local = [out[r]["local_shapes"][n] for r in (0, 1)]
        assert local[0][0] + local[1][0] == shape[0] and local[0][1:] == shape[1:], (n, local, shape)
        assert local[0][0] < shape[0]


def test_gradients_reduce_in_fp32_under_bf16_compute(tiny_model_dir, step_inputs):
    groups, _, pad = step_inputs
    cfg = dc.make_cfg()  # defaults: one update, reduce_dtype float32
    out = launch(dc.reduce_dtype_rank, 2, tiny_model_dir, groups, cfg, pad, timeout_s=180)
    fsdp2, ddp = out[0]["fsdp2"], out[0]["ddp"]
    assert fsdp2["reduce_dtype"] == ddp["reduce_dtype"] == "torch.float32"
    assert fsdp2["collective_dtypes"] == ["torch.float32"]  # reduce-scatter of bf16-computed grads, in fp32
    assert ddp["param_dtypes"] == ["torch.bfloat16"] and ddp["collective_dtypes"] == ["torch.float32"]
    assert fsdp2["skipped"] == ddp["skipped"] == 0


def test_dcp_saved_on_two_ranks_loads_on_one(tiny_model_dir, step_inputs, fsdp2_run):
    _, weights, out_dir = fsdp2_run
    _, cfg, _ = step_inputs
    model = dc.load(tiny_model_dir)  # fresh weights, a fresh optimizer: no process group in this process
    opt = build_optimizer(model, cfg.optim)
    sched = build_scheduler(opt, cfg.optim, 10)
    load_dcp(out_dir / "dcp", model, opt, sched)
    own = model.state_dict()
    assert all(torch.equal(own[k], weights[k]) for k in weights)
    assert sched.state_dict()["last_epoch"] == STEPS * TRAIN["updates_per_step"]
    full_opt = torch.load(out_dir / "optim_full.pt")  # rank 0's gathered AdamW state
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    mine = get_optimizer_state_dict(model, opt)
    assert set(mine["state"]) == set(full_opt["state"]) and len(mine["state"]) == len(list(model.parameters()))
    for name, st in full_opt["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(mine["state"][name][key], st[key]), (name, key)
    assert any(float(st["exp_avg_sq"].abs().max()) > 0 for st in mine["state"].values())


def test_a_missing_dcp_checkpoint_is_one_line(tmp_path, tiny_model_dir):
    with pytest.raises(CheckpointError, match="distributed checkpoint .* does not exist"):
        load_dcp(tmp_path / "nope", dc.load(tiny_model_dir))


def test_a_rank_that_raises_is_named_in_one_line():
    with pytest.raises(TrainingError) as e:
        launch(dc.failing_rank, 2, 1, timeout_s=120)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("trainer rank 1 failed (exit code 1): ValueError: boom on purpose in rank 1"), msg


def test_wrapping_needs_a_known_trainer_and_a_process_group(tiny_model_dir):
    with pytest.raises(ConfigError, match="cluster.trainer: expected one of"):
        wrap_policy(dc.load(tiny_model_dir), "zero3")
    with pytest.raises(ConfigError, match="needs a torch.distributed process group"):
        wrap_policy(dc.load(tiny_model_dir), "ddp")
