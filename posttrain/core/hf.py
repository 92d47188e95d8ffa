"""Load any HF causal LM and its tokenizer (with its chat template) by path, and a saved reward
model's stats (reward_stats.json, what its scorers read).

Every stage goes through here, the embedded tiny base included, so the real
`from_pretrained` path is what runs and what the tests exercise.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
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


# ---------------------------------------------------------------- a saved reward model's stats
# train/reward_model.py writes them beside the model; the reward_model verifier reads them.

STATS_FILE = "reward_stats.json"
STATS_VERSION = 1


@dataclass(frozen=True)
class RewardStats:
    """Rewards over a reference set (e.g. every chosen and rejected sequence of the held-out pairs)."""

    mean: float
    std: float
    n: int


def load_reward_stats(path: str | Path) -> RewardStats:
    """RewardStats from `path` (a reward model directory or the json file itself)."""
    p = Path(path)
    file = p / STATS_FILE if p.is_dir() else p
    if not file.is_file():
        raise ModelLoadError(f"{file}: reward stats file not found")
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{file}: malformed reward stats: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file}: malformed reward stats: expected a JSON object, got {type(data).__name__}")
    if data.get("version") != STATS_VERSION:
        raise ModelLoadError(f"{file}: malformed reward stats: version {data.get('version')!r}, "
                             f"expected {STATS_VERSION}")
    for key in ("mean", "std"):
        x = data.get(key)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ModelLoadError(f"{file}: malformed reward stats: {key!r} must be a finite number, got {x!r}")
    if not data["std"] > 0:
        raise ModelLoadError(f"{file}: malformed reward stats: 'std' must be > 0, got {data['std']}")
    n = data.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ModelLoadError(f"{file}: malformed reward stats: 'n' must be a count >= 0, got {n!r}")
    return RewardStats(mean=float(data["mean"]), std=float(data["std"]), n=n)


def normalised(raw: torch.Tensor | float, stats: RewardStats) -> torch.Tensor | float:
    """sigmoid((raw - mean) / max(std, 1e-6)), in [0, 1]: a tensor for a tensor, else a float."""
    std = max(stats.std, 1e-6)
    if isinstance(raw, torch.Tensor):
        return torch.sigmoid((raw - stats.mean) / std)
    z = (float(raw) - stats.mean) / std
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
