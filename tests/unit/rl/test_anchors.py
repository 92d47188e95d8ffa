"""Anchors (rl/anchors.py): the start model's answers on other domains, rehearsed each RL step with a
fixed advantage. They leave the RL groups' advantages alone, pull a drifted policy back towards the
start model's answers, are drawn the same for the same (seed, step), survive a save and load, and an
anchor domain that RL also trains is a one-line config error."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from posttrain.config.base import load_config
from posttrain.config.rl import AnchorConfig, RLConfig
from posttrain.core.errors import ConfigError
from posttrain.core.hf import load_model, load_tokenizer
from posttrain.core.types import Group, Task
from posttrain.engine.protocol import SamplingParams
from posttrain.engine.registry import ENGINES
from posttrain.envs.rollout import rollout
from posttrain.eval.run import stop_ids
from posttrain.rl.anchors import FILE, Anchors
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.rl_batch import sequence_logprobs
from posttrain.train.rl_update import update_policy
from posttrain.train.step import build_samples

ANCHOR = AnchorConfig(tasks=["leg_counting:6"], per_step=4, weight=0.5, keep_truncated=True)
TASK = Task(id="t/1", domain="t", prompt=({"role": "user", "content": "Calculate 12 + 30."},), reference="42")


@pytest.fixture(scope="module")
def parts(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    engine = ENGINES["hf"](tiny_model_dir, tok, dtype="float32")
    return tok, engine, tiny_model_dir


def cfg(**algo) -> RLConfig:
    return RLConfig.model_validate({"model": {"path": "unused"}, "algo": algo,
                                    "optim": {"lr": 3e-3, "warmup_steps": 0, "schedule": "constant"}})


def rl_group(engine, tok) -> Group:
    trajs = rollout(engine, tok, [TASK], [4], SamplingParams(temperature=1.0, max_tokens=8), [3], 0)[0]
    trajs = [t.__class__(**{**t.__dict__, "reward": r}) for t, r in zip(trajs, [1.0, 0.0, 0.0, 1.0])]
    return Group(TASK, tuple(trajs), (1.0, 0.0, 0.0, 1.0))


def built(parts, tmp_path) -> Anchors:
    tok, engine, _ = parts
    return Anchors.build(ANCHOR, engine, tok, stop_ids(tok), 8, seed=0, out_dir=tmp_path)


def test_anchors_take_their_fixed_advantage_and_leave_the_groups_alone(parts, tmp_path):
    tok, engine, model_dir = parts
    policy = load_model(model_dir, dtype="float32")
    group, anchors = rl_group(engine, tok), built(parts, tmp_path).for_step(0)
    alone = build_samples([group], policy, None, cfg(), tok.pad_token_id)
    mixed = build_samples([group, *anchors], policy, None, cfg(), tok.pad_token_id)
    assert [s.advantage for s in mixed[:4]] == [s.advantage for s in alone]
    assert [round(s.advantage, 3) for s in alone] == [1.0, -1.0, -1.0, 1.0]
    assert [s.advantage for s in mixed[4:]] == [0.5] * 4
    assert [s.fresh for s in mixed] == [True] * 4 + [False] * 4  # no sampler/trainer gap measured on them
    assert [list(s.token_ids) for s in mixed[4:]] == [list(g.trajectories[0].token_ids) for g in anchors]


def anchor_logprob(policy, anchors, pad_id) -> float:
    samples = build_samples(anchors, policy, None, cfg(), pad_id)
    lps = sequence_logprobs(policy, samples, max_tokens_per_microbatch=4096, pad_id=pad_id)
    return sum(sum(lp[i] for i, m in enumerate(s.loss_mask) if m) for lp, s in zip(lps, samples))


def updates(policy, groups, config, pad_id, n):
    opt = build_optimizer(policy, config.optim)
    sched = build_scheduler(opt, config.optim, n)
    for _ in range(n):
        samples = build_samples(groups, policy, None, config, pad_id)
        update_policy(policy, opt, sched, samples, algo=config.algo, max_tokens=8, updates_per_step=1,
                      max_tokens_per_microbatch=4096, pad_id=pad_id, grad_clip=1.0, device=torch.device("cpu"))


def test_anchors_pull_a_drifted_policy_back_to_the_start_answers(parts, tmp_path):
    tok, _, model_dir = parts
    anchors = built(parts, tmp_path).for_step(0)
    policy = load_model(model_dir, dtype="float32")
    start = anchor_logprob(policy, anchors, tok.pad_token_id)
    # drift: the same answers pushed down (a negative fixed advantage), as RL elsewhere would move them
    pushed = [Group(g.task, tuple(t.__class__(**{**t.__dict__, "reward": -1.0}) for t in g.trajectories), g.raw,
                    anchor=True) for g in anchors]
    updates(policy, pushed, cfg(), tok.pad_token_id, 3)
    drifted = anchor_logprob(policy, anchors, tok.pad_token_id)
    assert drifted < start - 1.0, (start, drifted)
    updates(policy, anchors, cfg(), tok.pad_token_id, 3)
    back = anchor_logprob(policy, anchors, tok.pad_token_id)
    assert abs(back - start) < 0.5 * abs(drifted - start), (start, drifted, back)


def test_anchors_are_drawn_by_seed_and_step_and_read_back_whole(parts, tmp_path):
    a = built(parts, tmp_path)
    assert (tmp_path / FILE).exists() and len(a.groups) == 6
    assert all(g.anchor and g.trajectories[0].reward == 0.5 for g in a.groups)
    b = Anchors.load(tmp_path, ANCHOR, seed=0)
    assert [g.trajectories[0].token_ids for g in b.groups] == [g.trajectories[0].token_ids for g in a.groups]
    ids = lambda anchors, step: [g.task.id for g in anchors.for_step(step)]  # noqa: E731
    assert ids(a, 3) == ids(b, 3) and len(ids(a, 3)) == 4
    assert any(ids(a, s) != ids(a, 3) for s in range(4, 9))  # another step, another draw
    other = Anchors(ANCHOR, copy.copy(a.groups), seed=1)
    assert any(ids(other, s) != ids(a, s) for s in range(6))


def test_anchoring_on_a_trained_domain_is_a_config_error(tmp_path):
    bad = [f"tasks={json.dumps([{'name': 'leg_counting'}])}", f"anchor.tasks={json.dumps(['leg_counting:8'])}",
           "model.path=x"]
    with pytest.raises(ConfigError, match="anchor.tasks: 'leg_counting' is also a training domain"):
        load_config(RLConfig, None, bad)
