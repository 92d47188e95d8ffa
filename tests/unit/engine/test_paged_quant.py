"""Rollout weights of the paged engine (quant.py): the W8A8 matmul against fp32, batch
invariance, the int8 engine against the exact one, re-quantization after a weight update, the
choice "auto" makes, the fallback when the int8 kernel is missing, and the trainer-facing
`weights_precision`."""

from __future__ import annotations

import warnings

import pytest
import torch

from posttrain.engine import SamplingParams
from posttrain.engine.paged import PagedEngine, quant


def test_int8_linear_close_to_fp32_and_batch_invariant():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 64, generator=g) * 0.05, torch.randn(96, generator=g)
    x = torch.randn(33, 64, generator=g)
    x[:, 5] *= 30  # an outlier channel: smoothing moves it into the weights
    smooth = (x.abs().amax(0).pow(0.5) / w.abs().amax(0).pow(0.5))
    ref = torch.nn.functional.linear(x, w, b)
    for s in (None, smooth):
        lin = quant.Int8Linear(w, b, s)
        y = lin(x)
        rel = ((y - ref).norm() / ref.norm()).item()
        assert rel < 0.03, rel
        # a row's result is its own: the same row alone or in any batch
        assert torch.equal(lin(x[7:8]), y[7:8]) and torch.equal(lin(x[3:20])[4], y[7])
    plain, smoothed = quant.Int8Linear(w, b, None)(x), quant.Int8Linear(w, b, smooth)(x)
    assert (smoothed - ref).norm() < (plain - ref).norm()  # SmoothQuant helps with the outlier


def _first_logprobs(engine, prompts, n=6):
    out = engine.generate(prompts, [SamplingParams(temperature=0.0, max_tokens=n)] * len(prompts))
    return out


def test_int8_weight_only_linear_close_and_batch_invariant():
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(96, 64, generator=g) * 0.05, torch.randn(96, generator=g)
    x = torch.randn(9, 64, generator=g).to(torch.bfloat16)
    lin = quant.Int8WeightOnly(w, b)
    y, ref = lin(x), torch.nn.functional.linear(x.float(), w, b)
    assert y.dtype == torch.bfloat16 and ((y.float() - ref).norm() / ref.norm()).item() < 0.03
    assert torch.equal(lin(x[2:3]), y[2:3])


@pytest.mark.parametrize("mode", ["int8", "int8-weight-only"])
def test_int8_engine_tracks_the_exact_one(mode, tiny_model_dir, tiny_tokenizer, prompts):
    exact = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu")
    int8 = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu", weights=mode)
    assert (exact.weights, exact.weights_precision) == ("exact", "exact")
    assert (int8.weights, int8.weights_precision) == (mode, mode) and int8.kv_stats()["weights"] == mode
    a, b = _first_logprobs(exact, prompts), _first_logprobs(int8, prompts)
    # the first token of each prompt sees the same context on both sides
    gaps = [abs(x.logprobs[0] - y.logprobs[0]) for x, y in zip(a, b) if x.token_ids[0] == y.token_ids[0]]
    assert len(gaps) >= len(prompts) - 1 and max(gaps) < 0.1, gaps
    assert max(gaps) > 0  # the int8 path really ran


def test_update_weights_requantizes(tiny_model_dir, tiny_tokenizer, prompts):
    from posttrain.core.hf import load_model

    model = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    int8 = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu", weights="int8")
    exact = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu")
    before = _first_logprobs(int8, prompts)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3.0)  # sharper: greedy logprobs move a lot
    state = model.state_dict()
    int8.update_weights(state, 1)
    exact.update_weights(state, 1)
    after, ref = _first_logprobs(int8, prompts), _first_logprobs(exact, prompts)
    moved = [abs(x.logprobs[0] - y.logprobs[0]) for x, y in zip(before, after)]
    assert max(moved) > 0.2  # the int8 copies follow the new masters ...
    gaps = [abs(x.logprobs[0] - y.logprobs[0]) for x, y in zip(after, ref) if x.token_ids[0] == y.token_ids[0]]
    assert gaps and max(gaps) < 0.3, gaps  # ... and stay close to the exact engine


def test_auto_choice():
    cpu = torch.device("cpu")
    assert quant.resolve_mode("auto", cpu, 1_000_000) == "exact"  # small: the step is not matmul-bound
    big = quant.resolve_mode("auto", cpu, 134_000_000)
    assert big in ("bf16", "int8")
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        assert big == "bf16"
    with pytest.raises(ValueError, match="weights must be one of"):
        quant.resolve_mode("fp8", cpu, 1)


def test_missing_int8_kernel_falls_back_with_one_warning(monkeypatch, tiny_model_dir, tiny_tokenizer):
    def broken(*_args, **_kw):
        raise RuntimeError("no int8 kernel on this CPU\nmore detail")

    monkeypatch.setattr(torch, "_int_mm", broken)
    monkeypatch.setattr(torch, "_weight_int8pack_mm", broken)
    for mode, kernel in (("int8", "torch._int_mm"), ("int8-weight-only", "torch._weight_int8pack_mm")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            e = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu", weights=mode)
        msgs = [str(w.message) for w in caught if f"weights={mode!r}" in str(w.message)]
        assert len(msgs) == 1 and f"{kernel} is unavailable: no int8 kernel on this CPU" in msgs[0]
        assert "\n" not in msgs[0]
        assert (e.weights, e.weights_precision) == ("exact", "exact")
        assert e.generate([[5, 6, 7]], [SamplingParams(temperature=0.0, max_tokens=3)])[0].finish_reason == "length"


def test_bf16_weights_are_reported_inexact_or_fall_back(tiny_model_dir, tiny_tokenizer, monkeypatch):
    if quant.native_bf16():
        e = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu", weights="bf16")
        assert e.dtype == torch.bfloat16 and e.weights_precision == "bfloat16"
    monkeypatch.setattr(quant, "native_bf16", lambda: False)  # a CPU without bf16 instructions
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        e = PagedEngine.from_pretrained(tiny_model_dir, tiny_tokenizer, device="cpu", weights="bf16")
    msgs = [str(w.message) for w in caught if "weights='bf16'" in str(w.message)]
    assert len(msgs) == 1 and "no bf16 instructions" in msgs[0]
    assert (e.weights, e.dtype, e.weights_precision) == ("exact", torch.float32, "exact")
