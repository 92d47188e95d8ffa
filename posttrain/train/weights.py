"""Weights leaving the trainer: the state dict an engine loads, and a model's identity.

- `engine_state_dict(policy)`: the plain model's parameters and buffers (a LoRA policy gets
  its adapters merged in, computed without touching the trained adapters);
- `model_identity(path)`: a short fingerprint of a model directory (config + weight files'
  sizes and first/last MiB), cheap for large models, so a resumed run can check that its
  reference model is the one it started with.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from posttrain.train.lora import is_lora

_CHUNK = 1 << 20


@torch.no_grad()
def engine_state_dict(policy) -> dict[str, torch.Tensor]:
    if not is_lora(policy):
        return {k: v.detach() for k, v in policy.state_dict().items()}
    base = policy.get_base_model()
    # merge + unmerge rounds the frozen base weights off a little every time (bf16: ~5e-3 after
    # 20 syncs), so the wrapped weights are restored bit for bit afterwards
    saved = {k: v.clone() for k, v in base.state_dict().items() if ".base_layer." in k}
    policy.merge_adapter()
    try:
        out = {}
        for key, value in base.state_dict().items():
            if "lora_" in key:
                continue
            out[key.replace(".base_layer.", ".")] = value.detach().clone()
    finally:
        policy.unmerge_adapter()
        for key, value in base.state_dict().items():
            if key in saved:
                value.copy_(saved[key])
    return out


def model_identity(path: str) -> str:
    p = Path(path)
    if not p.is_dir():  # a hub id: its name is all we can check
        return f"name:{path}"
    h = hashlib.sha256()
    for f in sorted(p.iterdir()):
        if f.name == "config.json" or f.suffix in (".safetensors", ".bin"):
            size = f.stat().st_size
            h.update(f"{f.name}:{size}".encode())
            with f.open("rb") as fh:
                h.update(fh.read(_CHUNK))
                if size > _CHUNK:  # the last MiB, or all the rest of a file under 2 MiB
                    fh.seek(max(_CHUNK, size - _CHUNK))
                    h.update(fh.read(_CHUNK))
    return f"{p.name}:{h.hexdigest()[:16]}"
