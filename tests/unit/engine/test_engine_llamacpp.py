"""The llamacpp engine (llama.cpp through llama-cpp-python, behind our Engine protocol and server) on a
sharp tiny Qwen2 exported to an f32 GGUF: greedy tokens and logprobs equal the HF reference engine's,
seeded sampling repeats and follows the model's distribution (chi-square), a shared prefix reuses
the KV without changing outputs, stop ids / stop strings / length / abort, bad input, and the
OpenAI-compatible server on 127.0.0.1. Skipped where llama-cpp-python is not installed (it compiles
from source; CI does not build it)."""

from __future__ import annotations

import copy

import pytest
import torch

from posttrain.core.errors import ConfigError
from posttrain.engine import HFEngine, SamplingParams
from posttrain.engine.server.app import build_app
from tests.unit.engine.engine_checks import chi_square, chi_square_999, logprob_error, same
from tests.unit.engine.test_server import client, posttrain_serve, running

pytest.importorskip("llama_cpp")

from posttrain.engine.llamacpp import make_engine  # noqa: E402
from posttrain.models.export import gguf_for  # noqa: E402


@pytest.fixture(scope="module")
def sharp_dir(sharp_model, tiny_tokenizer, tmp_path_factory):
    from posttrain.train.tiny import save_model

    return save_model(copy.deepcopy(sharp_model), tiny_tokenizer, tmp_path_factory.mktemp("sharp") / "model")


@pytest.fixture(scope="module")
def engine(sharp_dir, tiny_tokenizer):
    return make_engine(sharp_dir, tiny_tokenizer, gguf=gguf_for(sharp_dir, "f32"), n_ctx=256, n_threads=1)


@pytest.fixture(scope="module")
def reference(sharp_model, tiny_tokenizer):
    return HFEngine(copy.deepcopy(sharp_model), pad_token_id=0, tokenizer=tiny_tokenizer)


def test_greedy_tokens_and_logprobs_equal_the_reference(engine, reference, sharp_model, prompts):
    params = [SamplingParams(0.0, max_tokens=16) for _ in prompts]
    ours, ref = engine.generate(prompts, params), reference.generate(prompts, params)
    assert [c.token_ids for c in ours] == [c.token_ids for c in ref]
    assert all(c.finish_reason == "length" and len(c.token_ids) == 16 for c in ours)
    # llama.cpp keeps K/V in f16 (its default): logits of this x10-sharpened model (|logit| up to ~50)
    # move by ~1e-3; a wrong token, position or temperature would move them by whole nats
    assert logprob_error(sharp_model, prompts, params, ours) < 1e-2
    # T = 0.7: logprobs are log_softmax(logits / T) of the sampled token, as every engine reports
    hot = [SamplingParams(0.7, max_tokens=8, seed=3 + i) for i in range(len(prompts))]
    assert logprob_error(sharp_model, prompts, hot, engine.generate(prompts, hot)) < 1e-2


def test_seeded_sampling_repeats_and_follows_the_model(engine, sharp_model, prompts):
    p = SamplingParams(1.0, max_tokens=12, seed=11)
    a, b = engine.generate([prompts[1]], [p])[0], engine.generate([prompts[1]], [p])[0]
    assert same(a, b)  # tokens equal; logprobs up to float noise (the second prefill reuses the cached prefix)
    n = 600
    outs = engine.generate([prompts[0]] * n, [SamplingParams(1.0, max_tokens=1, seed=s) for s in range(n)])
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in outs]), minlength=engine.vocab_size).double()
    with torch.no_grad():
        probs = torch.softmax(sharp_model(input_ids=torch.tensor([prompts[0]])).logits[0, -1].float(), -1)
    stat, df = chi_square(counts[: probs.numel()], probs, n)
    assert df >= 2 and stat < chi_square_999(df), (stat, df)


def test_a_shared_prefix_reuses_the_cache_without_changing_outputs(engine, sharp_dir, tiny_tokenizer, prompts):
    greedy = SamplingParams(0.0, max_tokens=10)
    first = engine.generate([prompts[1]], [greedy])[0]
    longer = list(prompts[1]) + list(first.token_ids[:5]) + list(prompts[0])
    warm = engine.generate([longer], [greedy])[0]
    assert engine.llm.n_tokens == len(longer) + 9  # the prompt and every output but the last are in the KV
    fresh = make_engine(gguf_for(sharp_dir, "f32"), tiny_tokenizer, n_ctx=256, n_threads=1)
    assert same(fresh.generate([longer], [greedy])[0], warm)


def test_stops_length_and_abort(engine, tiny_tokenizer, prompts):
    base = engine.generate([prompts[1]], [SamplingParams(0.0, max_tokens=12)])[0].token_ids
    by_id = engine.generate([prompts[1]], [SamplingParams(0.0, max_tokens=12, stop_token_ids=(base[3],))])[0]
    assert by_id.token_ids == base[: base.index(base[3]) + 1] and by_id.finish_reason == "stop"
    word = tiny_tokenizer.decode(base[4:6]).strip()
    assert word
    by_text = engine.generate([prompts[1]], [SamplingParams(0.0, max_tokens=12, stop=(word,))])[0]
    assert by_text.finish_reason == "stop" and len(by_text.token_ids) <= 6
    assert word in tiny_tokenizer.decode(by_text.token_ids)
    first = engine.add_request(prompts[0], SamplingParams(0.0, max_tokens=5))
    second = engine.add_request(prompts[2], SamplingParams(0.0, max_tokens=5))
    engine.abort(second)
    seen = []
    while engine.has_unfinished():
        seen += engine.step()
    assert [(o.request_id, o.finish_reason) for o in seen if o.finished] == [(second, "abort"), (first, "length")]


def test_bad_input_gets_one_clear_error(engine, sharp_dir, tmp_path):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1, 2], []], [SamplingParams(0.0, max_tokens=2)] * 2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.add_request([1, engine.vocab_size], SamplingParams(0.0, max_tokens=2))
    with pytest.raises(ValueError, match="context limit"):
        engine.add_request([1] * 256, SamplingParams(0.0, max_tokens=2))
    with pytest.raises(ValueError, match="fixed GGUF"):
        engine.update_weights({}, 1)
    with pytest.raises(ConfigError, match="neither a .gguf file nor an HF model directory"):
        make_engine(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="is an HF model directory; export it first"):
        make_engine(sharp_dir)
    assert not engine.has_unfinished()  # a refused request leaves nothing queued
    # the export is reused while it is newer than the weights
    path = gguf_for(sharp_dir, "f32")
    stamp = path.stat().st_mtime_ns
    assert gguf_for(sharp_dir, "f32") == path and path.stat().st_mtime_ns == stamp


def test_served_behind_the_openai_server(engine, tiny_tokenizer, sharp_dir):
    messages = [{"role": "user", "content": "Calculate 1 + 2."}]
    prompt = tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"]
    eos = (tiny_tokenizer.eos_token_id,)
    want = engine.generate([prompt], [SamplingParams(0.0, max_tokens=12, stop_token_ids=eos)])[0]
    with running(build_app(engine, tiny_tokenizer, "tiny", enable_weight_updates=True)) as url:
        c = client(url)
        chat = c.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0)
        assert chat.choices[0].token_ids == list(want.token_ids)
        streamed = list(c.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0,
                                                  stream=True))
        assert "".join(ch.choices[0].delta.content or "" for ch in streamed) == chat.choices[0].message.content
        import httpx

        r = httpx.post(f"{url}/update_weights_from_disk", json={"model_path": str(sharp_dir)}, timeout=60)
        assert r.status_code == 400 and "fixed GGUF" in r.json()["error"]["message"]
        assert len(c.completions.create(model="tiny", prompt="x", max_tokens=2, temperature=0).choices[0].token_ids) == 2


def test_posttrain_serve_engine_llamacpp_in_its_own_process(sharp_dir):
    """`posttrain serve --engine llamacpp --mode fast` exports a q8_0 GGUF beside the model once and
    answers chat requests (standard would serve an f32 one: the LLAMACPP_MODES table)."""
    from posttrain.engine.server import app as server

    assert server.LLAMACPP_MODES == {"fast": {"dtype": "q8_0"}, "standard": {"dtype": "f32"}}
    q8 = sharp_dir.with_name(f"{sharp_dir.name}-q8_0.gguf")
    q8.unlink(missing_ok=True)
    with posttrain_serve("--model", str(sharp_dir), "--engine", "llamacpp", "--mode", "fast",
                         "--model-name", "tiny") as url:
        chat = client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Calculate 1 + 2."}], max_tokens=4, temperature=0,
            extra_body={"ignore_eos": True})
        assert len(chat.choices[0].token_ids) == 4 and chat.choices[0].finish_reason == "length"
        assert q8.is_file()
        import gguf

        types = {t.tensor_type.name for t in gguf.GGUFReader(str(q8)).tensors}
        assert "Q8_0" in types
