"""Tiny Llama- or Qwen2-family models built from a config (random init), for the
embedded base and for tests. Saved with `save_pretrained`, loaded with `from_pretrained`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from posttrain.core.hf import quiet_hf_progress


def tiny_config(
    family: str,
    vocab_size: int,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 1024,
    pad_token_id: int | None = 0,
    eos_token_id: int | None = None,
):
    from transformers import LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
    )
    if family == "llama":
        return LlamaConfig(**common)
    if family == "qwen2":
        return Qwen2Config(**common)
    raise ValueError(f"unknown model family {family!r}: expected 'llama' or 'qwen2'")


def make_tiny_model(tokenizer, family: str = "qwen2", seed: int = 0, **sizes):
    """A randomly initialised causal LM sized for `tokenizer`."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(
        family,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sizes,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_model(model, tokenizer, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with quiet_hf_progress():
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
