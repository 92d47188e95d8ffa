"""Turn a GGUF file into a standard HF model directory that every stage loads with plain
`from_pretrained`:

    info = inspect_gguf("m.gguf")              # header only: architecture, tensor types, chat template
    done = convert_gguf("m.gguf", "models/m")  # -> models/m: config.json, model.safetensors (fp32),
                                               #    tokenizer.json, chat_template.jinja,
                                               #    generation_config.json, posttrain_source.json

Transformers' own GGUF loader does the work (`from_pretrained(dir, gguf_file=name)`, with the
`gguf` and `accelerate` packages): it rebuilds the config and tokenizer from the metadata and
dequantizes every tensor. We check the file first, so bad input is one line naming the file
(`ModelLoadError`), never a traceback: missing, not a GGUF file, corrupt or truncated (the header
is read with `gguf.GGUFReader` and every tensor must lie inside the file), an architecture
transformers cannot load (the supported ones are listed), a tensor type it cannot dequantize.
A file without a chat template converts with a warning: SFT, RL and chat eval refuse such a
tokenizer later, each with its own one-line error.

Nothing half-written is left behind: the directory is built beside `out` under a hidden name and
renamed into place only when complete; an existing non-empty `out` is replaced only with `force`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from posttrain.core.errors import ModelLoadError

SOURCE_NOTE = "posttrain_source.json"
FLOAT_TYPES = ("F32", "F16", "BF16")


@dataclass(frozen=True)
class GgufInfo:
    """What a GGUF header says, read without touching the tensor data."""

    path: Path
    architecture: str
    name: str | None
    tensor_types: dict[str, int]  # ggml type name -> number of tensors stored in it
    chat_template: str | None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    eot_token_id: int | None = None  # end of turn, where the file names one apart from eos


@dataclass(frozen=True)
class Converted:
    out: Path
    info: GgufInfo
    parameters: int
    warnings: tuple[str, ...] = field(default=())


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# ---------------------------------------------------------------- what transformers can load


def supported_architectures() -> list[str]:
    """GGUF `general.architecture` values this transformers can load."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    names = set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}  # sections, not architectures
    try:  # newer transformers rebuild some architectures through a second, faster path
        from transformers.integrations.gguf import GGUF_CONFIG_ARCHS

        names |= set(GGUF_CONFIG_ARCHS)
    except ImportError:
        pass
    return sorted(names)


def _transformers_name(architecture: str) -> str:
    """llama.cpp's spelling -> the one transformers keys its tables by (qwen2moe -> qwen2_moe)."""
    name = architecture.replace("-", "_")
    name = re.sub(r"(?<=[a-z0-9])moe$", "_moe", name)
    return "t5" if name == "t5encoder" else name


def _fast_path(architecture: str) -> bool:
    try:
        from transformers.integrations.gguf import is_gguf_arch_supported
    except ImportError:
        return False
    return is_gguf_arch_supported(architecture)


def supported_tensor_types(architecture: str) -> list[str]:
    """The ggml tensor types transformers can dequantize for files of `architecture`."""
    if _fast_path(architecture):
        from transformers.integrations.gguf.dequant import GGML_NAME

        return sorted(set(FLOAT_TYPES) | set(GGML_NAME.values()))
    return sorted(_gguf_dequantizable())


def _gguf_dequantizable() -> set[str]:
    """Types the `gguf` package dequantizes (the loader most architectures go through): probe each
    with one block of zeros, since the package says so only by raising NotImplementedError."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    names = set()
    for qtype in GGMLQuantizationType:
        _, type_size = GGML_QUANT_SIZES[qtype]
        try:
            dequantize(np.zeros((1, type_size), dtype=np.uint8), qtype)
        except Exception:
            continue
        names.add(qtype.name)
    return names


# ---------------------------------------------------------------- reading the header


def _field(reader, key: str) -> Any:
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def inspect_gguf(path: str | os.PathLike) -> GgufInfo:
    """Read and check a GGUF header; every problem is a one-line ModelLoadError naming the file."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: file not found")
    if not p.is_file():
        raise ModelLoadError(f"{p}: not a file (expected a .gguf file)")
    size = p.stat().st_size
    with open(p, "rb") as f:
        magic = f.read(4)
    if size == 0:
        raise ModelLoadError(f"{p}: empty file, not a GGUF file")
    if magic != b"GGUF":
        raise ModelLoadError(f"{p}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(p))
        for t in reader.tensors:
            if t.data_offset + t.n_bytes > size:
                raise ValueError(f"tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, the file has {size}")
    except Exception as e:
        raise ModelLoadError(f"{p}: corrupt or truncated GGUF file ({_first_line(e)})") from None

    architecture = _field(reader, "general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise ModelLoadError(f"{p}: corrupt GGUF file (no general.architecture in its metadata)")
    supported = supported_architectures()
    if architecture not in supported and _transformers_name(architecture) not in supported:
        import transformers

        raise ModelLoadError(
            f"{p}: architecture {architecture!r} cannot be loaded by transformers {transformers.__version__}; "
            f"supported GGUF architectures: {', '.join(supported)}"
        )

    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    ok = supported_tensor_types(architecture)
    bad = sorted(set(types) - set(ok))
    if bad:
        counts = ", ".join(f"{name} ({types[name]} tensors)" for name in bad)
        raise ModelLoadError(f"{p}: tensor type {counts} cannot be dequantized by transformers; "
                             f"supported: {', '.join(ok)}")

    def token_id(key: str) -> int | None:
        value = _field(reader, f"tokenizer.ggml.{key}")
        return int(value) if value is not None else None

    template = _field(reader, "tokenizer.chat_template")
    return GgufInfo(
        path=p, architecture=architecture, name=_field(reader, "general.name"), tensor_types=types,
        chat_template=template if isinstance(template, str) and template.strip() else None,
        bos_token_id=token_id("bos_token_id"), eos_token_id=token_id("eos_token_id"),
        pad_token_id=token_id("padding_token_id"), eot_token_id=token_id("eot_token_id"),
    )


# ---------------------------------------------------------------- converting


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def _no_gguf_bars() -> Iterator[None]:
    """The legacy loader draws its own tqdm bar per file; our CLI already says what runs."""
    try:
        import transformers.modeling_gguf_pytorch_utils as legacy
    except ImportError:
        yield
        return
    saved = getattr(legacy, "tqdm", None)
    legacy.tqdm = lambda iterable, *a, **k: iterable
    try:
        yield
    finally:
        legacy.tqdm = saved


def load_gguf(info: GgufInfo):
    """(model in fp32, tokenizer) through transformers' GGUF loader, every tensor dequantized."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.core.hf import quiet_hf_progress

    kwargs: dict[str, Any] = {"gguf_file": info.path.name, "local_files_only": True}
    model_kwargs: dict[str, Any] = {"dtype": torch.float32}
    try:  # newer transformers may keep weights packed; we want plain fp32 tensors
        from transformers import GgufConfig

        model_kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    where = str(info.path.resolve().parent)
    try:
        with quiet_hf_progress(), _no_gguf_bars():
            model = AutoModelForCausalLM.from_pretrained(where, **kwargs, **model_kwargs)
            tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as e:
        raise ModelLoadError(f"{info.path}: transformers cannot load it as a causal LM "
                             f"(architecture {info.architecture!r}: {_first_line(e)})") from None
    _drop_quantization(model)
    return model.eval(), tokenizer


def _drop_quantization(model) -> None:
    """The weights are plain fp32 now; without this, save_pretrained refuses (a GGUF
    'quantizer' is not serializable) and config.json would claim a quantization."""
    model.hf_quantizer = None
    for attr in ("is_quantized", "quantization_method"):
        if attr in vars(model):
            delattr(model, attr)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _set_special_ids(model, tokenizer, info: GgufInfo) -> None:
    """bos/eos/pad from the file, not the config class's defaults (LlamaConfig says bos=1)."""
    from transformers import GenerationConfig

    eos = [i for i in (info.eos_token_id, info.eot_token_id) if i is not None]
    eos = list(dict.fromkeys(eos))
    for key, value in (("bos_token_id", info.bos_token_id), ("eos_token_id", info.eos_token_id),
                       ("pad_token_id", info.pad_token_id)):
        setattr(model.config, key, value)
    model.generation_config = GenerationConfig(
        bos_token_id=info.bos_token_id, pad_token_id=info.pad_token_id,
        eos_token_id=(eos[0] if len(eos) == 1 else eos) if eos else None,
    )
    if info.chat_template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = info.chat_template


def _note(info: GgufInfo, digest: str, source: dict | None) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import torch
    import transformers

    try:
        gguf_version = version("gguf")
    except PackageNotFoundError:
        gguf_version = None
    return {
        "source_file": str(info.path.resolve()),
        "sha256": digest,
        "size_bytes": info.path.stat().st_size,
        "package": source,
        "gguf_name": info.name,
        "architecture": info.architecture,
        "tensor_types": info.tensor_types,
        "dtype": "float32",
        "converted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "transformers_version": transformers.__version__,
        "gguf_version": gguf_version,
        "torch_version": torch.__version__,
    }


def check_out_dir(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ModelLoadError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ModelLoadError(f"{out}: already exists and is not empty (pass --force to replace it)")


def convert_gguf(path: str | os.PathLike, out: str | os.PathLike, *, force: bool = False,
                 source: dict | None = None) -> Converted:
    """Convert a GGUF file into an HF directory at `out` (see the module docstring).
    `source` (the package it came from, for `posttrain models get`) goes into the source note."""
    from posttrain.core.fsio import replace_dir

    info = inspect_gguf(path)
    out = Path(out)
    check_out_dir(out, force)
    digest = sha256_of(info.path)
    model, tokenizer = load_gguf(info)
    _set_special_ids(model, tokenizer, info)
    warnings = []
    if not getattr(tokenizer, "chat_template", None):
        warnings.append(f"{info.path}: no chat template in the file (tokenizer.chat_template); SFT, RL and "
                        f"chat eval need one: add {out / 'chat_template.jinja'} before using them")

    from posttrain.core.hf import quiet_hf_progress

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        with quiet_hf_progress():
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_NOTE).write_text(json.dumps(_note(info, digest, source), indent=2) + "\n")
        replace_dir(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelLoadError(f"{out}: cannot write the converted model ({_first_line(e)})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    parameters = sum(p.numel() for p in model.parameters())
    return Converted(out=out, info=info, parameters=parameters, warnings=tuple(warnings))
