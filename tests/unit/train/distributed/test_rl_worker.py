"""The recipe's view of the distributed trainer: this test process is rank 0, one spawned worker is
rank 1; two steps of groups give the 1-rank weights, full_state_dict gathers them, a DCP save /
load round-trips through both ranks, and a bad cluster section is one line."""

from __future__ import annotations

import pytest
import torch

import dist_cases as dc
from posttrain.train.distributed.rl_worker import spawn_trainer_ranks
from posttrain.core.errors import ConfigError

ALGO = {"kl_coef": 0.05, "aggregation": "token_mean"}
TRAIN = {"updates_per_step": 2, "max_tokens_per_microbatch": 64}


def cfg_for(model_dir, trainer, world):
    cfg = dc.make_cfg(ALGO, TRAIN, world_size=world, trainer=trainer)
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": model_dir})})


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_rank0_drives_worker_ranks_to_the_one_rank_update(kind, tiny_model_dir, tiny_tokenizer, tmp_path):
    groups = dc.make_groups(n_groups=4, k=4, vocab=len(tiny_tokenizer))
    pad = tiny_tokenizer.pad_token_id
    cfg = cfg_for(tiny_model_dir, kind, 2)
    single, _, one = dc.single_step(tiny_model_dir, groups, cfg, pad, steps=2)
    trainer = spawn_trainer_ranks(cfg, total_updates=10, pad_id=pad, timeout_s=120)
    with trainer:
        metrics = [trainer.train_step(groups) for _ in range(2)]
        state = {k: v.clone() for k, v in trainer.full_state_dict().items()}  # DDP: rank 0's live tensors
        trainer.save(tmp_path / "dcp")
        trainer.train_step(groups)  # moves away from the saved weights ...
        moved = {k: v.clone() for k, v in trainer.full_state_dict().items()}
        trainer.load(tmp_path / "dcp")  # ... and back, on both ranks
        again = {k: v.clone() for k, v in trainer.full_state_dict().items()}
    own = single.state_dict()
    assert set(state) == set(own)
    diff = max(float((state[k] - own[k]).abs().max()) for k in own)
    print(f"{kind}: max abs weight diff vs 1 rank after 2 steps: {diff:.3e}")
    assert diff < 2e-6
    assert not all(torch.equal(moved[k], state[k]) for k in state)
    assert all(torch.equal(again[k], state[k]) for k in state)
    assert [m["skipped_updates"] for m in metrics] == [0, 0]
    assert abs(metrics[1]["loss"] - one[1]["loss"]) < 1e-6 and abs(metrics[1]["kl"] - one[1]["kl"]) < 1e-7
    assert trainer.closed and trainer.ranks.failure() is None


def test_a_single_trainer_config_is_refused_in_one_line(tiny_model_dir):
    with pytest.raises(ConfigError, match="needs ddp or fsdp2 and world_size >= 2"):
        spawn_trainer_ranks(cfg_for(tiny_model_dir, "single", 1), total_updates=1, pad_id=0)
