"""PagedEngine behaviour: the step interface (continuous batching, aborts, requests added from
other threads), sampling frequencies against the softmax, per-request seeds independent of
the batch, stops and finish reasons, the context limit, KV accounting, weight updates."""

from __future__ import annotations

import threading

import pytest
import torch

from posttrain.engine import ENGINES, Completion, HFEngine, SamplingParams
from posttrain.engine.protocol import SteppingEngine
from posttrain.engine.paged import PagedEngine, make_engine
from tests.unit.engine.engine_checks import chi_square, chi_square_999, greedy, same


@pytest.fixture(scope="module")
def model(sharp_model):
    return sharp_model


@pytest.fixture(scope="module")
def eng(model, tiny_tokenizer):
    return PagedEngine.from_hf_model(model, tiny_tokenizer, device="cpu", block_size=4)


def test_registry_and_protocol(tiny_model_dir, tiny_tokenizer):
    e = ENGINES["paged"](tiny_model_dir, tiny_tokenizer, device="cpu")
    assert isinstance(e, SteppingEngine) and isinstance(e, PagedEngine) and e.version == 0
    assert e.dtype == torch.float32 and e.vocab_size == len(tiny_tokenizer)
    assert e.eos_token_ids == (tiny_tokenizer.eos_token_id,) == tuple(e.model.generation_config.eos_token_id)
    assert e.kv_stats()["bytes_per_token"] == 2 * 2 * 2 * 16 * 4  # K+V x 2 layers x 2 kv heads x 16 dims x fp32
    assert make_engine(tiny_model_dir, dtype="bfloat16", device="cpu").kv_stats()["bytes_per_token"] == 256


def test_same_completions_as_the_hf_engine(model, eng, prompts):
    """Greedy and seeded sampling: the same seeding and sampler as HFEngine, so the same tokens."""
    params = [greedy(10), SamplingParams(temperature=0.8, max_tokens=9, seed=5, top_k=20),
              SamplingParams(temperature=1.0, max_tokens=12, seed=6, top_p=0.8), SamplingParams(max_tokens=7, seed=7, min_p=0.05)]
    ours = eng.generate(prompts, params)
    ref = HFEngine(model, pad_token_id=0).generate(prompts, params)
    assert [c.token_ids for c in ours] == [c.token_ids for c in ref]
    assert all(abs(x - y) < 1e-4 for c, d in zip(ours, ref) for x, y in zip(c.logprobs, d.logprobs))


def test_step_interface_continuous_batching(eng, prompts):
    want = eng.generate(prompts, [greedy(8), greedy(3), greedy(12), greedy(5)])
    a = eng.add_request(prompts[0], greedy(8))
    b = eng.add_request(prompts[1], greedy(3))
    got: dict[int, list[int]] = {a: [], b: []}
    finished = {}
    for step in range(20):
        if step == 2:  # joins between steps, while the others decode
            c = eng.add_request(prompts[2], greedy(12))
            d = eng.add_request(prompts[3], greedy(5))
            got.update({c: [], d: []})
        outs = eng.step()
        if step == 0:
            assert {o.request_id for o in outs} == {a, b} and all(len(o.token_ids) == 1 for o in outs)
        for o in outs:
            got[o.request_id] += o.token_ids
            if o.finished:
                finished[o.request_id] = (step, o.finish_reason)
                assert o.request_id not in [s.request_id for s in eng.scheduler.running]  # left at once
        if not eng.has_unfinished():
            break
    assert [tuple(got[r]) for r in (a, b, c, d)] == [w.token_ids for w in want]
    assert finished[b] == (2, "length") and finished[c][0] == 2 + 11
    assert eng.kv_stats()["blocks_used"] == 0


def test_abort_and_requests_from_other_threads(eng, prompts):
    keep = eng.add_request(prompts[0], greedy(6))
    drop = eng.add_request(prompts[1], greedy(50))
    never = eng.add_request(prompts[2], greedy(5))
    eng.abort(never)  # aborted before it ever ran
    outs = eng.step()
    assert any(o.request_id == never and o.finish_reason == "abort" for o in outs)
    eng.abort(drop)
    outs = eng.step()
    assert [(o.token_ids, o.finished, o.finish_reason) for o in outs if o.request_id == drop] == [([], True, "abort")]
    added: list[int] = []

    def client(i):
        added.append(eng.add_request(prompts[i % 4], greedy(4)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    done = {}
    while any(t.is_alive() for t in threads) or eng.has_unfinished():
        for o in eng.step():
            if o.finished:
                done[o.request_id] = o.finish_reason
    for t in threads:
        t.join()
    assert len(set(added)) == 8 and all(done[r] == "length" for r in added) and done[keep] == "length"
    assert eng.kv_stats()["blocks_used"] == 0


def test_sampling_frequencies_match_softmax(model, eng, prompts):
    n, t = 2000, 0.7
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts[0]])).logits[0, -1].float()
    probs = torch.softmax(logits / t, -1)
    outs = eng.generate([prompts[0]] * n, [SamplingParams(temperature=t, max_tokens=1, seed=s) for s in range(n)])
    tokens = torch.tensor([c.token_ids[0] for c in outs])
    counts = torch.bincount(tokens, minlength=probs.numel())
    stat, df = chi_square(counts, probs, n)
    assert df >= 20 and stat < chi_square_999(df)
    wrong, wrong_df = chi_square(counts, torch.softmax(logits, -1), n)  # a sampler that ignored T
    assert wrong > 3 * chi_square_999(wrong_df)
    assert torch.allclose(torch.tensor([c.logprobs[0] for c in outs]), probs.log()[tokens], atol=1e-5)


def test_per_request_seed_is_batch_independent(eng, prompts):
    request = SamplingParams(temperature=1.0, max_tokens=10, seed=123)
    alone = eng.generate([prompts[2]], [request])[0]
    others = [SamplingParams(temperature=0.9, max_tokens=m, seed=s) for m, s in ((3, 7), (12, 8), (5, 9))]
    batch = eng.generate(prompts, [others[0], others[1], request, others[2]])
    assert batch[2].token_ids == alone.token_ids
    assert all(abs(x - y) < 1e-4 for x, y in zip(batch[2].logprobs, alone.logprobs))
    different = [eng.generate([prompts[2]], [SamplingParams(max_tokens=10, seed=s)])[0] for s in (124, 125)]
    assert alone.token_ids not in [d.token_ids for d in different]
    torch.manual_seed(0)  # unseeded requests draw their seed from the global torch RNG
    a = eng.generate([prompts[2]] * 2, [SamplingParams(max_tokens=10)] * 2)
    torch.manual_seed(0)
    assert all(same(x, y) for x, y in zip(eng.generate([prompts[2]] * 2, [SamplingParams(max_tokens=10)] * 2), a))
    assert a[0].token_ids != a[1].token_ids


def test_finish_reasons_stops_and_context_limit(model, eng, prompts, tiny_tokenizer):
    base = eng.generate(prompts[:1], [greedy(10)])[0]
    stop_tok = eng.generate(prompts[:1], [greedy(10, stop_token_ids=(base.token_ids[4],))])[0]
    first = base.token_ids.index(base.token_ids[4])
    assert stop_tok.finish_reason == "stop" and stop_tok.token_ids == base.token_ids[: first + 1]
    text_upto = [tiny_tokenizer.decode(base.token_ids[:i]) for i in range(11)]
    target = text_upto[6][len(text_upto[3]):]
    first_hit = next(i for i in range(1, 11) if target in text_upto[i])
    stop_str = eng.generate(prompts[:1], [greedy(10, stop=(target, "never-there"))])[0]
    assert stop_str.finish_reason == "stop" and stop_str.token_ids == base.token_ids[:first_hit]
    short = PagedEngine.from_hf_model(model, tiny_tokenizer, max_model_len=len(prompts[1]) + 3)
    capped = short.generate(prompts[1:3], [greedy(10)] * 2)
    assert [len(c.token_ids) for c in capped] == [3, 10] and {c.finish_reason for c in capped} == {"length"}
    with pytest.raises(ValueError, match=r"prompt 0 has \d+ tokens but the context limit max_model_len is"):
        short.generate([prompts[1] + [5] * 3], [greedy(1)])
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        PagedEngine.from_hf_model(model).generate(prompts[:1], [greedy(3, stop=("x",))])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.generate([[0, 10**6]], [greedy(3)])
    with pytest.raises(ValueError, match="does not fit the KV cache"):
        PagedEngine.from_hf_model(model, num_blocks=5, block_size=4, max_model_len=64)
    assert PagedEngine.from_hf_model(model, num_blocks=5, block_size=4).max_model_len == 16


def test_update_weights_in_place(tiny_model_dir, tiny_tokenizer, prompts, tmp_path):
    from posttrain.core.hf import load_model, quiet_hf_progress
    from posttrain.train.weights import engine_state_dict

    e = make_engine(tiny_model_dir, tiny_tokenizer, device="cpu")
    before = e.generate(prompts, [greedy(6)] * 4)
    storage = {k: v.data_ptr() for k, v in e.model.params.items()}
    policy = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    with torch.no_grad():
        for p in policy.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    new = engine_state_dict(policy)
    # a request in flight when the weights change is finished under the new ones
    rid = e.add_request(prompts[1], greedy(6))
    [first] = e.step()[0].token_ids  # sampled under the old weights
    e.update_weights(new, version=3)
    assert e.version == 3 and {k: v.data_ptr() for k, v in e.model.params.items()} == storage  # in place
    rest = []
    while e.has_unfinished():
        rest += [t for o in e.step() if o.request_id == rid for t in o.token_ids]
    after = e.generate(prompts, [greedy(6)] * 4)
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    with quiet_hf_progress():
        policy.save_pretrained(tmp_path / "new", safe_serialization=True)
    reloaded = make_engine(tmp_path / "new", tiny_tokenizer, device="cpu")
    assert after == reloaded.generate(prompts, [greedy(6)] * 4)
    assert tuple(rest) == reloaded.generate([prompts[1] + [first]], [greedy(5)])[0].token_ids
    bad = dict(new)
    bad["model.extra.weight"] = bad.pop("model.norm.weight")
    with pytest.raises(ValueError, match=r"missing \[model\.norm\.weight\].*unexpected \[model\.extra\.weight\]"):
        e.update_weights(bad, version=4)
    wrong = dict(new, **{"model.layers.0.self_attn.k_proj.weight": torch.ones(3, 64)})
    with pytest.raises(ValueError, match=r"k_proj\.weight: got \(3, 64\)"):
        e.update_weights(wrong, version=4)
    again = e.generate(prompts, [greedy(6)] * 4)  # nothing half-applied (the prompts now come from the cache)
    assert e.version == 3 and all(same(a, b) for a, b in zip(again, after))
    assert all(isinstance(c, Completion) for c in after)


def test_reset_prefix_cache_forgets_cached_prefixes(tiny_model_dir, tiny_tokenizer):
    """After `reset_prefix_cache` a repeated prompt is computed again instead of sharing blocks."""
    e = make_engine(tiny_model_dir, tiny_tokenizer, device="cpu", block_size=4, speculative=None)
    prompt = list(range(5, 25))  # 5 full blocks
    e.generate([prompt], [greedy(2)])
    registered = len(e.allocator._by_key)
    assert registered >= 4
    e.reset_prefix_cache()
    assert len(e.allocator._by_key) == 0
    again = e.generate([prompt], [greedy(2)])[0]
    assert again.token_ids == e.generate([prompt], [greedy(2)])[0].token_ids
