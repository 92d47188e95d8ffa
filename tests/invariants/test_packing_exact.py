"""Packing is exact: a packed micro-batch gives the same loss as its examples run one at a time,
and no token of one example can influence another example in the same row.

This is what proves that transformers builds a block-diagonal causal mask from the position ids
we pass (attention_mask=None, use_cache=False); see posttrain/train/packing.py.
"""

from __future__ import annotations

import random

import pytest
import torch

from posttrain.algos.sft import sft_loss_sum
from posttrain.core.hf import load_model
from posttrain.train.packing import IGNORE, build_microbatches, collate_packed, collate_padded, loss_logits, tokenize_examples


def chats(n: int, seed: int = 0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        filler = " and then some" * rng.randint(0, 12)
        out.append([
            {"role": "user", "content": f"Calculate {a} + {b}{filler}."},
            {"role": "assistant", "content": f"We add {a} and {b} to get {a + b}.\nAnswer: {a + b}"},
        ])
    return out


def loss_and_tokens(model, mb):
    logits, targets = loss_logits(model, mb)
    return sft_loss_sum(logits, targets).item(), len(targets)


@pytest.fixture(params=["tiny_model_dir", "tiny_llama_dir"])
def model(request):
    m = load_model(request.getfixturevalue(request.param), dtype="float32", device=torch.device("cpu"))
    m.train()  # train mode: the mode in which transformers would build a KV cache by default
    return m


@pytest.mark.parametrize("packing", [True, False])
def test_packed_loss_equals_one_at_a_time(model, tiny_tokenizer, packing):
    examples, _ = tokenize_examples(tiny_tokenizer, chats(24), max_seq_len=512)
    mbs = build_microbatches(examples, packing=packing, row_tokens=256, max_tokens_per_microbatch=1024,
                             pad_id=tiny_tokenizer.pad_token_id, seed=0)
    if packing:
        assert any((mb.position_ids == 0).sum() > mb.input_ids.shape[0] for mb in mbs), "no row holds 2+ examples"
    total, tokens = 0.0, 0
    with torch.no_grad():
        for mb in mbs:
            s, n = loss_and_tokens(model, mb)
            total, tokens = total + s, tokens + n
        packed = total / tokens
        single = [loss_and_tokens(model, collate_packed([[ex]], tiny_tokenizer.pad_token_id)) for ex in examples]
    reference = sum(s for s, _ in single) / sum(n for _, n in single)
    assert tokens == sum(n for _, n in single)
    assert abs(packed - reference) < 1e-5, (packed, reference)


def test_tokens_of_one_example_never_change_logits_of_another_in_the_row(model, tiny_tokenizer):
    a, b, c = tokenize_examples(tiny_tokenizer, chats(3, seed=1), max_seq_len=512)[0]
    pad = tiny_tokenizer.pad_token_id

    def logits_of_row(first):
        mb = collate_packed([[first, b, c]], pad)
        with torch.no_grad():
            return model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits[0]

    changed_ids = a.input_ids.copy()
    changed_ids[1:-1] = (changed_ids[1:-1] + 7) % len(tiny_tokenizer)  # rewrite A's tokens
    changed = type(a)(changed_ids, a.labels)
    before, after = logits_of_row(a), logits_of_row(changed)
    n_a = len(a)
    assert not torch.allclose(before[:n_a], after[:n_a])  # A itself did change
    assert torch.equal(before[n_a:], after[n_a:])  # B and C: bit-identical

    alone = collate_packed([[b]], pad)
    with torch.no_grad():
        b_alone = model(input_ids=alone.input_ids, position_ids=alone.position_ids, use_cache=False).logits[0]
    assert torch.allclose(before[n_a : n_a + len(b)], b_alone, atol=1e-5)  # as if B were alone


def test_padded_rows_ignore_padding(model, tiny_tokenizer):
    examples, _ = tokenize_examples(tiny_tokenizer, chats(6, seed=2), max_seq_len=512)
    mb = collate_padded(examples, tiny_tokenizer.pad_token_id)
    assert (mb.labels[mb.input_ids == tiny_tokenizer.pad_token_id] == IGNORE).all()
    with torch.no_grad():
        s, n = loss_and_tokens(model, mb)
        single = [loss_and_tokens(model, collate_padded([ex], tiny_tokenizer.pad_token_id)) for ex in examples]
    assert abs(s / n - sum(x for x, _ in single) / sum(k for _, k in single)) < 1e-5
