"""Reward models in the HF sequence-classification layout: built from a causal LM (body weights kept,
seeded score head), packed rewards equal HF's one-by-one forward (values and gradients reach the
head), saved and reloaded by transformers and by RewardModelJudge, normalisation stats round trip."""

from __future__ import annotations

import json
import random

import pytest
import torch

from posttrain.core.errors import ModelLoadError
from posttrain.core.hf import load_model, load_tokenizer
from posttrain.core.hf import RewardStats, load_reward_stats, normalised
from posttrain.train.reward_model import reward_model_from_causal_lm, save_reward_model, sequence_rewards

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def rm(tiny_model_dir):
    return reward_model_from_causal_lm(tiny_model_dir, dtype="float32", device=CPU, seed=0)


@pytest.fixture(scope="module")
def saved(rm, tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rm") / "final"
    path = save_reward_model(rm, load_tokenizer(tiny_model_dir), out, RewardStats(mean=0.25, std=2.0, n=12))
    return path


def make_seqs(vocab: int, pad: int, n_pairs: int = 5, seed: int = 0) -> list[list[int]]:
    """[prompt + chosen, prompt + rejected, ...], no pad id inside (HF pooling skips pad tokens)."""
    rng = random.Random(seed)
    tok = lambda k: [t for t in (rng.randrange(3, vocab) for _ in range(k * 2)) if t != pad][:k]  # noqa: E731
    seqs = []
    for _ in range(n_pairs):
        prompt = tok(rng.randint(1, 8))
        seqs += [prompt + tok(rng.randint(1, 6)), prompt + tok(rng.randint(1, 6))]
    seqs += [seqs[0][:], seqs[1][:1], tok(3)]  # identical sequences, a one-token one, an odd one out
    return seqs


def one_by_one(rm, seqs) -> torch.Tensor:
    return torch.stack([rm(input_ids=torch.tensor([s])).logits[0, 0] for s in seqs])


def test_layout_and_body_weights(rm, tiny_model_dir):
    from transformers import Qwen2ForSequenceClassification

    assert isinstance(rm, Qwen2ForSequenceClassification) and rm.config.num_labels == 1
    assert rm.config.pad_token_id == load_tokenizer(tiny_model_dir).pad_token_id
    lm = load_model(tiny_model_dir, dtype="float32", device=CPU)
    body = rm.model.state_dict()
    for name, value in lm.model.state_dict().items():
        assert torch.equal(body[name], value), name
    h = rm.config.hidden_size
    w = rm.score.weight
    assert w.shape == (1, h) and 0.3 / h**0.5 < w.std().item() < 3 / h**0.5
    again = reward_model_from_causal_lm(tiny_model_dir, dtype="float32", device=CPU, seed=0)
    other = reward_model_from_causal_lm(tiny_model_dir, dtype="float32", device=CPU, seed=1)
    assert torch.equal(again.score.weight, w) and not torch.equal(other.score.weight, w)


@pytest.mark.parametrize("share_prefix", [None, False])
@pytest.mark.parametrize("budget", [8192, 20])
def test_packed_rewards_equal_hf_forward(rm, share_prefix, budget):
    from posttrain.train.rl_batch import supports_shared_prefix

    assert share_prefix is False or supports_shared_prefix(rm)
    seqs = make_seqs(rm.config.vocab_size, rm.config.pad_token_id)
    r = sequence_rewards(rm, seqs, max_tokens_per_microbatch=budget, pad_id=rm.config.pad_token_id,
                         share_prefix=share_prefix)
    assert r.shape == (len(seqs),) and r.dtype == torch.float32 and r.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(r.detach(), one_by_one(rm, seqs), atol=1e-5, rtol=1e-5)
    # gradients reach the head and the body, and equal the one-by-one ones
    names = ["score.weight", "model.embed_tokens.weight", "model.layers.1.mlp.up_proj.weight"]
    params = dict(rm.named_parameters())
    rm.zero_grad(set_to_none=True)
    (r * torch.linspace(-1, 1, len(seqs))).sum().backward()
    packed = {n: params[n].grad.clone() for n in names}
    rm.zero_grad(set_to_none=True)
    (one_by_one(rm, seqs) * torch.linspace(-1, 1, len(seqs))).sum().backward()
    for n in names:
        assert packed[n].abs().sum() > 0, n
        torch.testing.assert_close(packed[n], params[n].grad, atol=1e-5, rtol=1e-5)
    rm.zero_grad(set_to_none=True)


def test_reward_is_read_at_the_last_token_even_if_it_is_the_pad_id(rm):
    pad = rm.config.pad_token_id
    seq = [7, 8, 9, pad]  # no padding in a packed row: the pad id here is a real last token
    (r,) = sequence_rewards(rm, [seq], pad_id=pad)
    with torch.no_grad():
        hidden = rm.model(input_ids=torch.tensor([seq])).last_hidden_state
        expected = rm.score(hidden[0, -1])[0]
        torch.testing.assert_close(r.detach(), expected, atol=1e-5, rtol=1e-5)


def test_save_and_reload_with_transformers(rm, saved):
    from transformers import AutoModelForSequenceClassification

    assert (saved / "model.safetensors").is_file() and (saved / "reward_stats.json").is_file()
    assert not any(p.name.endswith(".tmp") for p in saved.parent.iterdir())
    again = AutoModelForSequenceClassification.from_pretrained(saved)
    assert again.config.num_labels == 1 and again.config.pad_token_id == rm.config.pad_token_id
    seqs = make_seqs(rm.config.vocab_size, rm.config.pad_token_id, n_pairs=3, seed=1)
    mine, theirs = rm.state_dict(), again.state_dict()
    assert set(mine) == set(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)  # bit-identical weights
    with torch.no_grad():  # logits equal up to float reordering (2e-7 seen: same weights, different kernels' paths)
        torch.testing.assert_close(one_by_one(again, seqs), one_by_one(rm, seqs), atol=1e-6, rtol=1e-6)


def test_stats_round_trip_and_errors(saved, tmp_path):
    stats = load_reward_stats(saved)
    assert stats == RewardStats(mean=0.25, std=2.0, n=12)
    assert load_reward_stats(saved / "reward_stats.json") == stats
    assert json.loads((saved / "reward_stats.json").read_text())["version"] == 1
    with pytest.raises(ModelLoadError, match="not found") as e:
        load_reward_stats(tmp_path)
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)
    bad = tmp_path / "reward_stats.json"
    for text in ["{not json", "[1, 2]", '{"mean": 0, "std": 1, "n": 3}',
                 '{"mean": "x", "std": 1, "n": 3, "version": 1}',
                 '{"mean": 0, "std": 0, "n": 3, "version": 1}', '{"mean": 0, "std": 1, "n": -1, "version": 1}',
                 '{"mean": NaN, "std": 1, "n": 3, "version": 1}']:
        bad.write_text(text)
        with pytest.raises(ModelLoadError, match="malformed reward stats") as e:
            load_reward_stats(tmp_path)
        assert str(bad) in str(e.value) and "\n" not in str(e.value), text


def test_normalised():
    s = RewardStats(mean=1.0, std=2.0, n=4)
    assert normalised(1.0, s) == 0.5
    assert abs(normalised(3.0, s) - 1 / (1 + 2.718281828459045**-1)) < 1e-12
    assert normalised(-1e9, s) == 0.0 and normalised(1e9, s) == 1.0
    t = normalised(torch.tensor([1.0, 3.0]), s)
    torch.testing.assert_close(t, torch.sigmoid(torch.tensor([0.0, 1.0])))
    assert normalised(2.0, RewardStats(mean=2.0, std=0.0, n=1)) == 0.5  # std floored at 1e-6


def test_judge_loads_it_and_agrees(rm, saved):
    from posttrain.verifiers.rm_judge import RewardModelJudge

    judge = RewardModelJudge(str(saved), dtype="float32")
    items = [([{"role": "user", "content": "Calculate 2 + 3."}], "We add 2 and 3 to get 5.\nAnswer: 5"),
             ([{"role": "user", "content": "Calculate 10 + 1."}], "Answer: 11")]
    logits = judge.logits_many(items)
    assert len(logits) == 2 and all(torch.isfinite(torch.tensor(logits)))
    rows = [judge.encode(prompt, completion)[0] for prompt, completion in items]
    with torch.no_grad():
        ours = sequence_rewards(rm, rows, pad_id=rm.config.pad_token_id)
    torch.testing.assert_close(torch.tensor(logits), ours, atol=1e-5, rtol=1e-5)


def test_architecture_without_sequence_classification(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(ModelLoadError, match="no \\*ForSequenceClassification") as e:
        reward_model_from_causal_lm(str(tmp_path), device=CPU)
    assert "\n" not in str(e.value)


def test_lora_wrapped_rm(tiny_model_dir):
    """posttrain rm with model.lora: PEFT adapters, the score head trained in full beside them."""
    from posttrain.config.common import LoraConfig
    from posttrain.train.lora import apply_lora

    base = reward_model_from_causal_lm(tiny_model_dir, dtype="float32", device=CPU, seed=0)
    model = apply_lora(base, LoraConfig(), modules_to_save=["score"])
    seqs = make_seqs(base.config.vocab_size, base.config.pad_token_id, n_pairs=2, seed=2)
    r = sequence_rewards(model, seqs, pad_id=base.config.pad_token_id)
    with torch.no_grad():
        torch.testing.assert_close(r.detach(), one_by_one(model, seqs), atol=1e-5, rtol=1e-5)
    r.sum().backward()
    trained = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert any("score" in n and g is not None and g.abs().sum() > 0 for n, g in trained.items())
    assert any("lora_B" in n and g is not None for n, g in trained.items())
