"""HFEngine against HF generate (greedy), a full-sequence forward (logprobs), its own sampling
distribution (chi-square against the softmax), per-request seeds, stops, and weight updates.

The random-init tiny model is close to uniform and greedy repeats one token, so most tests
use it with every matrix scaled by 10 ("sharp"): varied greedy paths, a peaked distribution.
"""

from __future__ import annotations

import copy

import pytest
import torch

from posttrain.engine import ENGINES, Completion, Engine, HFEngine, SamplingParams, sample_next
from tests.unit.engine.engine_checks import chi_square, chi_square_999, greedy, logprob_error, same


@pytest.fixture(scope="module")
def engine(sharp_model, tiny_tokenizer):
    return HFEngine(copy.deepcopy(sharp_model), pad_token_id=tiny_tokenizer.pad_token_id, tokenizer=tiny_tokenizer)


def hf_generate(model, prompts, max_new_tokens, eos_ids, pad_id):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=eos_ids, pad_token_id=pad_id,
        )
    seqs = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos_ids), len(row))
        seqs.append(tuple(row[:cut]))
    return seqs


def test_greedy_matches_hf_generate_with_left_padding(sharp_model, engine, prompts, tiny_tokenizer):
    assert len({len(p) for p in prompts}) == len(prompts)  # all lengths differ: padding exercised
    first = engine.generate(prompts, [greedy(12)] * len(prompts))
    assert all(c.finish_reason == "length" and len(c.token_ids) == 12 for c in first)
    assert len({c.token_ids for c in first}) == len(prompts)
    # a stop id that ends prompt 0 at its 4th token and some other rows at other points
    eos = [tiny_tokenizer.eos_token_id, first[0].token_ids[3]]
    ours = engine.generate(prompts, [greedy(12, stop_token_ids=tuple(eos))] * len(prompts))
    theirs = hf_generate(sharp_model, prompts, 12, eos, tiny_tokenizer.pad_token_id)
    assert [c.token_ids for c in ours] == theirs
    assert ours[0].token_ids == first[0].token_ids[:4] and ours[0].finish_reason == "stop"
    # cutting finished rows out of the batch (and cache) at once, or never, changes nothing
    for fraction in (0.0, 1.0):
        other = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, drop_finished_fraction=fraction)
        again = other.generate(prompts, [greedy(12, stop_token_ids=tuple(eos))] * len(prompts))
        assert [c.token_ids for c in again] == theirs


def test_left_padding_keeps_absolute_positions(prompts, tiny_tokenizer):
    """RoPE only sees position differences, so a shift would go unnoticed above: GPT-2 adds
    absolute position embeddings, so batched output equals one-at-a-time only if padding does
    not shift the positions."""
    from transformers import AutoModelForCausalLM, GPT2Config

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tiny_tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=128,
                        bos_token_id=None, eos_token_id=tiny_tokenizer.eos_token_id, pad_token_id=0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    eng = HFEngine(copy.deepcopy(model), pad_token_id=0)
    together = eng.generate(prompts, [greedy(8)] * len(prompts))
    alone = [eng.generate([p], [greedy(8)])[0] for p in prompts]
    assert all(same(a, b) for a, b in zip(together, alone))
    assert [c.token_ids for c in together] == hf_generate(model, prompts, 8, [tiny_tokenizer.eos_token_id], 0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_full_forward(sharp_model, engine, prompts, temperature):
    params = [
        SamplingParams(temperature=temperature, max_tokens=10, seed=1),
        SamplingParams(temperature=temperature, max_tokens=8, seed=2, top_k=5),  # logprobs before truncation
        SamplingParams(temperature=temperature, max_tokens=9, seed=3, top_p=0.5),
        SamplingParams(temperature=0.0, max_tokens=7),  # greedy reports T=1 logprobs
    ]
    outs = engine.generate(prompts, params)
    assert logprob_error(sharp_model, prompts, params, outs) <= 1e-4


def test_per_request_seed_is_batch_independent(sharp_model, engine, prompts):
    request = SamplingParams(temperature=1.0, max_tokens=10, seed=123)
    alone = engine.generate([prompts[2]], [request])[0]
    others = [SamplingParams(temperature=0.9, max_tokens=m, seed=s) for m, s in ((3, 7), (12, 8), (5, 9))]
    batch = engine.generate(prompts, [others[0], others[1], request, others[2]])
    assert same(batch[2], alone)  # padded to the longest prompt, neighbours finish earlier and later
    small = HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, max_batch_sequences=2)
    in_small_batches = small.generate([prompts[1], prompts[2], prompts[2]], [others[1], request, request])
    assert all(same(c, alone) for c in in_small_batches[1:])
    different = [engine.generate([prompts[2]], [SamplingParams(max_tokens=10, seed=s)])[0] for s in (124, 125)]
    assert alone.token_ids not in [d.token_ids for d in different]
    # unseeded requests draw their seed from the global torch RNG
    torch.manual_seed(0)
    a = engine.generate([prompts[2]] * 2, [SamplingParams(max_tokens=10)] * 2)
    torch.manual_seed(0)
    assert engine.generate([prompts[2]] * 2, [SamplingParams(max_tokens=10)] * 2) == a
    assert a[0].token_ids != a[1].token_ids


def test_sampling_frequencies_match_softmax(sharp_model, engine, prompts):
    n, t = 2000, 0.7
    prompt = prompts[0]
    with torch.no_grad():
        logits = sharp_model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    probs, probs_t1 = torch.softmax(logits / t, -1), torch.softmax(logits, -1)
    outs = engine.generate([prompt] * n, [SamplingParams(temperature=t, max_tokens=1, seed=s) for s in range(n)])
    tokens = torch.tensor([c.token_ids[0] for c in outs])
    counts = torch.bincount(tokens, minlength=probs.numel())
    stat, df = chi_square(counts, probs, n)
    assert df >= 20 and stat < chi_square_999(df)
    wrong, wrong_df = chi_square(counts, probs_t1, n)  # a sampler that ignored the temperature
    assert wrong > 3 * chi_square_999(wrong_df)
    shifted, shifted_df = chi_square(counts.roll(1), probs, n)  # an off-by-one token index
    assert shifted > 3 * chi_square_999(shifted_df)
    assert torch.allclose(torch.tensor([c.logprobs[0] for c in outs]), probs.log()[tokens], atol=1e-5)

    # top-k = 5: only the 5 most probable tokens, at their renormalised probabilities
    top5 = probs.topk(5).indices
    top5_params = [SamplingParams(temperature=t, max_tokens=1, top_k=5, seed=s) for s in range(1000)]
    outs = engine.generate([prompt] * 1000, top5_params)
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in outs]), minlength=probs.numel())
    assert int(counts[top5].sum()) == 1000
    renorm = torch.zeros_like(probs)
    renorm[top5] = probs[top5] / probs[top5].sum()
    stat, df = chi_square(counts, renorm, 1000)
    assert stat < chi_square_999(df)


def test_top_k_one_and_tiny_top_p_are_greedy(engine, prompts):
    want = [c.token_ids for c in engine.generate(prompts, [greedy(8)] * len(prompts))]
    for kw in ({"top_k": 1}, {"top_p": 1e-6}):
        got = engine.generate(prompts, [SamplingParams(temperature=1.3, max_tokens=8, seed=i, **kw) for i in range(4)])
        assert [c.token_ids for c in got] == want


def test_sample_next_by_hand():
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    logits = probs.log().repeat(4, 1)
    ones = torch.ones(4)

    def run(u, top_k=0, top_p=1.0):
        tok, lp = sample_next(logits, ones, torch.full((4,), top_k), torch.full((4,), top_p), torch.tensor(u).double())
        return tok.tolist(), lp

    assert run([0.05, 0.15, 0.35, 0.999])[0] == [0, 1, 2, 3]  # inverse CDF over [0.1, 0.3, 0.6, 1.0]
    # top-k 2 keeps {3: 4/7, 2: 3/7} in probability order
    tok, lp = run([0.5, 0.56, 0.0, 0.58], top_k=2)
    assert tok == [3, 3, 3, 2]
    assert torch.allclose(lp, probs[0].log()[tok])  # logprobs before truncation
    assert run([0.0, 0.5, 0.6, 0.9], top_p=0.5)[0] == [3, 3, 2, 2]  # 0.4 < 0.5, so 0.3 joins; 0.2 does not
    assert run([0.0, 0.5, 0.9, 0.999], top_p=0.35)[0] == [3, 3, 3, 3]  # 0.4 alone reaches 0.35
    # min-p 0.6 keeps tokens with p >= 0.6 x 0.4 = 0.24: {2: 0.3, 3: 0.4}, sampled in index order
    tok, _ = sample_next(logits, ones, torch.zeros(4, dtype=torch.long), ones, torch.tensor([0.0, 0.42, 0.43, 0.99]).double(),
                         min_p=torch.full((4,), 0.6))
    assert tok.tolist() == [2, 2, 3, 3]  # cdf over the kept mass [0.3, 0.7] / 0.7: 3/7 = 0.4286
    zero_k = torch.zeros(1, dtype=torch.long)
    tok, lp = sample_next(logits[:1] * 3, torch.zeros(1), zero_k, ones[:1], torch.zeros(1).double())
    assert tok.tolist() == [3] and torch.allclose(lp, torch.log_softmax(logits[0] * 3, -1)[3:])  # greedy: T=1


def test_finish_reasons_and_per_request_max_tokens(engine, prompts, tiny_tokenizer):
    base = engine.generate(prompts[:1], [greedy(10)])[0]
    assert base.finish_reason == "length" and len(base.token_ids) == 10
    stop_tok = engine.generate(prompts[:1], [greedy(10, stop_token_ids=(base.token_ids[4],))])[0]
    first_stop = base.token_ids.index(base.token_ids[4])  # that id may occur earlier too
    assert stop_tok.finish_reason == "stop" and stop_tok.token_ids == base.token_ids[: first_stop + 1]
    # a stop string spanning tokens 3..5 of the greedy completion ends it at token 5
    text_upto = [tiny_tokenizer.decode(base.token_ids[:i]) for i in range(11)]
    target = text_upto[6][len(text_upto[3]) :]
    first_hit = next(i for i in range(1, 11) if target in text_upto[i])
    stop_str = engine.generate(prompts[:1], [greedy(10, stop=(target, "never-there"))])[0]
    assert stop_str.finish_reason == "stop" and stop_str.token_ids == base.token_ids[:first_hit]
    lengths = [3, 7, 1, 5]
    outs = engine.generate(prompts, [greedy(m) for m in lengths])
    assert [len(c.token_ids) for c in outs] == lengths and {c.finish_reason for c in outs} == {"length"}
    bare = HFEngine(copy.deepcopy(engine.model), pad_token_id=0)
    with pytest.raises(ValueError, match="tokenizer"):
        bare.generate(prompts[:1], [greedy(3, stop=("x",))])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate([[0, 10**6]], [greedy(3)])
    with pytest.raises(ValueError, match="one per prompt"):
        engine.generate(prompts, [greedy(3)])
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)


def test_update_weights(tiny_model_dir, tiny_tokenizer, prompts):
    eng = ENGINES["hf"](tiny_model_dir, tiny_tokenizer, dtype="float32", device="cpu")
    assert isinstance(eng, Engine) and eng.version == 0
    before = eng.generate(prompts, [greedy(6)] * len(prompts))
    original = {k: v.clone() for k, v in eng.model.state_dict().items()}
    sharp = {k: v * 10.0 if v.dim() == 2 else v for k, v in original.items()}
    eng.update_weights(sharp, version=3)
    assert eng.version == 3
    after = eng.generate(prompts, [greedy(6)] * len(prompts))
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    assert all(isinstance(c, Completion) for c in after)
    eng.update_weights(original, version=4)
    assert eng.generate(prompts, [greedy(6)] * len(prompts)) == before
    bad = dict(original)
    bad["model.extra.weight"] = bad.pop("model.norm.weight")
    with pytest.raises(ValueError, match=r"missing \[model\.norm\.weight\].*unexpected \[model\.extra\.weight\]"):
        eng.update_weights(bad, version=5)
    wrong_shape = dict(original, **{"model.norm.weight": torch.ones(3)})
    with pytest.raises(ValueError, match="model.norm.weight"):
        eng.update_weights(wrong_shape, version=5)
    assert eng.version == 4
