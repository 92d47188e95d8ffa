"""Fixtures the engine tests share: a "sharp" tiny model (weights x10, so greedy choices are
clear-cut and sampling is far from uniform) and the standard prompts as token ids."""

from __future__ import annotations

import pytest
import torch

PROMPT_TEXTS = ["Calculate 1 + 2.", "Calculate 345 + 678 and then some more words.", "x", "We add 12 and"]


@pytest.fixture(scope="module")
def sharp_model(tiny_model_dir):
    """Callers that hand it to an engine owning its model (HFEngine) pass a deepcopy."""
    from posttrain.core.hf import load_model

    model = load_model(tiny_model_dir, "float32", torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10.0)
    return model.eval()


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer(t, add_special_tokens=False)["input_ids"] for t in PROMPT_TEXTS]
