"""Paged engine vs HF for each family: config parsing, RoPE tables against HF's rotary
embeddings (every scaling type), greedy output token-identical to HF `generate` (Qwen2, Llama,
Qwen3 with q/k norm and explicit head_dim, Mistral, RoPE scaling), sampler logprobs against a
full HF forward, sharded safetensors loading, int8 KV error.

Models are tiny random inits with every matrix scaled by 10 ("sharp"): varied greedy paths.
"""

from __future__ import annotations

import json

import pytest
import torch

from posttrain.engine import SamplingParams
from posttrain.engine.paged import PagedEngine, make_engine
from posttrain.engine.paged.cache import quantize_int8
from posttrain.engine.paged.config import ModelSpec, rope_tables
from posttrain.engine.paged.model import load_safetensors
from posttrain.core.hf import quiet_hf_progress
from tests.unit.engine.engine_checks import greedy, logprob_error


def sharpen(model, factor: float = 10.0):
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(factor)
    return model.eval()


def build(family: str, vocab: int, **extra):
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config, "mistral": MistralConfig}[family]
    kw = dict(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=96, max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    kw.update(extra)
    torch.manual_seed(0)
    return sharpen(AutoModelForCausalLM.from_config(cls(**kw), dtype=torch.float32))


def hf_greedy(model, prompts, n):
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
    return [tuple(row) for row in out[:, width:].tolist()]


CASES = {
    "qwen2": ("qwen2", {}),
    "llama": ("llama", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"head_dim": 32, "tie_word_embeddings": False}),  # q/k norm, head_dim != hidden / heads
    "mistral": ("mistral", {"sliding_window": 8}),  # the window is shorter than the prompts + outputs
    "llama-linear": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "llama-llama3": ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "qwen2-yarn": ("qwen2", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 64}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_matches_hf_generate(case, tiny_tokenizer, prompts, tmp_path):
    family, extra = CASES[case]
    model = build(family, len(tiny_tokenizer), **extra)
    with quiet_hf_progress():
        model.save_pretrained(tmp_path, safe_serialization=True)
    eng = make_engine(tmp_path, tiny_tokenizer, device="cpu", block_size=4)
    assert eng.spec.model_type == family
    want = hf_greedy(model, prompts, 12)
    assert len(set(want)) == len(prompts)  # varied paths: a wrong position or head would show
    got = eng.generate(prompts, [greedy(12)] * len(prompts))
    assert [c.token_ids for c in got] == want
    assert {c.finish_reason for c in got} == {"length"}


def test_sliding_window_is_applied(tiny_tokenizer, prompts):
    """Mistral with window 8 vs the same weights with no window: outputs differ past 8 tokens."""
    windowed = build("mistral", len(tiny_tokenizer), sliding_window=8)
    full = build("mistral", len(tiny_tokenizer), sliding_window=None)
    a = PagedEngine.from_hf_model(windowed, device="cpu").generate(prompts[1:2], [greedy(12)])[0]
    b = PagedEngine.from_hf_model(full, device="cpu").generate(prompts[1:2], [greedy(12)])[0]
    assert a.token_ids != b.token_ids


def test_dynamic_ntk_past_max_positions_matches_hf(tiny_tokenizer, prompts):
    """Dynamic NTK changes the frequencies only past max_position_embeddings (16 here): HF
    recomputes them for each decoded token; one prompt at a time, as HF's update is batch-wide."""
    model = build("llama", len(tiny_tokenizer), max_position_embeddings=16,
                  rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    eng = PagedEngine.from_hf_model(model, device="cpu", max_model_len=64)
    for p in (prompts[0], prompts[3]):
        assert len(p) < 16
        assert eng.generate([p], [greedy(24)])[0].token_ids == hf_greedy(model, [p], 24)[0]


@pytest.mark.parametrize("rope", [
    {"rope_type": "default"},
    {"rope_type": "linear", "factor": 3.0},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 32},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 16},
])
def test_rope_tables_equal_hf_rotary_embedding(rope):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=64, num_attention_heads=2, num_hidden_layers=1, vocab_size=10,
                         max_position_embeddings=64, rope_scaling=dict(rope))
    spec = ModelSpec.from_hf(config)
    cos, sin = rope_tables(spec, 100)
    hf = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, dtype=torch.float32)
    if rope["rope_type"] == "dynamic":  # HF: one sequence length per call; position p decoded at length p + 1
        for p in (0, 10, 63, 64, 80, 99):
            want_cos, want_sin = hf(x, torch.tensor([[p]]))
            assert torch.allclose(cos[p], want_cos[0, 0], atol=1e-6) and torch.allclose(sin[p], want_sin[0, 0], atol=1e-6)
        return
    want_cos, want_sin = hf(x, torch.arange(100)[None])
    assert torch.equal(cos, want_cos[0]) and torch.equal(sin, want_sin[0])
    if rope["rope_type"] == "yarn":
        assert cos[0, 0] > 1.0  # the attention factor scales cos/sin


def test_config_parsing_old_and_new_rope_formats():
    base = dict(model_type="llama", vocab_size=10, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                intermediate_size=32, max_position_embeddings=128)
    old = ModelSpec.from_hf(dict(base, rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0}))
    new = ModelSpec.from_hf(dict(base, rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}))
    assert old.rope == new.rope and old.rope.theta == 5e5 and old.rope.get("factor") == 2.0
    assert old.head_dim == 16 and old.num_kv_heads == 4 and not old.qkv_bias
    q2 = ModelSpec.from_hf(dict(base, model_type="qwen2", num_key_value_heads=2))
    assert q2.qkv_bias and not q2.o_bias and q2.kv_size == 32
    q3 = ModelSpec.from_hf(dict(base, model_type="qwen3", head_dim=32, attention_bias=True))
    assert q3.qk_norm and q3.qkv_bias and q3.o_bias and q3.q_size == 128
    from posttrain.core.errors import ConfigError

    with pytest.raises(ConfigError, match="gpt2"):
        ModelSpec.from_hf(dict(base, model_type="gpt2"))
    with pytest.raises(ConfigError, match="longrope"):
        ModelSpec.from_hf(dict(base, rope_scaling={"rope_type": "longrope", "factor": 2.0}))
    with pytest.raises(ConfigError, match="hidden_act"):
        ModelSpec.from_hf(dict(base, hidden_act="gelu"))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_full_hf_forward(tiny_model_dir, tiny_tokenizer, prompts, temperature):
    from posttrain.core.hf import load_model

    model = sharpen(load_model(tiny_model_dir, "float32", torch.device("cpu")))
    eng = PagedEngine.from_hf_model(model, tiny_tokenizer, block_size=4, max_num_batched_tokens=8)
    params = [
        SamplingParams(temperature=temperature, max_tokens=10, seed=1),
        SamplingParams(temperature=temperature, max_tokens=8, seed=2, top_k=5),  # logprobs before truncation
        SamplingParams(temperature=temperature, max_tokens=9, seed=3, top_p=0.5, min_p=0.1),
        SamplingParams(temperature=0.0, max_tokens=7),  # greedy reports T=1 logprobs
    ]
    outs = eng.generate(prompts, params)
    assert logprob_error(model, prompts, params, outs) <= 1e-4


def test_sharded_safetensors_and_tied_head(tiny_tokenizer, prompts, tmp_path):
    model = build("qwen2", len(tiny_tokenizer), tie_word_embeddings=True)
    with quiet_hf_progress():
        model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and "lm_head.weight" not in index["weight_map"]
    assert set(load_safetensors(tmp_path)) == set(index["weight_map"])
    eng = make_engine(tmp_path, device="cpu")
    assert eng.model.lm_head is eng.model.embed
    assert [c.token_ids for c in eng.generate(prompts, [greedy(8)] * 4)] == hf_greedy(model, prompts, 8)


def test_int8_quantization_by_hand():
    x = torch.tensor([[1.0, -2.0, 0.5, 127.0], [0.0, 0.0, 0.0, 0.0]])
    q, s = quantize_int8(x)
    assert s.tolist() == [1.0, pytest.approx(1e-8 / 127)] and q[0].tolist() == [1, -2, 0, 127]  # 0.5 rounds to even
    assert torch.equal(q[1].float() * s[1], torch.zeros(4))  # an all-zero row dequantizes to zeros


def test_int8_kv_cache_logprob_error(tiny_model_dir, tiny_tokenizer, prompts):
    """Teacher-forced: the int8 engine scores the fp32 engine's sampled tokens (one prefill of prompt +
    completion: every position reads the dequantized K/V); max |delta logprob| is printed."""
    from posttrain.core.hf import load_model

    model = sharpen(load_model(tiny_model_dir, "float32", torch.device("cpu")), 3.0)
    full = PagedEngine.from_hf_model(model, tiny_tokenizer)
    quant = PagedEngine.from_hf_model(model, tiny_tokenizer, kv_dtype="int8")
    assert quant.kv_stats()["bytes_per_token"] / full.kv_stats()["bytes_per_token"] == pytest.approx((16 + 4) / 64)
    outs = full.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=24, seed=i) for i in range(4)])
    deltas = []
    for prompt, c in zip(prompts, outs):
        same = teacher_forced_logprobs(full, prompt, c.token_ids)
        assert torch.allclose(same, torch.tensor(c.logprobs), atol=1e-4)  # the measure itself is exact
        deltas.append((teacher_forced_logprobs(quant, prompt, c.token_ids) - torch.tensor(c.logprobs)).abs())
    worst, mean = float(torch.cat(deltas).max()), float(torch.cat(deltas).mean())
    print(f"int8 KV: max |delta logprob| = {worst:.4f}, mean {mean:.5f} over {len(torch.cat(deltas))} tokens")
    assert 0 < worst < 0.05


def teacher_forced_logprobs(eng: PagedEngine, prompt, completion) -> torch.Tensor:
    """log p(completion[i] | prompt + completion[:i]) under `eng`, from one prefill through its cache."""
    from posttrain.engine.paged.attention import build_metadata
    from posttrain.engine.paged.scheduler import Sequence

    seq = list(prompt) + list(completion)
    s = Sequence(-1, seq, greedy(1), 0, 0)
    assert eng.scheduler._reserve(s, len(seq), [])
    meta = build_metadata([0], [len(seq)], [s.block_table], [True], eng.block_size, eng.device,
                          group=eng.spec.num_heads // eng.spec.num_kv_heads)
    logits = eng.model.forward(torch.tensor(seq), meta, eng.cache, None)[len(prompt) - 1 : -1]
    eng.allocator.release_all(s.block_table)
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)
