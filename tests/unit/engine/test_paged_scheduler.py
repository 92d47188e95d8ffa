"""Paged KV bookkeeping: the block allocator by hand, prefix sharing (blocks counted, copy-on-write,
outputs unchanged), preemption with a cache too small for every request at once, chunked prefill
with a tiny token budget, and mixed query lengths in one forward (speculative drafts)."""

from __future__ import annotations

import pytest
import torch

from posttrain.engine import SamplingParams
from posttrain.engine.paged import PagedEngine
from tests.unit.engine.engine_checks import mixed_params
from posttrain.engine.paged.cache import BlockAllocator, block_key


@pytest.fixture(scope="module")
def model(sharp_model):
    return sharp_model


def engine(model, **options) -> PagedEngine:
    options.setdefault("block_size", 4)
    return PagedEngine.from_hf_model(model, device="cpu", **options)


def test_block_allocator_by_hand():
    a = BlockAllocator(num_blocks=5, block_size=4)
    assert a.num_free == 4 and a.num_used == 0
    b1, b2, b3 = a.allocate(), a.allocate(), a.allocate()
    assert (b1, b2, b3) == (1, 2, 3)  # block 0 is reserved
    key = block_key(None, [1, 2, 3, 4])
    a.register(b1, key)
    assert a.lookup(key) == b1 and a.lookup(block_key(None, [1, 2, 3])) is None
    a.share(b1)
    assert a.refs[b1] == 2
    a.release(b1)
    a.release_all([b1, b2])  # the tail first: b2 is freed before b1
    assert a.num_free == 3 and a.lookup(key) == b1  # a free block keeps its content key
    a.share(b1)  # found again by content: taken back from the free list
    assert a.num_free == 2 and a.refs[b1] == 1
    assert [a.allocate(), a.allocate()] == [4, 2]  # least recently freed first
    with pytest.raises(RuntimeError, match="no free block"):
        a.allocate()
    a.release(b1)
    assert a.allocate() == b1 and a.lookup(key) is None  # reused: its old content is forgotten


def test_prefix_sharing_shares_blocks_and_copies_on_write(model, prompts):
    """8 samples of one 13-token prompt (block 4: 3 full blocks + 1 partial) hold 4 prompt blocks,
    not 32; their first new tokens copy the shared partial block (7 copies, the last writes in place)."""
    prompt = prompts[1][:13]
    params = [SamplingParams(temperature=1.0, max_tokens=6, seed=s) for s in range(8)]
    shared = engine(model)
    for p in params:
        shared.add_request(prompt, p)
    shared.step()  # every prompt admitted and prefilled
    assert shared.kv_stats()["blocks_used"] == 4
    shared.step()  # each sample writes position 13 into the partial block
    assert shared.kv_stats()["blocks_used"] == 4 + 7
    while shared.has_unfinished():
        shared.step()
    assert shared.kv_stats()["blocks_used"] == 0

    for differ_at, used in ((0, 8 * 4), (12, 3 + 8)):  # nothing shared; the 3 full blocks shared
        distinct = engine(model)
        for i, p in enumerate(params):
            other = list(prompt)
            other[differ_at] = (other[differ_at] + i + 1) % 300
            distinct.add_request(other, p)
        distinct.step()
        assert distinct.kv_stats()["blocks_used"] == used
    off = engine(model, prefix_sharing=False)
    for p in params:
        off.add_request(prompt, p)
    off.step()
    assert off.kv_stats()["blocks_used"] == 8 * 4

    # identical outputs with sharing on and off, and to each sample generated alone
    a = engine(model).generate([prompt] * 8, params)
    b = engine(model, prefix_sharing=False).generate([prompt] * 8, params)
    alone = [engine(model).generate([prompt], [p])[0] for p in params[:3]]
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.token_ids for c in a[:3]] == [c.token_ids for c in alone]
    assert len({c.token_ids for c in a}) > 1


def test_prefix_found_after_the_owner_finished(model, prompts):
    """A prompt computed by an earlier request is found in freed blocks; a block-aligned prompt found
    in full feeds only its last token again (without writing K/V) and gives the same output."""
    eng = engine(model)
    prompt = prompts[1][:12]  # 3 full blocks
    first = eng.generate([prompt], [SamplingParams(temperature=0.0, max_tokens=5)])[0]
    eng.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=5))
    eng._admit_and_abort()
    batch = eng.scheduler.schedule()
    [item] = batch.scheduled
    assert (item.start, item.num_tokens, item.write_kv) == (11, 1, False)
    logits = eng._run(batch.scheduled, batch.copies)
    out = eng._postprocess(batch.scheduled, logits)
    while eng.has_unfinished():
        out += eng.step()
    assert tuple(t for o in out for t in o.token_ids) == first.token_ids


def test_preemption_completes_every_request_with_identical_output(model, prompts):
    """A cache that holds the longest request but not all 8 at once: some are preempted (their
    blocks freed) and recomputed later; every request completes with the output of a big cache."""
    params = mixed_params(8, max_tokens=26)
    many = [prompts[i % 4] for i in range(8)]
    want = engine(model).generate(many, params)
    longest_blocks = -(-(max(len(p) for p in prompts) + 26) // 4)
    total_blocks = sum(-(-(len(p) + sp.max_tokens) // 4) for p, sp in zip(many, params))
    small = engine(model, num_blocks=1 + longest_blocks + 2)
    assert small.max_model_len >= max(len(p) for p in prompts) + 26 and longest_blocks + 2 < total_blocks / 2
    got = small.generate(many, params)
    stats = small.kv_stats()
    assert stats["num_preemptions"] > 0 and stats["blocks_used"] == 0
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert all(abs(x - y) < 1e-4 for c, d in zip(got, want) for x, y in zip(c.logprobs, d.logprobs))
    assert [c.finish_reason for c in got] == ["length"] * 8


def test_chunked_prefill_with_a_small_token_budget(model, prompts):
    params = mixed_params(4, 20)
    want = engine(model).generate(prompts, params)
    chunked = engine(model, max_num_batched_tokens=3)
    for p, sp in zip(prompts, params):
        chunked.add_request(p, sp)
    seen_chunks = set()
    outs = {}
    while chunked.has_unfinished():
        chunked._admit_and_abort()
        batch = chunked.scheduler.schedule()
        assert sum(s.num_fed for s in batch.scheduled) <= 3
        seen_chunks |= {s.num_tokens for s in batch.scheduled if not s.samples}
        logits = chunked._run(batch.scheduled, batch.copies)
        for o in chunked._postprocess(batch.scheduled, logits):
            outs.setdefault(o.request_id, []).extend(o.token_ids)
    assert seen_chunks  # some prompts were fed in several chunks
    assert [tuple(outs[i]) for i in range(4)] == [c.token_ids for c in want]


def test_max_num_seqs_limits_the_batch(model, prompts):
    eng = engine(model, max_num_seqs=2)
    want = engine(model).generate(prompts, mixed_params(4, 20))
    for p, sp in zip(prompts, mixed_params(4, 20)):
        eng.add_request(p, sp)
    widest = 0
    while eng.has_unfinished():
        eng.step()
        widest = max(widest, len(eng.scheduler.running))
    assert widest == 2
    assert [c.token_ids for c in engine(model, max_num_seqs=2).generate(prompts, mixed_params(4, 20))] == [
        c.token_ids for c in want]


@pytest.mark.parametrize("drafts", ["right", "wrong", "too many"])
def test_speculative_drafts_keep_the_output(model, prompts, drafts):
    """Decodes with query length > 1 (drafts) mixed with prefills in one forward: right drafts are
    accepted (fewer steps), wrong ones rejected, and the output is the one without drafts."""
    params = mixed_params(4, max_tokens=16)
    plain = engine(model)
    want = plain.generate(prompts, params)
    by_prompt = {tuple(p): c.token_ids for p, c in zip(prompts, want)}
    longest = max(len(p) for p in prompts) + 16
    # "too many": 40 drafts, past max_tokens, the context limit and the free blocks: trimmed or dropped
    eng = engine(model, num_blocks=1 + -(-longest // 4) + 3) if drafts == "too many" else engine(model)

    def propose(seq):
        done = seq.output_ids
        truth = by_prompt[tuple(seq.tokens[: seq.num_prompt_tokens])]
        if drafts == "too many":
            return list(truth[len(done):]) + [7] * 40
        guess = list(truth[len(done) : len(done) + 3])
        return guess if drafts == "right" else [(t + 1) % 300 for t in guess]

    eng.propose = propose
    steps = 0
    for p, sp in zip(prompts, params):
        eng.add_request(p, sp)
    outs: dict[int, list[int]] = {}
    lps: dict[int, list[float]] = {}
    while eng.has_unfinished():
        for o in eng.step():
            outs.setdefault(o.request_id, []).extend(o.token_ids)
            lps.setdefault(o.request_id, []).extend(o.logprobs)
        steps += 1
    assert [tuple(outs[i]) for i in range(4)] == [c.token_ids for c in want]
    assert all(abs(x - y) < 1e-4 for i, c in enumerate(want) for x, y in zip(lps[i], c.logprobs))
    if drafts == "right":
        assert steps <= 16 // 4 + 2  # up to 4 tokens per step
    else:
        assert steps >= 16
