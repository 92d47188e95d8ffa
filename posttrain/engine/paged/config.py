"""Model config of the paged engine: what the decoder needs from an HF config, and RoPE tables.

`ModelSpec.from_hf(config)` reads an HF config object (or its dict) of a Llama, Qwen2, Qwen3 or
Mistral checkpoint: sizes, grouped-query heads, explicit `head_dim`, q/k/v/o/MLP biases, Qwen3's
per-head q/k RMSNorm, tied embeddings, sliding windows per layer, and RoPE. RoPE parameters are
read from transformers 5.x `rope_parameters` or from 4.x `rope_theta` + `rope_scaling` (with
`type` or `rope_type`); supported types: default, linear, dynamic (NTK), llama3, yarn.

`rope_tables(spec, max_len)` gives cos/sin [max_len, head_dim] computed as HF's rotary embedding
does (float32 `position * inv_freq`, duplicated halves, times the attention scaling). Dynamic NTK
is per position: position p uses the frequencies for a sequence length of max(p + 1,
max_position_embeddings) -- what HF computes for a token decoded at p, and independent of batch
and chunking (HF's prefill of a prompt longer than max_position_embeddings uses one frequency set
for the whole prompt instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from posttrain.core.errors import ConfigError

FAMILIES = ("llama", "qwen2", "qwen3", "mistral")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class RopeSpec:
    rope_type: str
    theta: float
    params: tuple[tuple[str, Any], ...]  # the remaining rope_parameters entries (factor, ...)
    max_position_embeddings: int

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


@dataclass(frozen=True)
class ModelSpec:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    sliding_windows: tuple[int | None, ...]  # per layer; None = full attention
    max_position_embeddings: int
    rope: RopeSpec
    eos_token_ids: tuple[int, ...]

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def matmul_shapes(self) -> list[tuple[int, int]]:
        """(out, in) of one layer's fused q/k/v, o, fused gate/up and down projections, and the LM head."""
        h, inter = self.hidden_size, self.intermediate_size
        return [(self.q_size + 2 * self.kv_size, h), (h, self.q_size), (2 * inter, h), (h, inter),
                (self.vocab_size, h)]

    @property
    def num_parameters(self) -> int:
        """Weights in the matmuls (norms left out): what sets a step's cost."""
        layer = sum(o * i for o, i in self.matmul_shapes[:-1])
        head = self.vocab_size * self.hidden_size
        return self.num_layers * layer + head * (1 if self.tie_word_embeddings else 2)

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf(cls, config: Any) -> "ModelSpec":
        c = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        model_type = c.get("model_type")
        if model_type not in FAMILIES:
            raise ConfigError(f"paged engine: model_type {model_type!r} is not supported (supported: {', '.join(FAMILIES)})")
        act = c.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ConfigError(f"paged engine: hidden_act {act!r} is not supported (SwiGLU with silu only)")
        heads = _req(c, "num_attention_heads")
        hidden = _req(c, "hidden_size")
        head_dim = c.get("head_dim") or hidden // heads
        layers = _req(c, "num_hidden_layers")
        bias = bool(c.get("attention_bias", False))
        eos = c.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        return cls(
            model_type=model_type,
            vocab_size=_req(c, "vocab_size"),
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=c.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            intermediate_size=_req(c, "intermediate_size"),
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            qkv_bias=True if model_type == "qwen2" else bias,
            o_bias=bias if model_type in ("llama", "qwen3") else False,
            mlp_bias=bool(c.get("mlp_bias", False)) if model_type == "llama" else False,
            qk_norm=model_type == "qwen3",
            sliding_windows=_sliding_windows(c, model_type, layers),
            max_position_embeddings=int(c.get("max_position_embeddings", 2048)),
            rope=_rope_spec(c, head_dim),
            eos_token_ids=eos_ids,
        )


def _req(c: Mapping[str, Any], key: str) -> Any:
    if c.get(key) is None:
        raise ConfigError(f"paged engine: model config has no {key!r}")
    return c[key]


def _sliding_windows(c: Mapping[str, Any], model_type: str, layers: int) -> tuple[int | None, ...]:
    window = c.get("sliding_window")
    if model_type == "mistral":
        return (window,) * layers
    if model_type in ("qwen2", "qwen3"):
        if not c.get("use_sliding_window", False) or window is None:
            return (None,) * layers
        types = c.get("layer_types") or [
            "sliding_attention" if i >= c.get("max_window_layers", layers) else "full_attention" for i in range(layers)
        ]
        return tuple(window if t == "sliding_attention" else None for t in types)
    return (None,) * layers


def _rope_spec(c: Mapping[str, Any], head_dim: int) -> RopeSpec:
    params = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    if params and all(isinstance(v, dict) for v in params.values()):
        raise ConfigError("paged engine: per-layer-type rope_parameters are not supported")
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    theta = float(params.pop("rope_theta", None) or c.get("rope_theta") or 10000.0)
    if rope_type not in ROPE_TYPES:
        raise ConfigError(f"paged engine: rope type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})")
    partial = params.pop("partial_rotary_factor", None) or c.get("partial_rotary_factor") or 1.0
    if partial != 1.0:
        raise ConfigError(f"paged engine: partial_rotary_factor {partial} is not supported")
    max_pos = int(c.get("max_position_embeddings", 2048))
    if rope_type in ("llama3", "yarn"):
        params.setdefault("original_max_position_embeddings", c.get("original_max_position_embeddings") or max_pos)
    if rope_type != "default" and rope_type != "yarn" and params.get("factor") is None:
        raise ConfigError(f"paged engine: rope type {rope_type!r} needs a 'factor'")
    return RopeSpec(rope_type, theta, tuple(sorted(params.items())), max_pos)


def _base_inv_freq(theta: float, dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def inv_freq_and_scaling(rope: RopeSpec, dim: int) -> tuple[torch.Tensor, float]:
    """[dim // 2] inverse frequencies and the cos/sin scaling, as HF's ROPE_INIT_FUNCTIONS give them."""
    t = rope.rope_type
    inv = _base_inv_freq(rope.theta, dim)
    if t in ("default", "dynamic"):  # dynamic equals default up to max_position_embeddings
        return inv, 1.0
    if t == "linear":
        return inv / rope.get("factor"), 1.0
    if t == "llama3":
        factor, low, high = rope.get("factor"), rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
        old = rope.get("original_max_position_embeddings")
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    return _yarn(rope, dim)


def _yarn(rope: RopeSpec, dim: int) -> tuple[torch.Tensor, float]:
    base, orig = rope.theta, rope.get("original_max_position_embeddings")
    factor = rope.get("factor") or rope.max_position_embeddings / orig
    mscale, mscale_all = rope.get("mscale"), rope.get("mscale_all_dim")

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = rope.get("attention_factor")
    if attention is None:
        attention = get_mscale(factor, mscale) / get_mscale(factor, mscale_all) if mscale and mscale_all else get_mscale(factor)
    beta_fast, beta_slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, float(attention)


def rope_tables(spec: ModelSpec, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_len, head_dim] float32; row p rotates the token at position p."""
    rope, dim = spec.rope, spec.head_dim
    inv, scaling = inv_freq_and_scaling(rope, dim)
    positions = torch.arange(max_len, dtype=torch.int64).float()
    freqs = positions[:, None] * inv[None, :]
    if rope.rope_type == "dynamic" and max_len > rope.max_position_embeddings:
        start, factor = rope.max_position_embeddings, rope.get("factor")
        for p in range(start, max_len):  # HF recomputes the base at seq_len = p + 1 for a token at p
            base = rope.theta * ((factor * (p + 1) / start) - (factor - 1)) ** (dim / (dim - 2))
            freqs[p] = positions[p] * _base_inv_freq(base, dim)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * scaling, emb.sin() * scaling
