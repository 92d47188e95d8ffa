"""Load any HF causal LM and its tokenizer (with its chat template) by path.

Every stage goes through here, the embedded tiny base included, so the real
`from_pretrained` path is what runs and what the tests exercise.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

from posttrain.core.errors import ConfigError, ModelLoadError


@contextmanager
def quiet_hf_progress():
    """Silence transformers' own tqdm bars ('Loading weights', 'Writing model shards') for one
    call: our progress bars already say what runs, and tqdm's redraws are garbage in logs."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """The torch dtype for a dtype name on `device` (every loader and engine resolves through here):
    'auto' is fp32 on CPU and bf16 on CUDA; a name in `_DTYPES`; a torch dtype is returned as is."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ConfigError(f"dtype must be one of auto, {', '.join(_DTYPES)}; got {dtype!r}")
    return _DTYPES[dtype]


def _check_path(path: str) -> None:
    p = Path(path)
    looks_local = p.is_absolute() or path.startswith(".") or p.exists() or path.count("/") != 1
    if looks_local and not p.is_dir():
        raise ModelLoadError(f"model path {path!r} does not exist or is not a directory")
    if p.is_dir() and not (p / "config.json").is_file():
        raise ModelLoadError(f"model path {path!r} has no config.json (not an HF model directory)")


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    _check_path(path)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load tokenizer from {path!r}: {str(e).splitlines()[0]}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, dtype: str = "auto", device: torch.device | None = None):
    from transformers import AutoModelForCausalLM

    _check_path(path)
    device = device or pick_device()
    try:
        with quiet_hf_progress():
            model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, device))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load model from {path!r}: {str(e).splitlines()[0]}") from None
    return model.to(device)


def load_model_and_tokenizer(path: str, dtype: str = "auto", device: torch.device | None = None):
    return load_model(path, dtype, device), load_tokenizer(path)
