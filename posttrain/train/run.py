"""What every training recipe does at the start and at the end of a run.

    seed_everything(cfg.train.seed)                       # first thing in run()
    final = export_final(model, tokenizer, out_dir, dtype)  # out_dir/final, last thing
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import torch

from posttrain.core.fsio import replace_dir
from posttrain.train.lora import merge_lora
from posttrain.core.hf import quiet_hf_progress


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global RNGs (unseeded rollout requests draw from torch's),
    and pick torch's deterministic kernels: without them the same RL update of SmolLM2-135M on the
    same samples from the same weights gave weights differing by up to 6e-8 in one run of two
    (2 CPU threads; docs/LOG.md 2026-12-03), which broke exact resume. Uninitialised memory is not
    filled (that only matters for reading torch.empty, which we never do), so it costs nothing
    measurable here."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False


def export_final(model, tokenizer, out_dir: Path, dtype: torch.dtype, name: str = "final") -> Path:
    """out_dir/NAME: plain HF model (adapters merged, in place: pass a copy to keep training it) +
    tokenizer, replaced atomically."""
    final = out_dir / name
    tmp = out_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    plain = merge_lora(model).to(dtype)
    with quiet_hf_progress():
        plain.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    replace_dir(tmp, final)
    return final
