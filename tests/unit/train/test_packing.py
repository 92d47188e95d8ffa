"""Tokenization with assistant-only loss targets, first-fit-decreasing packing, micro-batches by token budget."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from posttrain.train.packing import (
    IGNORE,
    TokenizedExample,
    build_microbatches,
    collate_packed,
    has_generation_tags,
    pack_ffd,
    tokenize_example,
    tokenize_examples,
)

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Calculate 12 + 30."},
    {"role": "assistant", "content": "We add 12 and 30 to get 42.\nAnswer: 42"},
    {"role": "user", "content": "And 1 + 1?"},
    {"role": "assistant", "content": "Answer: 2"},
]


def targets_text(tok, ex: TokenizedExample) -> str:
    return tok.decode(ex.labels[ex.labels != IGNORE].tolist())


def test_loss_targets_are_exactly_the_assistant_replies(tiny_tokenizer):
    ex, truncated = tokenize_example(tiny_tokenizer, CHAT, max_seq_len=512)
    assert not truncated
    assert targets_text(tiny_tokenizer, ex) == "We add 12 and 30 to get 42.\nAnswer: 42<|im_end|>Answer: 2<|im_end|>"
    # labels are next-token targets: labels[t] == input_ids[t+1] wherever there is a label
    where = np.nonzero(ex.labels != IGNORE)[0]
    assert (ex.labels[where] == ex.input_ids[where + 1]).all()
    assert ex.labels[-1] == IGNORE


def test_prefix_diff_fallback_matches_the_generation_mask(tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = tok.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    assert has_generation_tags(tiny_tokenizer) and not has_generation_tags(tok)
    ref, _ = tokenize_example(tiny_tokenizer, CHAT, 512)
    got, _ = tokenize_example(tok, CHAT, 512)
    assert (got.input_ids == ref.input_ids).all()
    # prefix diffing also counts the '\n' after <|im_end|> as part of the turn; nothing else differs
    extra = (got.labels != IGNORE) & (ref.labels == IGNORE)
    assert (got.labels[ref.labels != IGNORE] == ref.labels[ref.labels != IGNORE]).all()
    assert set(tok.decode([int(t)]) for t in got.labels[extra]) <= {"\n"}


def test_truncation_and_dropping_examples_without_loss_tokens(tiny_tokenizer):
    full, _ = tokenize_example(tiny_tokenizer, CHAT, 512)
    keep = int(np.nonzero(full.labels != IGNORE)[0][0]) + 5  # a few assistant tokens survive
    cut, truncated = tokenize_example(tiny_tokenizer, CHAT, keep)
    assert truncated and len(cut) == keep
    assert (cut.input_ids == full.input_ids[:keep]).all()
    assert (cut.labels[:-1] == full.labels[: keep - 1]).all() and cut.labels[-1] == IGNORE
    long_prompt = [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "ok"}]
    examples, stats = tokenize_examples(tiny_tokenizer, [CHAT, long_prompt], max_seq_len=keep)
    assert len(examples) == 1 and stats.dropped == 1 and stats.truncated == 2


def test_pack_ffd_hand_example():
    # sorted: 5(i0) 4(i1) 3(i2) 3(i3) 2(i4) 1(i5), capacity 8
    # 5 -> row0 (3 free); 4 -> row1 (4 free); 3 -> row0 (0); 3 -> row1 (1); 2 -> row2 (6); 1 -> row1 (0)
    assert pack_ffd([5, 4, 3, 3, 2, 1], 8) == [[0, 2], [1, 3, 5], [4]]
    assert pack_ffd([10, 2, 3], 8) == [[0], [2, 1]]  # too long for a row: a row of its own


def test_pack_ffd_places_every_item_once_within_capacity():
    rng = random.Random(0)
    lengths = [rng.randint(16, 512) for _ in range(3000)]
    rows = pack_ffd(lengths, 512)
    assert sorted(i for row in rows for i in row) == list(range(3000))
    fill = [sum(lengths[i] for i in row) for row in rows]
    assert max(fill) <= 512
    assert sum(lengths) / (512 * len(rows)) > 0.95  # FFD wastes little on uniform lengths


def test_collate_packed_positions_restart_and_padding_is_its_own_block():
    a = TokenizedExample(np.array([5, 6, 7]), np.array([6, 7, IGNORE]))
    b = TokenizedExample(np.array([8, 9]), np.array([IGNORE, IGNORE]))
    c = TokenizedExample(np.array([1, 2, 3, 4]), np.array([IGNORE, 3, 4, IGNORE]))
    mb = collate_packed([[a, b], [c]], pad_id=0)
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 4, 0]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]]
    assert mb.labels.tolist() == [[6, 7, IGNORE, IGNORE, IGNORE], [IGNORE, 3, 4, IGNORE, IGNORE]]
    assert (mb.n_tokens, mb.n_loss_tokens) == (9, 4)


def random_examples(n, seed=0, lo=16, hi=300):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(lo, hi + 1))
        ids = np.full(length, i, dtype=np.int64)  # token id = example index, to trace where it went
        labels = np.full(length, IGNORE, dtype=np.int64)
        labels[length // 2 : -1] = i
        out.append(TokenizedExample(ids, labels))
    return out


@pytest.mark.parametrize("packing", [True, False])
def test_microbatches_respect_budget_and_hold_each_example_once(packing):
    examples = random_examples(400)
    mbs = build_microbatches(examples, packing=packing, row_tokens=512, max_tokens_per_microbatch=2048,
                             pad_id=-1, seed=0)
    seen = []
    for mb in mbs:
        assert mb.input_ids.numel() <= 2048
        for row, pos in zip(mb.input_ids.tolist(), (mb.position_ids if packing else mb.input_ids * 0).tolist()):
            seen += [tok for tok, p in zip(row, pos) if p == 0 and tok >= 0] if packing else [row[0]]
        assert mb.n_tokens == int((mb.input_ids >= 0).sum())
        assert mb.n_loss_tokens == int((mb.labels != IGNORE).sum())
    assert sorted(seen) == list(range(400))
    assert sum(mb.n_tokens for mb in mbs) == sum(len(ex) for ex in examples)
    if packing:  # packed rows are nearly full; padded ones are not
        assert sum(mb.n_tokens for mb in mbs) / sum(mb.input_ids.numel() for mb in mbs) > 0.9


def test_microbatches_are_deterministic_by_seed():
    examples = random_examples(200)
    kw = dict(packing=True, row_tokens=512, max_tokens_per_microbatch=2048, pad_id=-1)
    one = build_microbatches(examples, seed=1, **kw)
    two = build_microbatches(examples, seed=1, **kw)
    other = build_microbatches(examples, seed=2, **kw)
    assert all((x.input_ids == y.input_ids).all() for x, y in zip(one, two))
    assert [x.input_ids.shape for x in one] != [x.input_ids.shape for x in other] or any(
        not (x.input_ids == y.input_ids).all() for x, y in zip(one, other)
    )
