"""Export an HF model directory (a posttrain `final/` model, a checkpoint's `model/`, or any HF
Llama / SmolLM2 / Qwen2 directory) as one GGUF file that llama.cpp and ollama run:

    done = export_gguf("runs/sft/final", "sft-f16.gguf", dtype="f16")
    done.size_bytes, done.tensor_types        # {"F16": 154, "F32": 61}

What goes in:
- metadata: architecture (`llama` for Llama/SmolLM2, `qwen2`), context length, embedding and
  feed-forward sizes, layers, head counts (and head size when it is not hidden/heads), rope base
  (and linear rope scaling), RMS-norm epsilon, vocabulary size, file type;
- the tokenizer and chat template (see gguf_vocab.py);
- every weight under llama.cpp's name. For the llama architecture llama.cpp applies rotary
  embeddings to interleaved pairs while HF rotates the two halves of each head, so the q/k rows
  of every head are reordered (first half, second half -> interleaved); qwen2 uses HF's order.
- dtypes: f32 (as is), f16 (2-D weights; norms and biases stay f32, as llama.cpp keeps them) or
  q8_0 (2-D weights in blocks of 32 with one f16 scale; a matrix whose rows are not a multiple of
  32 long falls back to f16). A tied lm_head is not written: llama.cpp reuses token_embd.

Weights are read one tensor at a time from the safetensors files and written straight out, so
memory holds one tensor, not the model. The file is written beside `out` under a hidden name and
renamed into place when complete; an existing `out` is replaced only with `force`. Bad input
(unsupported architecture or rope scaling, LoRA adapters, no weights, no tokenizer, unknown
dtype) is one ModelLoadError / ConfigError line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from posttrain.core.errors import ConfigError, ModelLoadError, one_line
from posttrain.models.gguf_vocab import read_vocab

DTYPES = ("f32", "f16", "q8_0")
FORMATS = ("gguf",)
# HF model_type -> (llama.cpp architecture, whether q/k rows are reordered for its rope)
ARCHITECTURES = {"llama": ("llama", True), "qwen2": ("qwen2", False)}
TOP_LEVEL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
PER_LAYER = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
_SKIP = re.compile(r".*rotary_emb\.inv_freq$")


@dataclass(frozen=True)
class Exported:
    out: Path
    architecture: str
    dtype: str
    parameters: int
    size_bytes: int
    tensor_types: dict[str, int]  # ggml type name -> tensors stored in it
    warnings: tuple[str, ...] = field(default=())


def gguf_name(hf_name: str) -> str | None:
    """llama.cpp's name for an HF tensor name (None: a buffer nothing reads, e.g. inv_freq)."""
    if _SKIP.match(hf_name):
        return None
    m = _LAYER.fullmatch(hf_name)
    if m and m.group(2) in PER_LAYER:
        return f"blk.{m.group(1)}.{PER_LAYER[m.group(2)]}.{m.group(3)}"
    stem, _, suffix = hf_name.rpartition(".")
    if stem in TOP_LEVEL:
        return f"{TOP_LEVEL[stem]}.{suffix}"
    raise KeyError(hf_name)


def interleave_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder each head's rows from HF's halves layout (x0..x{d/2-1}, y0..) to pairs (x0, y0, x1, y1, ...)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------- reading the model directory


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """The HF directory to export: `path` itself, or a checkpoint's `path/model`."""
    p = Path(path)
    if not p.is_dir():
        raise ModelLoadError(f"{p}: not a directory (give an HF model directory, e.g. runs/sft/final)")
    if not (p / "config.json").is_file() and (p / "model" / "config.json").is_file():
        p = p / "model"
    if (p / "adapter_config.json").is_file():
        raise ModelLoadError(f"{p}: holds LoRA adapters, not a full model; export the merged final model "
                             f"(the run's final/ directory)")
    if not (p / "config.json").is_file():
        raise ModelLoadError(f"{p}: no config.json (not an HF model directory)")
    return p


def _config(model_dir: Path) -> dict:
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{model_dir / 'config.json'}: unreadable ({one_line(e, 160)})") from None
    if cfg.get("model_type") not in ARCHITECTURES:
        raise ModelLoadError(f"{model_dir}: architecture {cfg.get('model_type')!r} cannot be exported to GGUF "
                             f"(supported: {', '.join(ARCHITECTURES)}: Llama, SmolLM2, Qwen2)")
    if cfg.get("mlp_bias"):
        raise ModelLoadError(f"{model_dir}: MLP biases (mlp_bias=true) have no place in llama.cpp's "
                             f"{cfg['model_type']} graph")
    return cfg


def _rope(cfg: dict, model_dir: Path) -> tuple[float, float | None]:
    """(rope theta, linear scaling factor or None); other rope types are refused."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or {}
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    factor = params.get("factor", scaling.get("factor"))
    if kind == "default":
        return float(theta), None
    if kind == "linear" and factor:
        return float(theta), float(factor)
    raise ModelLoadError(f"{model_dir}: rope type {kind!r} is not supported by the GGUF exporter "
                         f"(supported: default, linear)")


def _weight_files(model_dir: Path) -> dict[str, Path]:
    """HF tensor name -> the safetensors file holding it."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: model_dir / f for name, f in weight_map.items()}
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise ModelLoadError(f"{model_dir}: no model.safetensors (or model.safetensors.index.json); save the "
                             f"model with save_pretrained(safe_serialization=True)")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {name: single for name in f.keys()}


def _read(files: dict[str, Path], name: str) -> np.ndarray:
    import torch
    from safetensors import safe_open

    with safe_open(str(files[name]), framework="pt") as f:
        return f.get_tensor(name).to(torch.float32).numpy()


# ---------------------------------------------------------------- planning and writing


@dataclass(frozen=True)
class _Planned:
    hf: str
    name: str
    shape: tuple[int, ...]
    qtype: str  # F32 | F16 | Q8_0
    heads: int | None  # rows reordered for the llama rope with this many heads


def _target_type(shape: tuple[int, ...], dtype: str) -> str:
    if len(shape) < 2 or dtype == "f32":
        return "F32"
    if dtype == "q8_0" and shape[-1] % 32 == 0:
        return "Q8_0"
    return "F16"


def _plan(cfg: dict, files: dict[str, Path], dtype: str, model_dir: Path) -> list[_Planned]:
    from safetensors import safe_open

    _, reorder = ARCHITECTURES[cfg["model_type"]]
    tied = cfg.get("tie_word_embeddings", False)
    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(set(files.values())):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                shapes[name] = tuple(f.get_slice(name).get_shape())
    planned = []
    for hf, shape in shapes.items():
        if hf == "lm_head.weight" and tied:
            continue
        try:
            name = gguf_name(hf)
        except KeyError:
            raise ModelLoadError(f"{model_dir}: tensor {hf!r} has no GGUF counterpart in llama.cpp's "
                                 f"{cfg['model_type']} graph") from None
        if name is None:
            continue
        heads = None
        if reorder and ".attn_q." in name:
            heads = cfg["num_attention_heads"]
        elif reorder and ".attn_k." in name:
            heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
        planned.append(_Planned(hf, name, shape, _target_type(shape, dtype), heads))
    if not any(p.name == "token_embd.weight" for p in planned):
        raise ModelLoadError(f"{model_dir}: no model.embed_tokens.weight among its tensors")
    return planned


def _encode(w: np.ndarray, qtype: str) -> np.ndarray:
    import gguf

    if qtype == "F32":
        return np.ascontiguousarray(w, dtype=np.float32)
    if qtype == "F16":
        return np.ascontiguousarray(w, dtype=np.float16)
    return gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), gguf.GGMLQuantizationType.Q8_0)


def _nbytes(shape: tuple[int, ...], qtype: str) -> tuple[tuple[int, ...], int]:
    """(the shape add_tensor_info takes, bytes) for a tensor of `shape` stored as `qtype`."""
    import gguf

    if qtype == "Q8_0":
        byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, gguf.GGMLQuantizationType.Q8_0)
        return byte_shape, int(np.prod(byte_shape))
    return shape, int(np.prod(shape)) * (4 if qtype == "F32" else 2)


def _metadata(writer, cfg: dict, name: str, dtype: str, model_dir: Path, n_vocab: int) -> None:
    import gguf

    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    theta, linear = _rope(cfg, model_dir)
    writer.add_name(name)
    writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                          "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[dtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(int(cfg.get("max_position_embeddings", 2048)))
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(cfg.get("num_key_value_heads") or heads)
    if head_dim * heads != cfg["hidden_size"]:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(theta)
    if linear is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(linear)
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(n_vocab)


def check_export_args(fmt: str, dtype: str) -> None:
    if fmt not in FORMATS:
        raise ConfigError(f"export: unknown format {fmt!r} (supported: {', '.join(FORMATS)})")
    if dtype not in DTYPES:
        raise ConfigError(f"export: unknown dtype {dtype!r} for gguf (supported: {', '.join(DTYPES)})")


def default_out(model_dir: str | os.PathLike, dtype: str) -> Path:
    """runs/sft/final -> runs/sft/final-f16.gguf (beside the model directory)."""
    p = Path(model_dir).resolve()
    return p.with_name(f"{p.name}-{dtype}.gguf")


def export_gguf(model: str | os.PathLike, out: str | os.PathLike | None = None, *, dtype: str = "f16",
                force: bool = False, name: str | None = None) -> Exported:
    """Write the HF model at `model` as a GGUF file `out` (see the module docstring)."""
    import gguf

    check_export_args("gguf", dtype)
    model_dir = resolve_model_dir(model)
    out = Path(out) if out is not None else default_out(model, dtype)
    if out.exists() and not force:
        raise ModelLoadError(f"{out}: already exists (pass --force to replace it)")
    if out.is_dir():
        raise ModelLoadError(f"{out}: is a directory; give a file name such as model.gguf")
    cfg = _config(model_dir)
    _rope(cfg, model_dir)
    files = _weight_files(model_dir)
    planned = _plan(cfg, files, dtype, model_dir)
    n_vocab = next(p.shape[0] for p in planned if p.name == "token_embd.weight")
    vocab = read_vocab(model_dir, n_vocab)
    warnings = [] if vocab.chat_template else [
        f"{model_dir}: no chat template; the GGUF file runs as a plain completion model"]

    arch, _ = ARCHITECTURES[cfg["model_type"]]
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        writer = gguf.GGUFWriter(str(tmp), arch)
        _metadata(writer, cfg, name or model_dir.resolve().name, dtype, model_dir, n_vocab)
        vocab.write(writer)
        dtypes = {"F32": np.float32, "F16": np.float16, "Q8_0": np.uint8}
        for p in planned:
            shape, nbytes = _nbytes(p.shape, p.qtype)
            raw = gguf.GGMLQuantizationType[p.qtype] if p.qtype == "Q8_0" else None
            writer.add_tensor_info(p.name, shape, np.dtype(dtypes[p.qtype]), nbytes, raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for p in planned:
            w = _read(files, p.hf)
            if p.heads is not None:
                w = interleave_rope_rows(w, p.heads)
            writer.write_tensor_data(_encode(w, p.qtype))
        writer.close()
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ModelLoadError(f"{out}: cannot write the GGUF file ({one_line(e, 160)})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    types: dict[str, int] = {}
    for p in planned:
        types[p.qtype] = types.get(p.qtype, 0) + 1
    return Exported(out=out, architecture=arch, dtype=dtype, parameters=sum(int(np.prod(p.shape)) for p in planned),
                    size_bytes=out.stat().st_size, tensor_types=types, warnings=tuple(warnings))


def gguf_for(model_dir: str | os.PathLike, dtype: str) -> Path:
    """A GGUF file of the HF model at `model_dir` in `dtype`, for serving it through llama.cpp: the file
    `posttrain export` would write beside the directory when it is there and newer than every weight
    file, else exported now (there, or under the temp dir when the directory's parent is not writable)."""
    import tempfile

    model_dir = Path(model_dir)
    weights = [p.stat().st_mtime for p in model_dir.glob("*.safetensors")] or [0.0]
    resolved = model_dir.resolve()
    candidates = [default_out(model_dir, dtype), Path(tempfile.gettempdir()) / "posttrain-gguf" /
                  f"{resolved.name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}-{dtype}.gguf"]
    for out in candidates:
        if out.is_file() and out.stat().st_mtime >= max(weights):
            return out
    out = candidates[0] if os.access(candidates[0].parent, os.W_OK) else candidates[1]
    return export_gguf(model_dir, out, dtype=dtype, force=True).out
