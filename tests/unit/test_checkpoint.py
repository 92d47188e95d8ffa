"""Checkpoints: exact resume (plain and LoRA models), atomicity, rotation, full disk (injected and real tmpfs)."""

from __future__ import annotations

import errno
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from posttrain.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from posttrain.config.base import load_config
from posttrain.config.sft import SFTConfig
from posttrain.core.errors import CheckpointError

STEPS_BEFORE, STEPS_AFTER = 3, 3


def _load(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def _setup(model, lr=1e-2):
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2) * math.cos(0.1 * s))
    return opt, sched


def _step(model, opt, sched, vocab: int) -> float:
    """One update on a batch drawn from all three RNGs, so a missed RNG restore changes the losses."""
    seq = random.randint(6, 10)  # python RNG
    ids = torch.randint(0, vocab, (2, seq))  # torch RNG
    keep = torch.from_numpy(np.random.rand(2, seq) > 0.2)  # numpy RNG
    labels = ids.masked_fill(~keep, -100)
    model.train()
    loss = model(input_ids=ids, labels=labels, use_cache=False).loss
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def _seed(s: int) -> None:
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def _scramble(model) -> None:
    """Change weights and RNGs so that only a correct load can make run B equal run A."""
    _seed(999)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)


def _same_weights(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_exact_resume_plain_model(tmp_path, tiny_model_dir, tiny_tokenizer):
    vocab = len(tiny_tokenizer)
    _seed(0)
    model_a = _load(tiny_model_dir)
    opt_a, sched_a = _setup(model_a)
    for _ in range(STEPS_BEFORE):
        _step(model_a, opt_a, sched_a, vocab)
    path = save_checkpoint(tmp_path, STEPS_BEFORE, model=model_a, tokenizer=tiny_tokenizer, optimizer=opt_a,
                           scheduler=sched_a, state={"cursor": 42}, config={"train": {"lr": 0.01}})
    losses_a = [_step(model_a, opt_a, sched_a, vocab) for _ in range(STEPS_AFTER)]

    model_b = _load(tiny_model_dir)
    opt_b, sched_b = _setup(model_b)
    _step(model_b, opt_b, sched_b, vocab)  # a different optimizer/scheduler history
    _scramble(model_b)
    assert latest_checkpoint(tmp_path) == path
    state = load_checkpoint(path, model=model_b, optimizer=opt_b, scheduler=sched_b)
    assert state == {"cursor": 42, "step": STEPS_BEFORE}
    assert model_b.lm_head.weight.data_ptr() == model_b.model.embed_tokens.weight.data_ptr()  # still tied
    assert sched_b.last_epoch == STEPS_BEFORE
    losses_b = [_step(model_b, opt_b, sched_b, vocab) for _ in range(STEPS_AFTER)]
    assert losses_a == losses_b
    _same_weights(model_a, model_b)
    # the model folder is a standard HF model directory (weights + tokenizer) that from_pretrained loads
    from posttrain.core.hf import load_model_and_tokenizer

    reloaded, tok = load_model_and_tokenizer(str(path / "model"), device=torch.device("cpu"))
    assert tok.eos_token == tiny_tokenizer.eos_token
    assert torch.equal(reloaded.model.embed_tokens.weight, _checkpoint_weights(path)["model.embed_tokens.weight"])


def _checkpoint_weights(path):
    return load_file(str(path / "model" / "model.safetensors"))


def test_exact_resume_lora_model(tmp_path, tiny_model_dir, tiny_tokenizer):
    from peft import LoraConfig, get_peft_model

    def lora(seed):
        torch.manual_seed(seed)
        cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.1)
        return get_peft_model(_load(tiny_model_dir), cfg)

    vocab = len(tiny_tokenizer)
    model_a = lora(0)
    opt_a, sched_a = _setup(model_a)
    _seed(1)
    for _ in range(STEPS_BEFORE):
        _step(model_a, opt_a, sched_a, vocab)
    path = save_checkpoint(tmp_path, STEPS_BEFORE, model=model_a, optimizer=opt_a, scheduler=sched_a)
    assert (path / "model" / "adapter_model.safetensors").is_file()
    assert not (path / "model" / "model.safetensors").exists()  # adapters only
    losses_a = [_step(model_a, opt_a, sched_a, vocab) for _ in range(STEPS_AFTER)]

    model_b = lora(5)  # different LoRA A init
    opt_b, sched_b = _setup(model_b)
    _seed(7)
    load_checkpoint(path, model=model_b, optimizer=opt_b, scheduler=sched_b)
    losses_b = [_step(model_b, opt_b, sched_b, vocab) for _ in range(STEPS_AFTER)]
    assert losses_a == losses_b  # dropout inside LoRA draws from the restored torch RNG
    _same_weights(model_a, model_b)

    with pytest.raises(CheckpointError, match="LoRA adapters: load it into a peft model"):
        load_checkpoint(path, model=_load(tiny_model_dir))
    other = get_peft_model(_load(tiny_model_dir), LoraConfig(r=4, target_modules=["q_proj"]))
    with pytest.raises(CheckpointError, match="does not match the model"):
        load_checkpoint(path, model=other)


def test_mismatched_model_is_a_clear_error(tmp_path, tiny_model_dir, tiny_llama_dir):
    model = _load(tiny_model_dir)
    path = save_checkpoint(tmp_path, 1, model=model)
    with pytest.raises(CheckpointError, match="does not match the model"):
        load_checkpoint(path, model=_load(tiny_llama_dir))  # qwen2 has q/k/v biases, llama does not
    # strictness survives the tied-weights allowance: a really missing tensor is reported
    weights = _checkpoint_weights(path)
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, str(path / "model" / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"1 missing keys \['model.layers.1.mlp.up_proj.weight'\]"):
        load_checkpoint(path, model=model)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope", model=model)
    from peft import LoraConfig, get_peft_model

    with pytest.raises(CheckpointError, match="holds a full model, not LoRA adapters"):
        load_checkpoint(path, model=get_peft_model(_load(tiny_model_dir), LoraConfig(r=2, target_modules=["q_proj"])))
    opt_path = save_checkpoint(tmp_path, 3, model=model, optimizer=torch.optim.AdamW(model.parameters()))
    two_groups = torch.optim.AdamW([{"params": [model.lm_head.weight]}, {"params": list(model.model.norm.parameters())}])
    with pytest.raises(CheckpointError, match="saved optimizer state does not fit this optimizer"):
        load_checkpoint(opt_path, model=model, optimizer=two_groups)
    with pytest.raises(CheckpointError, match="saved without one"):
        load_checkpoint(save_checkpoint(tmp_path, 2, model=model), model=model,
                        optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def test_bfloat16_weights_round_trip_exactly(tmp_path, tiny_model_dir):
    model = _load(tiny_model_dir).to(torch.bfloat16)
    with torch.no_grad():
        model.model.norm.weight.add_(0.0123)  # not representable in fp32-rounded-from-file shortcuts
    path = save_checkpoint(tmp_path, 1, model=model)
    other = _load(tiny_model_dir).to(torch.bfloat16)
    load_checkpoint(path, model=other)
    _same_weights(model, other)


def test_rng_state_round_trip(tmp_path, tiny_model_dir):
    model = _load(tiny_model_dir)
    _seed(3)
    path = save_checkpoint(tmp_path, 0, model=model)
    expected = (random.random(), np.random.rand(), np.random.randn(), torch.rand(3))
    _seed(4)
    load_checkpoint(path, model=model)
    got = (random.random(), np.random.rand(), np.random.randn(), torch.rand(3))
    assert got[:3] == expected[:3] and torch.equal(got[3], expected[3])
    _seed(4)
    load_checkpoint(path, model=model, restore_rng=False)
    assert random.random() != expected[0]


def test_contents_config_and_state(tmp_path, tiny_model_dir):
    model = _load(tiny_model_dir)
    cfg = load_config(SFTConfig, None, ["optim.lr=1e-4", "train.keep_last=3"])
    calls = []
    path = save_checkpoint(tmp_path, 12, model=model, config=cfg, state={"cursor": [1, 2], "epoch": 0},
                           extra={"buffer": lambda d: (calls.append(d), (d / "b.bin").write_bytes(b"xyz"))})
    assert path.name == "step-00000012"
    assert sorted(p.name for p in path.iterdir()) == [
        "buffer", "config.yaml", "meta.json", "model", "rng.pt", "state.json"]
    assert (path / "buffer" / "b.bin").read_bytes() == b"xyz" and calls[0].name == "buffer"
    assert load_config(SFTConfig, path / "config.yaml") == cfg
    assert json.loads((path / "state.json").read_text()) == {"cursor": [1, 2], "epoch": 0, "step": 12}
    with pytest.raises(CheckpointError, match="not JSON-serializable"):
        save_checkpoint(tmp_path, 13, model=model, state={"t": torch.zeros(1)})
    with pytest.raises(CheckpointError, match="has step=5 but is saved as step 13"):
        save_checkpoint(tmp_path, 13, model=model, state={"step": 5})
    with pytest.raises(CheckpointError, match="extra checkpoint entry 'model'"):
        save_checkpoint(tmp_path, 13, model=model, extra={"model": lambda d: None})
    assert [s for s, _ in list_checkpoints(tmp_path)] == [12]
    assert os.listdir(tmp_path / "checkpoints") == ["step-00000012"]


def test_rotation_and_partial_dirs(tmp_path, tiny_model_dir):
    model = _load(tiny_model_dir)
    root = tmp_path / "checkpoints"
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, model=model, keep_last=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [20, 30]
    # a renamed dir without state.json, a temp dir and a stray file are not checkpoints
    (root / "step-00000099").mkdir()
    (root / ".tmp-step-00000100-otherhost-1").mkdir()
    (root / "step-00000200").write_text("not a dir")
    assert latest_checkpoint(tmp_path) == root / "step-00000030"
    assert latest_checkpoint(tmp_path / "nothing-here") is None
    # re-saving an existing step replaces it; keep_last=1 keeps only the new one
    save_checkpoint(tmp_path, 30, model=model, state={"v": 2}, keep_last=1)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [30]
    assert json.loads((root / "step-00000030" / "state.json").read_text())["v"] == 2
    # stale temp dirs of dead processes on this host are cleaned; live ones and other hosts' stay
    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = root / f".tmp-step-00000040-{host}-{dead.pid}"
    live = root / f".tmp-step-00000040-{host}-{os.getppid()}"
    stale.mkdir()
    live.mkdir()
    save_checkpoint(tmp_path, 40, model=model)
    assert not stale.exists() and live.exists() and (root / ".tmp-step-00000100-otherhost-1").exists()


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["model", "optimizer", "extra", "state"])
def test_injected_enospc_leaves_previous_checkpoint_intact(tmp_path, tiny_model_dir, monkeypatch, where):
    model = _load(tiny_model_dir)
    opt, _ = _setup(model)
    first = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, state={"a": 1})
    before = {p.relative_to(first): p.read_bytes() for p in first.rglob("*") if p.is_file()}
    extra = None
    if where == "model":  # mid-way through the safetensors file, after some bytes hit the disk
        def save_pretrained(self, d, **k):
            os.makedirs(d)
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(b"x" * 100)
            _enospc()
        monkeypatch.setattr(type(model), "save_pretrained", save_pretrained)
    elif where == "optimizer":
        def partial_save(obj, f, *a, **k):
            f.write(b"partial")
            _enospc()
        monkeypatch.setattr(torch, "save", partial_save)
    elif where == "extra":
        extra = {"buffer": lambda d: ((d / "part").write_bytes(b"1" * 10), _enospc())}
    else:
        real_write = Path.write_text
        monkeypatch.setattr(Path, "write_text", lambda f, t, *a, **k: _enospc() if f.name == "state.json" else real_write(f, t, *a, **k))
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(tmp_path, 2, model=model, optimizer=opt, extra=extra, keep_last=1)
    root = tmp_path / "checkpoints"
    assert str(info.value) == f"no space left on device while writing checkpoint step 2 to {root}"
    assert os.listdir(root) == ["step-00000001"]
    assert latest_checkpoint(tmp_path) == first
    assert {p.relative_to(first): p.read_bytes() for p in first.rglob("*") if p.is_file()} == before


def test_other_failures_are_checkpoint_errors(tmp_path, tiny_model_dir):
    model = _load(tiny_model_dir)
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint step 3 to .*: RuntimeError: boom"):
        save_checkpoint(tmp_path, 3, model=model, extra={"x": lambda d: (_ for _ in ()).throw(RuntimeError("boom"))})
    assert os.listdir(tmp_path / "checkpoints") == []


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size_kb) -> a fresh tmpfs of that size; unmounted in teardown."""
    mounted = []

    def mount(size_kb: int):
        mnt = tmp_path / f"tmpfs{len(mounted)}"
        mnt.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs to fill up (needs root/CAP_SYS_ADMIN): {r.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", str(mnt)], check=False)


# Sizes for the tiny fixture model: weights ~330 KB, AdamW state ~660 KB.
# "weights": checkpoint 1 (weights) fits, checkpoint 2's weights do not (safetensors, in Rust, fails);
# "optimizer": checkpoint 2's weights still fit, its optimizer state does not (torch.save fails).
@pytest.mark.parametrize("size_kb, fails_in", [(600, "weights"), (1000, "optimizer")])
def test_real_full_disk(tmpfs, tiny_model_dir, tiny_tokenizer, size_kb, fails_in):
    mnt = tmpfs(size_kb)
    model = _load(tiny_model_dir)
    first = save_checkpoint(mnt, 1, model=model, state={"cursor": 7})
    used = sum(p.stat().st_size for p in first.rglob("*") if p.is_file())
    assert 250_000 < used < 450_000, used  # keeps the tmpfs sizes meaningful if the fixture model changes
    opt, sched = _setup(model)
    _step(model, opt, sched, len(tiny_tokenizer))  # the weights change, then the disk fills up
    free_before = shutil.disk_usage(mnt).free
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(mnt, 2, model=model, optimizer=opt, tokenizer=tiny_tokenizer, keep_last=1)
    root = mnt / "checkpoints"
    assert str(info.value) == f"no space left on device while writing checkpoint step 2 to {root}"
    cause = info.value.__cause__
    if fails_in == "weights":
        assert "os error 28" in str(cause), repr(cause)
    else:
        assert isinstance(cause, OSError) and cause.errno == errno.ENOSPC, repr(cause)
    assert os.listdir(root) == ["step-00000001"]
    fresh = _load(tiny_model_dir)
    _scramble(fresh)
    assert load_checkpoint(latest_checkpoint(mnt), model=fresh) == {"cursor": 7, "step": 1}
    _same_weights(fresh, _load(tiny_model_dir))
    assert shutil.disk_usage(mnt).free == free_before  # the partial files were removed


def test_converted_layout_moe_model_round_trips(tmp_path):
    """transformers 5 saves fused MoE experts in the original per-expert layout; loading maps them back."""
    from transformers import AutoModelForCausalLM, MixtralConfig

    cfg = MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    path = save_checkpoint(tmp_path, 1, model=model)
    assert not set(_checkpoint_weights(path)) <= set(model.state_dict())  # really a converted layout
    torch.manual_seed(1)
    other = AutoModelForCausalLM.from_config(cfg)
    load_checkpoint(path, model=other)
    _same_weights(model, other)
    with pytest.raises(CheckpointError, match="holds a 'mixtral' model, not 'qwen2'"):
        from transformers import Qwen2Config

        load_checkpoint(path, model=AutoModelForCausalLM.from_config(Qwen2Config(
            vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2)))


def test_killed_mid_save_leaves_no_checkpoint_resume_would_use(tmp_path, tiny_model_dir):
    """A process SIGKILLed while writing: the half-written folder is ignored, then cleaned by the next save."""
    script = f"""
import os, signal, sys, torch
from transformers import AutoModelForCausalLM
from posttrain.checkpoint import save_checkpoint
model = AutoModelForCausalLM.from_pretrained({tiny_model_dir!r}, dtype=torch.float32)
save_checkpoint({str(tmp_path)!r}, 1, model=model, state={{"cursor": 1}})
def die(d):
    (d / "half").write_bytes(b"x" * 1000)
    os.kill(os.getpid(), signal.SIGKILL)
save_checkpoint({str(tmp_path)!r}, 2, model=model, state={{"cursor": 2}}, extra={{"buffer": die}})
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    root = tmp_path / "checkpoints"
    leftovers = sorted(p.name for p in root.iterdir())
    assert leftovers[0].startswith(".tmp-step-00000002-") and leftovers[1:] == ["step-00000001"]
    assert (root / leftovers[0] / "model" / "model.safetensors").is_file()  # really half-written
    assert latest_checkpoint(tmp_path) == root / "step-00000001"
    model = _load(tiny_model_dir)
    assert load_checkpoint(latest_checkpoint(tmp_path), model=model)["cursor"] == 1
    save_checkpoint(tmp_path, 2, model=model)
    assert sorted(p.name for p in root.iterdir()) == ["step-00000001", "step-00000002"]
