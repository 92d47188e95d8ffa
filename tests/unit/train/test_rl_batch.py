"""Packed RL micro-batches: per-token data lines up with the trained tokens, the token budget holds,
and packed logprobs equal an unpacked forward pass per sequence (no attention across sequences)."""

from __future__ import annotations

import random

import pytest
import torch

from posttrain.train.model import load_model
from posttrain.train.rl_batch import ROW_TOKENS, Sample, build_rl_microbatches, sequence_logprobs

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


def test_one_microbatch_by_hand():
    (mb,) = build_rl_microbatches([A, B, C], max_tokens_per_microbatch=1000, pad_id=PAD)
    # one row, first-fit decreasing: A (6 tokens), C (4), B (3)
    assert mb.input_ids.tolist() == [[10, 11, 12, 13, 14, 15, 30, 31, 32, 33, 20, 21, 22]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2]]
    # position t is selected when token t+1 is trained (never the last token of a sequence)
    assert mb.selected.int().tolist() == [[0, 1, 1, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0]]
    assert mb.targets.tolist() == [12, 13, 15, 33, 21, 22]
    assert close(mb.old_logprobs, [-0.1, -0.2, -0.3, -0.6, -0.4, -0.5])
    assert close(mb.advantages, [0.5, 0.5, 0.5, 2.0, -1.0, -1.0])
    assert mb.seq_index.tolist() == [0, 0, 0, 2, 1, 1]
    assert close(mb.ref_logprobs, [-1.1, -1.2, -1.3, -1.6, -1.4, -1.5])
    assert close(mb.token_weights, [0.9, 0.8, 0.7, 0.4, 0.6, 0.5])
    assert mb.num_tokens == 6


def test_split_microbatches():
    mbs = build_rl_microbatches([A, B, C], max_tokens_per_microbatch=6, pad_id=PAD)
    # rows of <= 6 tokens: A fills one, C (4) + B (3) do not fit together; any two rows exceed 6
    assert [mb.input_ids.tolist() for mb in mbs] == [[[10, 11, 12, 13, 14, 15]], [[30, 31, 32, 33]], [[20, 21, 22]]]
    assert [mb.targets.tolist() for mb in mbs] == [[12, 13, 15], [33], [21, 22]]
    assert [mb.seq_index.tolist() for mb in mbs] == [[0, 0, 0], [2], [1, 1]]
    assert [mb.advantages.tolist() for mb in mbs] == [[0.5] * 3, [2.0], [-1.0] * 2]
    (mb,) = build_rl_microbatches([A, B], max_tokens_per_microbatch=12, pad_id=PAD)  # 6 + 3 share a row
    assert mb.input_ids.tolist() == [[10, 11, 12, 13, 14, 15, 20, 21, 22]]
    assert close(mb.old_logprobs, [-0.1, -0.2, -0.3, -0.4, -0.5])


def test_rows_are_padded_and_optional_fields_stay_none():
    a = Sample([1, 2, 3, 4, 5], [0, 0, 1, 1, 1], [0, 0, -1, -2, -3], 1.0, 0)
    b = Sample([6, 7, 8, 9, 10], [0, 1, 1, 1, 1], [0, -4, -5, -6, -7], -1.0, 1)
    (mb,) = build_rl_microbatches([a, b], max_tokens_per_microbatch=10, pad_id=PAD)
    assert mb.ref_logprobs is None and mb.token_weights is None
    assert mb.targets.tolist() == [3, 4, 5, 7, 8, 9, 10]
    # a row holds max(ROW_TOKENS, longest) tokens: two sequences around ROW_TOKENS need two rows,
    # the shorter one padded to the longer in one micro-batch
    n1, n2 = ROW_TOKENS + 44, ROW_TOKENS - 6
    long = [Sample([7] * n, [0] + [1] * (n - 1), [-0.5] * n, 1.0, k) for k, n in enumerate([n1, n2])]
    (mb,) = build_rl_microbatches(long, max_tokens_per_microbatch=4096, pad_id=PAD)
    assert mb.input_ids.shape == (2, n1)
    assert (mb.input_ids[1, n2:] == PAD).all() and mb.position_ids[1, n2:].tolist() == list(range(n1 - n2))
    assert not mb.selected[1, n2 - 1 :].any() and int(mb.selected.sum()) == n1 - 1 + n2 - 1 == mb.num_tokens


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


def per_sample_expected(samples):
    return {s.seq: [(s.token_ids[t + 1], s.old_logprobs[t + 1]) for t in range(len(s.token_ids) - 1) if s.loss_mask[t + 1]]
            for s in samples}


@pytest.mark.parametrize("budget", [16, 50, 64, 100, 200, 4096])
def test_token_budget_and_every_token_once(budget):
    samples = random_samples(30, seed=budget, hi=90)
    lengths = {s.seq: len(s.token_ids) for s in samples}
    mbs = build_rl_microbatches(samples, max_tokens_per_microbatch=budget, pad_id=PAD)
    got = {}
    for mb in mbs:
        seqs = sorted(set(mb.seq_index.tolist()))
        if mb.input_ids.numel() > budget:  # only a single sequence longer than the budget may exceed it
            assert mb.input_ids.shape[0] == 1 and len(seqs) == 1 and lengths[seqs[0]] > budget, (
                budget, mb.input_ids.shape, [lengths[s] for s in seqs])
        for s, tgt, old in zip(mb.seq_index.tolist(), mb.targets.tolist(), mb.old_logprobs.tolist()):
            got.setdefault(s, []).append((tgt, pytest.approx(old)))
        # targets are the next tokens of the selected positions, inside the same sequence
        r, c = mb.selected.nonzero(as_tuple=True)
        assert torch.equal(mb.input_ids[r, c + 1], mb.targets)
        assert (mb.position_ids[r, c + 1] == mb.position_ids[r, c] + 1).all()
    assert got == per_sample_expected(samples)


def test_budget_holds_when_the_longest_sequence_sets_the_row_length():
    # lengths 120, 90, 30 with a budget of 100: 90 and 30 must not share a 120-token row
    samples = [Sample([1] * n, [0] + [1] * (n - 1), [0.0] * n, 0.0, k) for k, n in enumerate([120, 90, 30])]
    mbs = build_rl_microbatches(samples, max_tokens_per_microbatch=100, pad_id=PAD)
    assert sorted(mb.input_ids.numel() for mb in mbs) == [30, 90, 120]


# ---------------------------------------------------------------- logprobs on the tiny model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir, dtype="float32", device=torch.device("cpu")).eval()


@torch.no_grad()
def unpacked_logprobs(model, s: Sample, temperature: float) -> list[float]:
    logits = model(input_ids=torch.tensor([list(s.token_ids)]), use_cache=False).logits[0].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    out = [0.0] * len(s.token_ids)
    for t in range(1, len(s.token_ids)):
        if s.loss_mask[t]:
            out[t] = float(lp[t - 1, s.token_ids[t]])
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_logprobs_equal_one_sequence_at_a_time(model, temperature):
    samples = random_samples(10, seed=1, hi=60)
    for budget in (64, 4096):
        mbs = build_rl_microbatches(samples, max_tokens_per_microbatch=budget, pad_id=PAD)
        starts = [int((row[: (row != 0).nonzero().max() + 1] == 0).sum()) for mb in mbs for row in mb.position_ids]
        assert max(starts) >= 2, "no row holds two sequences: packing would not be tested"
        got = sequence_logprobs(model, samples, temperature=temperature, max_tokens_per_microbatch=budget, pad_id=PAD)
        worst = 0.0
        for s, lp in zip(samples, got):
            ref = unpacked_logprobs(model, s, temperature)
            assert [v == 0.0 for v in lp] == [not m for m in [0] + list(s.loss_mask[1:])]
            worst = max(worst, max(abs(a - b) for a, b in zip(lp, ref)))
        assert worst <= 1e-5, (budget, worst)
