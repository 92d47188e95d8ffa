"""LoRA through peft: only adapters train, merging gives a plain model with the same outputs."""

from __future__ import annotations

import pytest
import torch

from posttrain.config.common import LoraConfig
from posttrain.core.errors import ConfigError
from posttrain.train.lora import apply_lora, is_lora, merge_lora, trainable_parameters
from posttrain.core.hf import load_model


def test_only_adapters_train_and_merge_keeps_outputs(tiny_model_dir):
    model = apply_lora(load_model(tiny_model_dir, device=torch.device("cpu")), LoraConfig(r=4, alpha=8))
    assert is_lora(model)
    trainable, total = trainable_parameters(model)
    assert 0 < trainable < total / 10
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    with torch.no_grad():  # make the adapters non-zero so merging has something to fold in
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        before = model(input_ids=ids, use_cache=False).logits
        plain = merge_lora(model)
        after = plain(input_ids=ids, use_cache=False).logits
    assert not is_lora(plain)
    assert not any("lora_" in n for n, _ in plain.named_parameters())
    assert torch.allclose(before, after, atol=1e-5)


def test_unknown_target_module_is_a_config_error(tiny_model_dir):
    model = load_model(tiny_model_dir, device=torch.device("cpu"))
    with pytest.raises(ConfigError, match="model.lora.target_modules: qkv_proj not found"):
        apply_lora(model, LoraConfig(target_modules=["q_proj", "qkv_proj"]))
