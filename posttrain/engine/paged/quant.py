"""Rollout weights for the paged engine: which precision runs the matmuls, and the int8 path.

`weights` (an engine option):

- "exact": the matmuls use the model's weights in the engine dtype (fp32 on CPU: the trainer's
  masters bit for bit);
- "bf16": the whole model in bfloat16 (weights, activations, KV cache);
- "int8": W8A8 on CPU. Each linear layer (fused q/k/v, o, fused gate/up, down, LM head) keeps an
  int8 copy of its weight with one absmax scale per output channel; each token's input row is
  quantized to int8 with its own absmax scale at run time, `torch._int_mm` multiplies int8 x int8
  into int32, and the result is rescaled by (row scale x channel scale), then the bias is added.
  Per-token scales keep a row's result independent of the rest of the batch. SmoothQuant
  (Xiao et al. 2023) first moves activation outliers into the weights: per input channel j,
  s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha), W' = W * s, x' = x / s. The activation maxima
  come from one data-free calibration pass over random token ids at load (no dataset is read);
  the scales stay fixed afterwards and every weight update re-quantizes W' from the new masters.
  Everything else (norms, RoPE, attention, the KV cache) stays in the engine dtype; the fp32
  weights stay too (the in-place `update_weights` copies into them), so int8 adds a quarter to
  the weights' memory.
- "int8-weight-only": int8 weights (per output channel), bf16 activations, bf16 KV cache:
  `torch._weight_int8pack_mm` widens the weights inside the kernel. For one or a few sequences
  (interactive serving), where a step reads every weight once per token and memory is the
  bound: on 2 cores it ran a batch-1 matmul chain ~2x faster than fp32 or bf16, but a batch of
  32 ~3x slower than bf16;
- "auto": "exact" off CPU (the engine dtype is bf16 on CUDA already) and for small models
  (below `AUTO_MIN_PARAMETERS` matmul weights a CPU step is Python- and attention-bound:
  narrower weights bought nothing there). Otherwise by what the CPU has, so the choice is the
  same on every run on one machine (a resumed run samples as the first one did): bf16 where
  the CPU has AMX tiles (bf16 matmuls there ran as fast as int8 ones and bf16 is much the
  closer to the fp32 masters: mean |logprob error| 0.020 against 0.109 for W8A8 on SmolLM2-135M),
  else int8 where torch's int8 matmul runs (an AVX-512 CPU without AMX ran W8A8 ~4x faster
  than bf16), else bf16 where the CPU has native bf16, else exact. docs/LOG.md has the figures.

A mode this CPU cannot run (no int8 matmul kernel; for "bf16", no bf16 instructions) falls
back to "exact" with one warning naming why. Quality against fp32 and speed per mode are in docs/LOG.md and docs/benchmarks.md.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch

WEIGHT_MODES = ("auto", "exact", "bf16", "int8", "int8-weight-only")
AUTO_MIN_PARAMETERS = 20_000_000
SMOOTH_ALPHA = 0.5


def check_mode(mode: str) -> str:
    if mode not in WEIGHT_MODES:
        raise ValueError(f"paged engine: weights must be one of {', '.join(WEIGHT_MODES)}, got {mode!r}")
    return mode


def int8_kernel_error(mode: str = "int8") -> str | None:
    """Why `mode`'s int8 kernel cannot run here (None: it can), from a small CPU problem:
    torch._int_mm (W8A8) or torch._weight_int8pack_mm (weight-only)."""
    name = "torch._int_mm" if mode == "int8" else "torch._weight_int8pack_mm"
    try:
        if mode == "int8":
            out = torch._int_mm(torch.ones(3, 16, dtype=torch.int8), torch.ones(8, 16, dtype=torch.int8).t())
        else:
            out = torch._weight_int8pack_mm(torch.ones(3, 16, dtype=torch.bfloat16), torch.ones(8, 16, dtype=torch.int8),
                                            torch.ones(8, dtype=torch.bfloat16))
        if float(out[0, 0]) != 16:
            return f"{name} returned {float(out[0, 0])} for a known product (16)"
    except (RuntimeError, AttributeError, NotImplementedError) as e:
        return f"{name} is unavailable: {str(e).splitlines()[0]}"
    return None


def resolve_mode(mode: str, device: torch.device, num_parameters: int) -> str:
    """The concrete mode for "auto" (see the module docstring); a concrete mode this machine
    cannot run becomes "exact" with one warning."""
    check_mode(mode)
    if mode.startswith("int8"):
        why = "int8 weights run on CPU only" if device.type != "cpu" else int8_kernel_error(mode)
        if why is not None:
            warnings.warn(f"paged engine: weights={mode!r} falls back to exact weights: {why}", stacklevel=3)
            return "exact"
        return mode
    if mode == "bf16" and device.type == "cpu" and not native_bf16():
        warnings.warn("paged engine: weights='bf16' falls back to exact weights: this CPU has no bf16 instructions "
                      "(AVX512-BF16 or AMX); torch would emulate bf16, slower than fp32", stacklevel=3)
        return "exact"
    if mode != "auto":
        return mode
    if device.type != "cpu" or num_parameters < AUTO_MIN_PARAMETERS:
        return "exact"
    if _cpu_has("_is_amx_tile_supported"):
        return "bf16"
    if int8_kernel_error() is None:
        return "int8"
    return "bf16" if native_bf16() else "exact"


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX)."""
    return _cpu_has("_is_avx512_bf16_supported") or _cpu_has("_is_amx_tile_supported")


def _cpu_has(probe: str) -> bool:
    fn = getattr(torch.cpu, probe, None)
    return bool(fn()) if fn is not None else False


class Int8Linear:
    """y = x W^T + b with int8 W (per output channel) and int8 x (per row), optional smoothing."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, smooth: torch.Tensor | None):
        w = weight.float() * smooth[None, :] if smooth is not None else weight.float()
        self.scale = (w.abs().amax(dim=1).clamp_min(1e-8) / 127.0)[None, :]  # [1, out]
        self.weight_t = (w / self.scale.t()).round_().to(torch.int8).t()  # [in, out] view of [out, in]
        self.bias = bias.float() if bias is not None else None
        self.inv_smooth = (1.0 / smooth)[None, :] if smooth is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        dtype, shape = x.dtype, x.shape
        x = x.reshape(-1, shape[-1]).float()
        if self.inv_smooth is not None:
            x = x * self.inv_smooth
        row = x.abs().amax(dim=1, keepdim=True).clamp_min_(1e-8).div_(127.0)
        q = (x / row).round_().to(torch.int8)
        y = torch._int_mm(q, self.weight_t).float().mul_(row).mul_(self.scale)
        if self.bias is not None:
            y += self.bias
        return y.to(dtype).view(*shape[:-1], -1)


class Int8WeightOnly:
    """y = x W^T + b with int8 W (per output channel) and bf16 x: `torch._weight_int8pack_mm`
    widens the weights inside the kernel, so a token reads 1 byte per weight instead of 4."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, smooth: None = None):
        w = weight.float()
        scale = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0
        self.weight = (w / scale[:, None]).round_().to(torch.int8).contiguous()  # [out, in]
        self.scale = scale.to(torch.bfloat16)
        self.bias = bias.to(torch.bfloat16) if bias is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        dtype, shape = x.dtype, x.shape
        y = torch._weight_int8pack_mm(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight, self.scale)
        if self.bias is not None:
            y += self.bias
        return y.to(dtype).view(*shape[:-1], -1)


class Quantized:
    """The int8 compute copies of a PagedModel's linear layers, rebuilt from its weights on
    demand: W8A8 (`Int8Linear`, smoothed with the calibration's activation maxima) or
    weight-only (`Int8WeightOnly`, no calibration)."""

    def __init__(self, model, mode: str, act_absmax: dict[tuple[int, str], torch.Tensor] | None = None,
                 alpha: float = SMOOTH_ALPHA):
        self.model, self.kind = model, Int8Linear if mode == "int8" else Int8WeightOnly
        self.smooth: dict[tuple[int, str], torch.Tensor | None] = {}
        for key, weight, _ in self.model.linears():
            if act_absmax is None:
                self.smooth[key] = None
                continue
            x = act_absmax[key].float().clamp_min(1e-5)
            w = weight.float().abs().amax(dim=0).clamp_min(1e-5)
            self.smooth[key] = (x.pow(alpha) / w.pow(1 - alpha)).clamp_min(1e-5)
        self.layers: dict[tuple[int, str], Int8Linear | Int8WeightOnly] = {}
        self.rebuild()

    @torch.no_grad()
    def rebuild(self) -> None:
        """Re-quantize every layer from the model's current (master) weights; smoothing stays fixed."""
        self.layers = {key: self.kind(w, b, self.smooth[key]) for key, w, b in self.model.linears()}

    def linear(self, x: torch.Tensor, key: tuple[int, str]) -> torch.Tensor:
        return self.layers[key](x)


def calibrate(model, run_prefill: Callable[[list[list[int]]], None], *, seqs: int = 4, length: int = 64,
              seed: int = 0) -> dict[tuple[int, str], torch.Tensor]:
    """Per input channel, the largest |activation| each linear layer sees while `run_prefill`
    feeds `seqs` random prompts of `length` token ids (seeded: the same scales every load)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, model.spec.vocab_size, (seqs, length), generator=g).tolist()
    seen: dict[tuple[int, str], torch.Tensor] = {}

    def observe(key: tuple[int, str], x: torch.Tensor) -> None:
        m = x.detach().float().abs().amax(dim=0)
        seen[key] = torch.maximum(seen[key], m) if key in seen else m

    model.observer = observe
    try:
        run_prefill(prompts)
    finally:
        model.observer = None
    return seen
