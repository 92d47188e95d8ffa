"""Packed RL micro-batches: per-token data lines up with the trained tokens, the token budget holds,
and logprobs (and their gradients) from shared-prefix packing (a group's prompt computed once under a
4D attention mask) or from the position-id fallback equal an unpacked forward pass per sequence."""

from __future__ import annotations

import copy
from dataclasses import replace
import random
from types import SimpleNamespace

import pytest
import torch

from posttrain.core.errors import TrainingError
from posttrain.core.hf import load_model
from posttrain.train.rl_batch import (Sample, build_rl_microbatches, gather_logprobs, plan_units, sequence_logprobs,
                                      supports_shared_prefix, token_logits)

PAD = 0

# A: trained tokens 12, 13 and (after an untrained tool token 14) 15; B: 21, 22; C: only 33.
A = Sample(token_ids=[10, 11, 12, 13, 14, 15], loss_mask=[0, 0, 1, 1, 0, 1],
           old_logprobs=[0, 0, -0.1, -0.2, 0, -0.3], advantage=0.5, seq=0,
           ref_logprobs=[0, 0, -1.1, -1.2, 0, -1.3], token_weights=[1, 1, 0.9, 0.8, 1, 0.7])
B = Sample(token_ids=[20, 21, 22], loss_mask=[0, 1, 1], old_logprobs=[0, -0.4, -0.5], advantage=-1.0, seq=1,
           ref_logprobs=[0, -1.4, -1.5], token_weights=[1, 0.6, 0.5])
C = Sample(token_ids=[30, 31, 32, 33], loss_mask=[0, 0, 0, 1], old_logprobs=[0, 0, 0, -0.6], advantage=2.0, seq=2,
           ref_logprobs=[0, 0, 0, -1.6], token_weights=[1, 1, 1, 0.4])


def close(t: torch.Tensor, expected) -> bool:
    return t.dtype.is_floating_point and torch.allclose(t, torch.tensor(expected, dtype=t.dtype))


def mask_of(lines: list[str]) -> list[list[bool]]:
    return [[c == "1" for c in line.replace(" ", "")] for line in lines]


def test_one_microbatch_by_hand():
    (mb,) = build_rl_microbatches([A, B, C], max_tokens_per_microbatch=1000, pad_id=PAD)
    # no two prompts are equal: one row, first-fit decreasing: A (6 tokens), C (4), B (3)
    assert mb.input_ids.tolist() == [[10, 11, 12, 13, 14, 15, 30, 31, 32, 33, 20, 21, 22]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2]]
    # the token at position t of a sample is predicted from row index (its start + t - 1)
    assert mb.pred_index.tolist() == [1, 2, 4, 8, 10, 11]
    assert mb.token_pos.tolist() == [2, 3, 5, 3, 1, 2]
    assert mb.targets.tolist() == [12, 13, 15, 33, 21, 22]
    assert close(mb.old_logprobs, [-0.1, -0.2, -0.3, -0.6, -0.4, -0.5])
    assert close(mb.advantages, [0.5, 0.5, 0.5, 2.0, -1.0, -1.0])
    assert mb.seq_index.tolist() == [0, 0, 0, 2, 1, 1]
    assert close(mb.ref_logprobs, [-1.1, -1.2, -1.3, -1.6, -1.4, -1.5])
    assert close(mb.token_weights, [0.9, 0.8, 0.7, 0.4, 0.6, 0.5])
    assert mb.num_tokens == 6
    assert mb.attention_mask[0, 0].tolist() == mask_of([  # block-diagonal causal: A | C | B
        "100000 0000 000", "110000 0000 000", "111000 0000 000", "111100 0000 000", "111110 0000 000",
        "111111 0000 000", "000000 1000 000", "000000 1100 000", "000000 1110 000", "000000 1111 000",
        "000000 0000 100", "000000 0000 110", "000000 0000 111"])
    (fallback,) = build_rl_microbatches([A, B, C], max_tokens_per_microbatch=1000, pad_id=PAD, share_prefix=False)
    assert fallback.attention_mask is None
    for f in ("input_ids", "position_ids", "pred_index", "token_pos", "targets", "seq_index"):
        assert torch.equal(getattr(fallback, f), getattr(mb, f)), f


def test_shared_prompt_by_hand():
    # X, Y, Z share the prompt [5, 6, 7]; W is alone. Z's token 12 is an untrained tool token.
    X = Sample([5, 6, 7, 8, 9], [0, 0, 0, 1, 1], [0, 0, 0, -0.1, -0.2], 1.0, 0)
    Y = Sample([5, 6, 7, 10], [0, 0, 0, 1], [0, 0, 0, -0.3], -1.0, 1)
    W = Sample([1, 2], [0, 1], [0, -0.4], 0.5, 2)
    Z = Sample([5, 6, 7, 11, 12, 13], [0, 0, 0, 1, 0, 1], [0, 0, 0, -0.5, 0, -0.6], 2.0, 3)
    assert plan_units([X, Y, W, Z], share_prefix=True, row_tokens=256) == [(3, [0, 1, 3]), (1, [2])]
    (mb,) = build_rl_microbatches([X, Y, W, Z], max_tokens_per_microbatch=1000, pad_id=PAD)
    # the unit [prompt | X | Y | Z] (9 tokens), then W; every suffix continues at the prompt's length
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9, 10, 11, 12, 13, 1, 2]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 3, 4, 5, 0, 1]]
    # the first token of every suffix is predicted from the last prompt token (row index 2)
    assert mb.pred_index.tolist() == [2, 3, 2, 2, 7, 9]
    assert mb.token_pos.tolist() == [3, 4, 3, 3, 5, 1]
    assert mb.targets.tolist() == [8, 9, 10, 11, 13, 2]
    assert mb.seq_index.tolist() == [0, 0, 1, 3, 3, 2]
    assert close(mb.old_logprobs, [-0.1, -0.2, -0.3, -0.5, -0.6, -0.4])
    assert close(mb.advantages, [1.0, 1.0, -1.0, 2.0, 2.0, 0.5])
    assert mb.attention_mask[0, 0].tolist() == mask_of([
        "100 00 0 000 00", "110 00 0 000 00", "111 00 0 000 00",  # prompt
        "111 10 0 000 00", "111 11 0 000 00",  # X sees the prompt and itself
        "111 00 1 000 00",  # Y
        "111 00 0 100 00", "111 00 0 110 00", "111 00 0 111 00",  # Z
        "000 00 0 000 10", "000 00 0 000 11"])  # W
    # with a 6-token budget the unit is split, each piece with its own copy of the prompt
    assert plan_units([X, Y, W, Z], share_prefix=True, row_tokens=6) == [(3, [0, 1]), (3, [3]), (1, [2])]


def test_rows_are_padded_and_optional_fields_stay_none():
    a = Sample([1, 2, 3, 4, 5], [0, 0, 1, 1, 1], [0, 0, -1, -2, -3], 1.0, 0)
    b = Sample([6, 7, 8, 9, 10], [0, 1, 1, 1, 1], [0, -4, -5, -6, -7], -1.0, 1)
    (mb,) = build_rl_microbatches([a, b], max_tokens_per_microbatch=10, pad_id=PAD)
    assert mb.ref_logprobs is None and mb.token_weights is None
    assert mb.targets.tolist() == [3, 4, 5, 7, 8, 9, 10]
    # rows hold up to max(ROW_TOKENS=256, longest) tokens: 300 + 250 need two rows, padded to 300
    long = [Sample([7 + k] * n, [0] + [1] * (n - 1), [-0.5] * n, 1.0, k) for k, n in enumerate([300, 250])]
    (mb,) = build_rl_microbatches(long, max_tokens_per_microbatch=4096, pad_id=PAD)
    assert mb.input_ids.shape == (2, 300)
    assert (mb.input_ids[1, 250:] == PAD).all() and mb.position_ids[1, 250:].tolist() == list(range(50))
    assert mb.pred_index.tolist() == list(range(299)) + list(range(300, 549)) and mb.num_tokens == 299 + 249
    # padding attends to itself only; no real token attends to padding
    pad_block = mb.attention_mask[1, 0, 250:, 250:]
    assert torch.equal(pad_block, torch.eye(50, dtype=torch.bool))
    assert not mb.attention_mask[1, 0, :250, 250:].any() and not mb.attention_mask[1, 0, 250:, :250].any()


def random_samples(n: int, seed: int, lo: int = 4, hi: int = 40, vocab: int = 400) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        length = rng.randint(lo, hi)
        prompt = rng.randint(1, length - 1)
        mask = [0] * prompt + [1] * (length - prompt)
        for t in range(prompt + 1, length - 1):  # some untrained (tool output) tokens inside the completion
            if rng.random() < 0.2:
                mask[t] = 0
        toks = [rng.randrange(1, vocab) for _ in range(length)]
        old = [-rng.random() if m else 0.0 for m in mask]
        out.append(Sample(toks, mask, old, rng.uniform(-1, 1), k))
    return out


def grouped_samples(group_sizes: list[int], seed: int, prompt=(6, 20), completion=(1, 15), singles: int = 4,
                    vocab: int = 400) -> list[Sample]:
    """GRPO-like groups (one prompt, several completions with some untrained tool tokens), mixed with
    singletons and one sample without any trained token; seq numbers follow list order."""
    rng = random.Random(seed)
    raw = []
    for size in group_sizes:
        p = [rng.randrange(1, vocab) for _ in range(rng.randint(*prompt))]
        for _ in range(size):
            n = rng.randint(*completion)
            mask = [0] * len(p) + [1] * n
            for t in range(len(p) + 1, len(mask) - 1):
                if rng.random() < 0.2:
                    mask[t] = 0
            raw.append((p + [rng.randrange(1, vocab) for _ in range(n)], mask))
    raw += [(list(s.token_ids), list(s.loss_mask)) for s in random_samples(singles, seed + 1, hi=30, vocab=vocab)]
    raw.append(([rng.randrange(1, vocab) for _ in range(7)], [0] * 7))
    rng.shuffle(raw)
    return [Sample(toks, mask, [-rng.random() if m else 0.0 for m in mask], rng.uniform(-1, 1), k)
            for k, (toks, mask) in enumerate(raw)]


def per_sample_expected(samples):
    return {s.seq: [(s.token_ids[t + 1], s.old_logprobs[t + 1]) for t in range(len(s.token_ids) - 1) if s.loss_mask[t + 1]]
            for s in samples}


def check_layout(mb, by_seq: dict[int, Sample]):
    """Every trained token t is predicted from a row position holding the sample's token t-1 at position
    t-1, which (under the attention mask) sees exactly the sample's tokens 0..t-1 in order."""
    ids, pos = mb.input_ids.reshape(-1), mb.position_ids.reshape(-1)
    L = mb.input_ids.shape[1]
    for p, t, seq, tgt in zip(mb.pred_index.tolist(), mb.token_pos.tolist(), mb.seq_index.tolist(), mb.targets.tolist()):
        s = by_seq[seq]
        assert s.loss_mask[t] == 1 and tgt == s.token_ids[t]
        assert int(ids[p]) == s.token_ids[t - 1] and int(pos[p]) == t - 1
        if mb.attention_mask is not None:
            keys = mb.attention_mask[p // L, 0, p % L].nonzero().squeeze(-1) + (p // L) * L
            assert ids[keys].tolist() == list(s.token_ids[:t]) and pos[keys].tolist() == list(range(t))


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("budget", [16, 50, 64, 100, 200, 4096])
def test_token_budget_and_every_token_once(budget, share):
    samples = random_samples(20, seed=budget, hi=90)
    samples += [Sample(**{**s.__dict__, "seq": 20 + s.seq}) for s in grouped_samples([8, 5, 3], seed=budget)]
    lengths = {s.seq: len(s.token_ids) for s in samples}
    mbs = build_rl_microbatches(samples, max_tokens_per_microbatch=budget, pad_id=PAD, share_prefix=share)
    got = {}
    for mb in mbs:
        seqs = sorted(set(mb.seq_index.tolist()))
        if mb.input_ids.numel() > budget:  # only a single sequence longer than the budget may exceed it
            assert mb.input_ids.shape[0] == 1 and len(seqs) == 1 and lengths[seqs[0]] > budget, (
                budget, mb.input_ids.shape, [lengths[s] for s in seqs])
        for s, tgt, old in zip(mb.seq_index.tolist(), mb.targets.tolist(), mb.old_logprobs.tolist()):
            got.setdefault(s, []).append((tgt, pytest.approx(old)))
        check_layout(mb, {s.seq: s for s in samples})
    assert got == {seq: v for seq, v in per_sample_expected(samples).items() if v}  # one sample has none
    real = sum(int((mb.attention_mask[:, 0].diagonal(dim1=1, dim2=2) & (mb.input_ids != PAD)).sum())
               if share else 0 for mb in mbs)
    if share and budget >= 100:  # the group prompts were laid out fewer times than there are samples
        assert real < sum(lengths.values())


def test_budget_holds_when_the_longest_sequence_sets_the_row_length():
    # lengths 120, 90, 30 with a budget of 100: 90 and 30 must not share a 120-token row
    samples = [Sample([k + 1] * n, [0] + [1] * (n - 1), [0.0] * n, 0.0, k) for k, n in enumerate([120, 90, 30])]
    mbs = build_rl_microbatches(samples, max_tokens_per_microbatch=100, pad_id=PAD)
    assert sorted(mb.input_ids.numel() for mb in mbs) == [30, 90, 120]


def test_supports_shared_prefix():
    def fake(impl, layer_types=None):
        return SimpleNamespace(config=SimpleNamespace(_attn_implementation=impl, layer_types=layer_types))
    assert supports_shared_prefix(fake("sdpa")) and supports_shared_prefix(fake("eager", ["full_attention"] * 2))
    assert not supports_shared_prefix(fake("flash_attention_2")) and not supports_shared_prefix(fake("flex_attention"))
    assert not supports_shared_prefix(fake("sdpa", ["full_attention", "sliding_attention"]))


# ---------------------------------------------------------------- logprobs and gradients on the tiny models


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model(request, tiny_model_dir, tiny_llama_dir):
    path = {"qwen2": tiny_model_dir, "llama": tiny_llama_dir}[request.param]
    return load_model(path, dtype="float32", device=torch.device("cpu")).eval()


def unpacked_logits(model, s: Sample, temperature: float) -> torch.Tensor:
    return model(input_ids=torch.tensor([list(s.token_ids)]), use_cache=False).logits[0].float() / temperature


@torch.no_grad()
def unpacked_logprobs(model, s: Sample, temperature: float) -> list[float]:
    lp = torch.log_softmax(unpacked_logits(model, s, temperature), dim=-1)
    return [float(lp[t - 1, s.token_ids[t]]) if t and s.loss_mask[t] else 0.0 for t in range(len(s.token_ids))]


def worst_error(model, samples, temperature, **kw) -> float:
    samples = [replace(s, temperature=temperature) for s in samples]
    got = sequence_logprobs(model, samples, pad_id=PAD, **kw)
    worst = 0.0
    for s, lp in zip(samples, got):
        ref = unpacked_logprobs(model, s, temperature)
        assert [v == 0.0 for v in lp] == [not m for m in [0] + list(s.loss_mask[1:])]
        worst = max(worst, max(abs(a - b) for a, b in zip(lp, ref)))
    return worst


@pytest.fixture(scope="module")
def groups():
    return grouped_samples([8, 6, 4, 5], seed=7)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_logprobs_equal_one_sequence_at_a_time(model, groups, temperature):
    by_seq = {s.seq: s for s in groups}
    for budget in (64, 4096):
        mbs = build_rl_microbatches(groups, max_tokens_per_microbatch=budget, pad_id=PAD)
        copies = {}  # group prompt -> micro-batches holding a copy of it
        for i, mb in enumerate(mbs):
            for seq in mb.seq_index.tolist():
                s = by_seq[seq]
                copies.setdefault(tuple(s.token_ids[: s.loss_mask.index(1)]), set()).add(i)
        assert max(len(v) for v in copies.values()) >= 2 or budget == 4096, "no group split across micro-batches"
        assert sum(mb.attention_mask.any(-1).sum() for mb in mbs) < sum(len(s.token_ids) for s in groups)
        for share in (True, False):  # shared-prefix packing and the position-id fallback
            err = worst_error(model, groups, temperature, max_tokens_per_microbatch=budget, share_prefix=share)
            assert err <= 1e-5, (budget, share, err)


def test_packed_logprobs_equal_one_sequence_at_a_time(model):
    samples = random_samples(10, seed=1, hi=60)
    for budget in (64, 4096):
        mbs = build_rl_microbatches(samples, max_tokens_per_microbatch=budget, pad_id=PAD, share_prefix=False)
        starts = [int((row[: (row != 0).nonzero().max() + 1] == 0).sum()) for mb in mbs for row in mb.position_ids]
        assert max(starts) >= 2, "no row holds two sequences: packing would not be tested"
        assert worst_error(model, samples, 1.0, max_tokens_per_microbatch=budget) <= 1e-5


def test_eager_attention_takes_the_additive_mask(tiny_model_dir, groups):
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager").eval()
    assert eager.config._attn_implementation == "eager" and supports_shared_prefix(eager)
    assert worst_error(eager, groups, 1.0, max_tokens_per_microbatch=64) <= 1e-5


def test_sliding_window_model_falls_back(groups):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(1)
    config = Qwen2Config(vocab_size=400, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, use_sliding_window=True, sliding_window=12,
                         max_window_layers=0, pad_token_id=0)
    model = AutoModelForCausalLM.from_config(config).eval()
    assert config.layer_types == ["sliding_attention"] * 2 and max(len(s.token_ids) for s in groups) > 12
    assert not supports_shared_prefix(model)  # our mask would ignore the window
    assert worst_error(model, groups, 1.0, max_tokens_per_microbatch=4096) <= 1e-5
    (mb,) = build_rl_microbatches(groups, max_tokens_per_microbatch=4096, pad_id=PAD)
    with pytest.raises(TrainingError, match="share_prefix=False"):
        token_logits(model, mb)


def test_gradients_equal_the_unshared_computation(model, groups):
    model = copy.deepcopy(model).train()
    rng = random.Random(3)
    coef = {s.seq: [rng.uniform(-1, 1) for _ in s.token_ids] for s in groups}  # per-token loss weights

    def grads():
        out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return out

    model.zero_grad(set_to_none=True)
    for s in groups:  # the reference: one plain forward per sequence
        lp = torch.log_softmax(unpacked_logits(model, s, 0.8), -1)
        ts = [t for t in range(1, len(s.token_ids)) if s.loss_mask[t]]
        if ts:
            picked = lp[[t - 1 for t in ts], [s.token_ids[t] for t in ts]]
            (picked * torch.tensor([coef[s.seq][t] for t in ts])).sum().backward()
    expected = grads()
    for budget, share in ((4096, True), (64, True), (64, False)):
        warm = [replace(s, temperature=0.8) for s in groups]
        for mb in build_rl_microbatches(warm, max_tokens_per_microbatch=budget, pad_id=PAD, share_prefix=share):
            logp = gather_logprobs(token_logits(model, mb), mb.targets)
            w = torch.tensor([coef[s][t] for s, t in zip(mb.seq_index.tolist(), mb.token_pos.tolist())])
            (logp * w).sum().backward()
        got = grads()
        assert got.keys() == expected.keys()
        for name in expected:
            scale = float(expected[name].abs().max())
            assert torch.allclose(got[name], expected[name], rtol=1e-4, atol=1e-6 * scale), (budget, share, name)


def test_each_sample_keeps_its_own_temperature_in_a_shared_batch(model, groups):
    """Samples of one micro-batch at different temperatures: each token's logprob is the one its
    own sample's temperature gives (a replayed T=1.0 trajectory beside fresh T=0.3 ones)."""
    temps = [1.0, 0.3, 0.7, 1.3]
    mixed = [replace(s, temperature=temps[k % len(temps)]) for k, s in enumerate(groups)]
    got = sequence_logprobs(model, mixed, max_tokens_per_microbatch=4096, pad_id=PAD)
    assert len(build_rl_microbatches(mixed, max_tokens_per_microbatch=4096, pad_id=PAD)) == 1
    worst, off = 0.0, 0.0
    for s, lp in zip(mixed, got):
        ref = unpacked_logprobs(model, s, s.temperature)
        other = unpacked_logprobs(model, s, 0.5)
        worst = max(worst, max(abs(a - b) for a, b in zip(lp, ref)))
        off = max(off, max(abs(a - b) for a, b in zip(lp, other)))
    assert worst <= 1e-5
    assert off > 0.05  # the temperature matters at this size: a single shared T would be caught
