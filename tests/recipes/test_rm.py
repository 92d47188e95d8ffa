"""`posttrain rm` end to end on the tiny fixture model: a Bradley-Terry reward model reaches >= 90%
held-out accuracy on a synthetic preference, saves in the HF sequence-classification layout with
its normalisation statistics, and serves as the `reward_model` verifier."""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.config.base import load_config
from posttrain.config.pref import RMConfig
from posttrain.recipes import rm
from posttrain.tasks.preferences import make_preferences
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_tokenizer


def cfg_for(tmp_path, model_dir, **extra) -> RMConfig:
    base = {
        "model.path": model_dir, "out_dir": str(tmp_path / "rm"),
        "data.train": "pref:polite_vs_curt,concise_vs_rambling:320",
        "data.eval": "pref:polite_vs_curt,concise_vs_rambling:80",
        "train.pairs_per_step": 16, "train.max_steps": 40, "train.eval_every": 20, "train.save_every": 20,
        "optim.lr": 3e-3, "optim.warmup_steps": 0,
        "logging.tensorboard": "false", "logging.progress": "false",
    }
    base.update(extra)
    return load_config(RMConfig, None, [f"{k}={v}" for k, v in base.items()])


@pytest.fixture(scope="module")
def trained_rm(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("rm")
    return tmp, rm.run(cfg_for(tmp, tiny_model_dir))


def _fresh_pairs(tokenizer, n=40):
    """Held-out pairs the run never saw (another eval seed), tokenized by the chat template."""
    out = []
    for r in make_preferences(["polite_vs_curt", "concise_vs_rambling"], n, 1_000_777):
        ids = [tokenizer.apply_chat_template(r["prompt"] + r[side], tokenize=True, return_dict=False)
               for side in ("chosen", "rejected")]
        out.append(ids)
    return out


def test_reward_model_reaches_90_percent_held_out_and_loads_as_hf_classifier(trained_rm):
    from transformers import AutoModelForSequenceClassification

    tmp, final = trained_rm
    rows = read_metrics(tmp / "rm" / "metrics.jsonl")
    assert rows[0]["eval/rewards/accuracy"] < 0.8  # a random head: near chance (one kind favours the longer answer, the other the shorter)
    assert rows[-1]["eval/rewards/accuracy"] >= 0.9, rows[-1]
    model = AutoModelForSequenceClassification.from_pretrained(final).eval()
    assert model.config.num_labels == 1
    tokenizer = load_tokenizer(str(final))
    right = 0
    pairs = _fresh_pairs(tokenizer)
    with torch.no_grad():
        for chosen, rejected in pairs:
            rc, rr = (model(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in (chosen, rejected))
            right += rc > rr
    assert right / len(pairs) >= 0.9
    stats = json.loads((final / "reward_stats.json").read_text())
    assert stats["n"] == 160 and stats["std"] > 0


def test_reward_model_scores_rl_samples_as_a_verifier(trained_rm):
    from posttrain.core.types import Task, Trajectory
    from posttrain.verifiers.registry import run_verifiers_many

    _, final = trained_rm
    record = make_preferences(["polite_vs_curt"], 1, 1_000_555)[0]
    prompt = tuple(record["prompt"])
    task = Task(id="t/1", domain="chat", prompt=prompt, reference=None, verifiers=("reward_model",),
                metadata={"verifier_options": {"reward_model": {"path": str(final)}}})
    polite, curt = record["chosen"][0]["content"], record["rejected"][0]["content"]
    trajs = [Trajectory(task_id="t/1", token_ids=[1], loss_mask=[0], logprobs=[0.0], prompt_len=1, text=t)
             for t in (polite, curt)]
    (good, _), (bad, _) = run_verifiers_many(task, trajs)
    assert 0.0 <= bad[0].value < good[0].value <= 1.0


def test_lora_reward_model_trains_adapters_and_the_head_and_saves_merged(tmp_path, tiny_model_dir):
    from transformers import AutoModelForSequenceClassification

    from posttrain.train.reward_model import reward_model_from_causal_lm

    final = rm.run(cfg_for(tmp_path, tiny_model_dir, **{"model.lora.r": 4, "train.max_steps": 3}))
    rows = read_metrics(tmp_path / "rm" / "metrics.jsonl")
    assert rows[0]["trainable_params"] < rows[0]["total_params"] / 5
    saved = AutoModelForSequenceClassification.from_pretrained(final).state_dict()
    start = reward_model_from_causal_lm(tiny_model_dir, seed=0).state_dict()
    assert set(saved) == set(start)  # merged: no adapter keys
    changed = {k for k in saved if not torch.equal(saved[k], start[k])}
    assert "score.weight" in changed and any("q_proj" in k for k in changed)
    assert not any("mlp" in k or "norm" in k for k in changed)  # only adapted layers and the head
