"""Weights leaving the trainer: the engine state dict (plain and LoRA-merged, the LoRA policy left
exactly as it was) and the model-directory fingerprint that guards the reference model on resume."""

from __future__ import annotations

import copy
import os
import shutil

import pytest
import torch

from posttrain.config.common import LoraConfig
from posttrain.train.lora import apply_lora, is_lora, merge_lora
from posttrain.core.hf import load_model
from posttrain.train.weights import engine_state_dict, model_identity

CPU = torch.device("cpu")
IDS = torch.tensor([[1, 5, 9, 13, 2, 40, 7]])


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


def test_plain_model_state_dict(tiny_model_dir):
    model = load_model(tiny_model_dir, dtype="float32", device=CPU)
    sd = engine_state_dict(model)
    ref = model.state_dict()
    assert list(sd) == list(ref)
    assert all(torch.equal(sd[k], ref[k]) and not sd[k].requires_grad for k in ref)


def lora_model(tiny_model_dir, dtype: str):
    model = apply_lora(load_model(tiny_model_dir, dtype=dtype, device=CPU), LoraConfig(r=4, alpha=8))
    with torch.no_grad():  # trained adapters: non-zero B, so merging changes the weights
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


def test_lora_state_dict_is_the_merged_model(tiny_model_dir):
    model = lora_model(tiny_model_dir, "float32")
    out_before = logits(model)
    sd = engine_state_dict(model)
    merged = merge_lora(copy.deepcopy(model))
    msd = merged.state_dict()
    assert set(sd) == set(msd) == set(load_model(tiny_model_dir, dtype="float32", device=CPU).state_dict())
    assert all(torch.equal(sd[k], msd[k]) for k in msd)
    q = "model.layers.0.self_attn.q_proj.weight"
    plain = load_model(tiny_model_dir, dtype="float32", device=CPU)
    assert (sd[q] - plain.state_dict()[q]).abs().max() > 1e-3  # the adapters really are folded in
    # an engine that loads it computes what the LoRA policy computes
    plain.load_state_dict(sd, strict=True)
    assert torch.allclose(logits(plain), out_before, atol=1e-5)
    # and the policy stays a LoRA model with unmerged adapters and the same outputs
    assert is_lora(model)
    assert not any(getattr(m, "merged", False) for m in model.modules())
    assert torch.equal(logits(model), out_before)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lora_policy_weights_are_bit_exact_after_many_syncs(tiny_model_dir, dtype):
    # one sync per RL step: merge + unmerge round off the frozen base weights a little each time
    # (bf16: ~5e-3 after 20 syncs, measured), so the policy must come back exactly as it was
    model = lora_model(tiny_model_dir, dtype)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(20):
        engine_state_dict(model)
    after = model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == []


# ---------------------------------------------------------------- model identity


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    return str(shutil.copytree(tiny_model_dir, tmp_path / "m"))


def flip_byte(path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_identity_is_stable_and_tracks_weights_and_config(model_copy, tmp_path):
    ident = model_identity(model_copy)
    assert ident.startswith("m:") and model_identity(model_copy) == ident
    assert model_identity(str(shutil.copytree(model_copy, tmp_path / "other" / "m"))) == ident  # content, not place
    # files other than the config and the weights do not count
    with open(os.path.join(model_copy, "tokenizer_config.json"), "a") as f:
        f.write(" ")
    assert model_identity(model_copy) == ident
    weights = os.path.join(model_copy, "model.safetensors")
    flip_byte(weights, os.path.getsize(weights) // 2)  # same size, one byte differs
    changed = model_identity(model_copy)
    assert changed != ident
    flip_byte(weights, os.path.getsize(weights) // 2)
    assert model_identity(model_copy) == ident
    with open(os.path.join(model_copy, "config.json"), "a") as f:
        f.write("\n")
    assert model_identity(model_copy) != ident


@pytest.mark.parametrize("size_mib, offset_mib", [(1.5, 1.25), (1.5, 0.1), (5.0, 4.5), (5.0, 0.5)])
def test_identity_reads_the_first_and_last_mib(tmp_path, size_mib, offset_mib):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    weights = d / "model-00001-of-00001.safetensors"
    weights.write_bytes(os.urandom(int(size_mib * (1 << 20))))
    ident = model_identity(str(d))
    flip_byte(weights, int(offset_mib * (1 << 20)))
    assert model_identity(str(d)) != ident


def test_identity_of_a_hub_name():
    assert model_identity("Qwen/Qwen2.5-0.5B") == "name:Qwen/Qwen2.5-0.5B"
