"""The rollout engine's constructor options from the `rollout` config section.

    options = engine_options(cfg.rollout, dtype=cfg.model.dtype, device=device)
    engine = ENGINES[cfg.rollout.engine](cfg.model.path, tokenizer, **options)
"""

from __future__ import annotations

from typing import Any


def engine_options(rollout: Any, *, dtype: str, device: Any) -> dict:
    """The model's dtype and device, the batch limit under each engine's own name, then
    `rollout.engine_options` (which win). Engines other than hf and paged get only the latter."""
    r = rollout
    base: dict = {"dtype": dtype, "device": device}
    if r.engine == "hf":
        base["max_batch_sequences"] = r.max_batch_sequences
    elif r.engine == "paged":
        base["max_num_seqs"] = r.max_batch_sequences
        base["weights"] = r.weights
    else:
        base = {}
    return {**base, **r.engine_options}
