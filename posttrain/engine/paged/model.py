"""The decoder of the paged engine in plain PyTorch, and its weights.

Llama / Qwen2 / Qwen3 / Mistral: embedding, per layer RMSNorm -> fused q/k/v projection (with
Qwen2's biases, Qwen3's per-head q/k RMSNorm) -> RoPE -> K/V written to the paged cache ->
attention over the cache -> o projection, RMSNorm -> fused gate/up -> SiLU(gate) * up -> down;
final RMSNorm and the LM head (the embedding when tied) on the rows whose logits are needed.
Every matmul goes through `_linear`: F.linear on these weights, or their int8 copies (quant.py).

Weights come from the checkpoint's safetensors files (`load_safetensors`, sharded index
included) or from an HF model's state dict, named as HF names them. q/k/v and gate/up are
stored fused, and every HF name maps to a view into the fused storage, so `update_weights`
copies a trainer's state dict in place: no reload, no new allocation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F

from posttrain.core.errors import ModelLoadError
from posttrain.engine.paged.attention import AttentionMetadata, paged_attention, rotate
from posttrain.engine.paged.config import ModelSpec, rope_tables

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some checkpoints carry; recomputed here


def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of an HF model directory: model.safetensors, or the shards its index names."""
    from safetensors.torch import load_file

    p = Path(path)
    index = p / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError) as e:
            raise ModelLoadError(f"{index}: not a safetensors index (no weight_map): {e}") from None
    else:
        files = sorted(f.name for f in p.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{p}: no *.safetensors weights (the paged engine reads safetensors only)")
    out: dict[str, torch.Tensor] = {}
    for name in files:
        if not (p / name).is_file():
            raise ModelLoadError(f"{index}: shard {name} is missing")
        out.update(load_file(str(p / name)))
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm, computed in float32 inside torch's fused kernel for every input dtype. In bf16 HF
    rounds the normalised activations to bf16 before the scale (two roundings, one here): the
    difference is within a bf16 ulp, and the fused kernel saved ~8% of a batched bf16 CPU step."""
    return F.rms_norm(x, weight.shape, weight, eps)


class _Layer:
    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device):
        def empty(*shape):
            return torch.empty(*shape, dtype=dtype, device=device)

        h, q, kv, inter = spec.hidden_size, spec.q_size, spec.kv_size, spec.intermediate_size
        self.ln1, self.ln2 = empty(h), empty(h)
        self.qkv_w = empty(q + 2 * kv, h)
        self.qkv_b = empty(q + 2 * kv) if spec.qkv_bias else None
        self.o_w = empty(h, q)
        self.o_b = empty(h) if spec.o_bias else None
        self.q_norm = empty(spec.head_dim) if spec.qk_norm else None
        self.k_norm = empty(spec.head_dim) if spec.qk_norm else None
        self.gate_up_w = empty(2 * inter, h)
        self.gate_up_b = empty(2 * inter) if spec.mlp_bias else None
        self.down_w = empty(h, inter)
        self.down_b = empty(h) if spec.mlp_bias else None

    def named(self, prefix: str, spec: ModelSpec) -> dict[str, torch.Tensor]:
        q, kv, inter = spec.q_size, spec.kv_size, spec.intermediate_size
        out = {
            f"{prefix}.input_layernorm.weight": self.ln1,
            f"{prefix}.post_attention_layernorm.weight": self.ln2,
            f"{prefix}.self_attn.o_proj.weight": self.o_w,
            f"{prefix}.mlp.down_proj.weight": self.down_w,
        }
        for part, rows in (("q", slice(0, q)), ("k", slice(q, q + kv)), ("v", slice(q + kv, q + 2 * kv))):
            out[f"{prefix}.self_attn.{part}_proj.weight"] = self.qkv_w[rows]
            if self.qkv_b is not None:
                out[f"{prefix}.self_attn.{part}_proj.bias"] = self.qkv_b[rows]
        for part, rows in (("gate", slice(0, inter)), ("up", slice(inter, 2 * inter))):
            out[f"{prefix}.mlp.{part}_proj.weight"] = self.gate_up_w[rows]
            if self.gate_up_b is not None:
                out[f"{prefix}.mlp.{part}_proj.bias"] = self.gate_up_b[rows]
        if self.o_b is not None:
            out[f"{prefix}.self_attn.o_proj.bias"] = self.o_b
        if self.down_b is not None:
            out[f"{prefix}.mlp.down_proj.bias"] = self.down_b
        if self.q_norm is not None:
            out[f"{prefix}.self_attn.q_norm.weight"] = self.q_norm
            out[f"{prefix}.self_attn.k_norm.weight"] = self.k_norm
        return out


class PagedModel:
    """Parameters (HF-named views into fused tensors) and the forward over a paged batch."""

    def __init__(self, spec: ModelSpec, weights: Mapping[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device, max_len: int):
        self.spec, self.dtype, self.device = spec, dtype, device
        self.embed = torch.empty(spec.vocab_size, spec.hidden_size, dtype=dtype, device=device)
        self.norm = torch.empty(spec.hidden_size, dtype=dtype, device=device)
        self.lm_head = self.embed if spec.tie_word_embeddings else torch.empty_like(self.embed)
        self.layers = [_Layer(spec, dtype, device) for _ in range(spec.num_layers)]
        self.params: dict[str, torch.Tensor] = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.norm}
        if not spec.tie_word_embeddings:
            self.params["lm_head.weight"] = self.lm_head
        for i, layer in enumerate(self.layers):
            self.params.update(layer.named(f"model.layers.{i}", spec))
        cos, sin = rope_tables(spec, max_len)
        self.cos, self.sin = cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)
        self.scale = spec.head_dim**-0.5
        self.quant = None  # quant.Quantized when the matmuls run in int8 (set by the engine)
        self.observer = None  # calibration: called with (layer key, input) before each matmul
        self.load(weights, what="checkpoint")

    @property
    def num_parameters(self) -> int:
        return sum(t.numel() for t in self.params.values())

    @torch.no_grad()
    def load(self, weights: Mapping[str, torch.Tensor], what: str = "update_weights") -> None:
        """Copy HF-named tensors into the parameters in place; every check runs before any copy."""
        tied_head = self.spec.tie_word_embeddings and "lm_head.weight" in weights
        names = [k for k in weights if not k.endswith(_IGNORED_SUFFIXES) and not (tied_head and k == "lm_head.weight")]
        missing = sorted(set(self.params) - set(names))
        unexpected = sorted(set(names) - set(self.params))
        if missing or unexpected:
            raise ValueError(
                f"{what}: state dict keys do not match the {self.spec.model_type} model: "
                f"missing {_names(missing)}, unexpected {_names(unexpected)}"
            )
        shapes = [(k, weights[k].shape) for k in names]
        if tied_head:
            shapes.append(("lm_head.weight", weights["lm_head.weight"].shape))
        for k, shape in shapes:
            want = self.params["model.embed_tokens.weight" if k == "lm_head.weight" else k].shape
            if tuple(shape) != tuple(want):
                raise ValueError(f"{what}: shape mismatch for {k}: got {tuple(shape)}, the model has {tuple(want)}")
        for k in names:
            self.params[k].copy_(weights[k])
        if self.quant is not None:
            self.quant.rebuild()

    def linears(self):
        """(key, weight, bias) of every matmul, in forward order: each layer's fused q/k/v, o, fused
        gate/up and down ((layer, name) keys), then the LM head ((-1, "lm_head"))."""
        for i, layer in enumerate(self.layers):
            for name in ("qkv", "o", "gate_up", "down"):
                yield (i, name), getattr(layer, f"{name}_w"), getattr(layer, f"{name}_b")
        yield (-1, "lm_head"), self.lm_head, None

    def _linear(self, x: torch.Tensor, key: tuple[int, str], w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        if self.observer is not None:
            self.observer(key, x)
        if self.quant is not None:
            return self.quant.linear(x, key)
        return F.linear(x, w, b)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata, cache, logits_rows: torch.Tensor | None
                ) -> torch.Tensor:
        """input_ids [T] -> logits [R, vocab] (the model dtype) of the rows `logits_rows` (all rows when None)."""
        spec, eps, lin = self.spec, self.spec.rms_norm_eps, self._linear
        t = input_ids.shape[0]
        q_size, kv_size, heads, kv_heads = spec.q_size, spec.kv_size, spec.num_heads, spec.num_kv_heads
        cos, sin = self.cos[meta.positions], self.sin[meta.positions]
        h = F.embedding(input_ids, self.embed)
        for i, layer in enumerate(self.layers):
            x = rms_norm(h, layer.ln1, eps)
            qkv = lin(x, (i, "qkv"), layer.qkv_w, layer.qkv_b)
            if layer.q_norm is not None:
                q = rotate(rms_norm(qkv[:, :q_size].view(t, heads, -1), layer.q_norm, eps), cos, sin)
                k = rotate(rms_norm(qkv[:, q_size : q_size + kv_size].view(t, kv_heads, -1), layer.k_norm, eps), cos, sin)
            else:
                qk = rotate(qkv[:, : q_size + kv_size].view(t, heads + kv_heads, -1), cos, sin)
                q, k = qk[:, :heads], qk[:, heads:]
            cache.write(i, meta.slot_mapping, k.reshape(t, kv_size), qkv[:, q_size + kv_size :])
            o = paged_attention(q, cache, i, meta, self.scale, spec.sliding_windows[i])
            h = h + lin(o, (i, "o"), layer.o_w, layer.o_b)
            x = rms_norm(h, layer.ln2, eps)
            gate, up = lin(x, (i, "gate_up"), layer.gate_up_w, layer.gate_up_b).chunk(2, dim=-1)
            h = h + lin(F.silu(gate) * up, (i, "down"), layer.down_w, layer.down_b)
        if logits_rows is not None:
            h = h.index_select(0, logits_rows)
        return lin(rms_norm(h, self.norm, eps), (-1, "lm_head"), self.lm_head, None)


def _names(keys: list[str], limit: int = 5) -> str:
    if not keys:
        return "[]"
    shown = ", ".join(keys[:limit])
    return f"[{shown}{f', ... ({len(keys)} in all)' if len(keys) > limit else ''}]"
