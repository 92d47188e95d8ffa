"""train_step on real trajectories from a real engine: every logprob the trainer computes for a
trajectory uses the temperature that trajectory was sampled with, so a replayed trajectory's
PPO ratio is 1 before any update (it was wrong under the step's current temperature), and the
step is a plain function of picklable inputs (a remote trainer gets the same result)."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch

from posttrain.config.rl import RLConfig
from posttrain.envs.rollout import rollout
from posttrain.engine.protocol import SamplingParams
from posttrain.engine.registry import ENGINES
from posttrain.core.hf import load_model, load_tokenizer
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.rl_batch import sequence_logprobs
from posttrain.train.step import build_samples, train_step
from posttrain.core.types import Group, Task

TASK = Task(id="t/1", domain="t", prompt=({"role": "user", "content": "Calculate 12 + 30."},), reference="42")


@pytest.fixture(scope="module")
def parts(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    engine = ENGINES["hf"](tiny_model_dir, tok, dtype="float32")
    policy = load_model(tiny_model_dir, dtype="float32")
    return tok, engine, policy


def sample(engine, tok, temperature: float, n: int, seed: int, version: int):
    params = SamplingParams(temperature=temperature, max_tokens=12)
    return rollout(engine, tok, [TASK], [n], params, [seed], version)[0]


def group_of(engine, tok) -> Group:
    """A replay group: one trajectory sampled at T=1.0 at version 0 (stored) + three at T=0.3 now."""
    stored = sample(engine, tok, 1.0, 1, seed=5, version=0)
    fresh = sample(engine, tok, 0.3, 3, seed=9, version=4)
    trajs = [t.__class__(**{**t.__dict__, "reward": r}) for t, r in zip(stored + fresh, [1.0, 0.0, 1.0, 0.0])]
    return Group(TASK, tuple(trajs), (1.0, 0.0, 1.0, 0.0), replayed=1, policy_version=4)


def cfg(**algo) -> RLConfig:
    return RLConfig.model_validate({"model": {"path": "unused"}, "algo": algo,
                                    "optim": {"lr": 1e-3, "warmup_steps": 0, "schedule": "constant"}})


def test_trajectories_record_their_sampling_state(parts):
    tok, engine, _ = parts
    g = group_of(engine, tok)
    assert [t.sampling.temperature for t in g.trajectories] == [1.0, 0.3, 0.3, 0.3]
    assert [t.policy_version for t in g.trajectories] == [0, 4, 4, 4]
    assert [t.sampling.seed for t in g.trajectories] == [5, 9, 10, 11]
    assert all(t.timings["rollout"] > 0 for t in g.trajectories)


def test_replayed_ratio_is_one_before_any_update(parts):
    tok, engine, policy = parts
    g = group_of(engine, tok)
    samples = build_samples([g], policy, None, cfg(recompute_old_logprobs=True), tok.pad_token_id)
    assert [s.temperature for s in samples] == [1.0, 0.3, 0.3, 0.3]
    for s, traj in zip(samples, g.trajectories):  # trainer's logprob (recomputed) vs the sampler's
        ratios = [math.exp(a - b) for a, b, m in zip(s.old_logprobs, traj.logprobs, traj.loss_mask) if m]
        assert len(ratios) > 0 and max(abs(r - 1) for r in ratios) < 1e-4, ratios
    # what a trainer using the step's current temperature (0.3) would compute for the stored one
    stale = samples[0].__class__(**{**samples[0].__dict__, "temperature": 0.3})
    (wrong,) = sequence_logprobs(policy, [stale], max_tokens_per_microbatch=4096, pad_id=tok.pad_token_id)
    off = max(abs(math.exp(a - b) - 1) for a, b, m in zip(wrong, g.trajectories[0].logprobs, stale.loss_mask) if m)
    assert off > 0.1, off


def test_train_step_is_a_function_of_picklable_inputs(parts):
    tok, engine, policy = parts
    groups, config = [group_of(engine, tok)], cfg()
    shipped_groups, shipped_cfg = pickle.loads(pickle.dumps(groups)), pickle.loads(pickle.dumps(config))
    assert shipped_groups == groups
    results = []
    for gs, c in ((groups, config), (shipped_groups, shipped_cfg)):
        model = copy.deepcopy(policy).train()
        opt = build_optimizer(model, c.optim)
        metrics = train_step(model, None, opt, build_scheduler(opt, c.optim, 1), gs, c, pad_id=tok.pad_token_id)
        results.append((metrics["loss"], [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == results[1][0] and metrics["skipped_updates"] == 0
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))
    assert not all(torch.equal(a, b) for a, b in zip(results[0][1], policy.parameters()))  # it did update


def test_no_groups_is_a_skipped_step(parts):
    tok, _, policy = parts
    c = cfg()
    opt = build_optimizer(policy, c.optim)
    out = train_step(policy, None, opt, build_scheduler(opt, c.optim, 1), [], c, pad_id=tok.pad_token_id)
    assert out == {"skipped_updates": 1, "skip_reason": "no group with signal"}
