"""rollout/weight_sync.py: versioned, checksummed transfers and the atomic swap.

Directory transport: a round trip is bit-exact and plain safetensors, old versions are pruned; a
sender SIGKILLed half-way through writing (a real subprocess), a truncated file and a flipped
byte each raise WeightSyncError naming the version and the tensor or folder, and the engine
still reports and serves the old version. In process: a tensor changed after send fails its
checksum. Dist: two gloo processes on 127.0.0.1 deliver equal tensors (mixed dtypes, several
buckets), and a sender that dies after the manifest makes the receiver raise."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.core.errors import WeightSyncError
from posttrain.engine import SamplingParams
from posttrain.engine.paged import PagedEngine
from posttrain.engine.weight_sync import (DirectoryTransport, InProcessTransport, make_manifest, receive_and_swap,
                                           verify)
from tests.unit.engine.engine_checks import same

ROOT = Path(__file__).resolve().parents[3]
PARAMS = [SamplingParams(temperature=1.0, max_tokens=12, seed=3 + i) for i in range(4)]


@pytest.fixture(scope="module")
def states(sharp_model):
    """Versions 1 and 2 of the weights (tied head kept tied)."""
    out = []
    for seed in (1, 2):
        gen = torch.Generator().manual_seed(seed)
        s = {k: v + 0.5 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v.clone()
             for k, v in sharp_model.state_dict().items()}
        s["lm_head.weight"] = s["model.embed_tokens.weight"]
        out.append(s)
    return out


def engine_at(model, state=None, version=0) -> PagedEngine:
    e = PagedEngine.from_hf_model(model, device="cpu", block_size=4)
    if state is not None:
        e.update_weights(state, version)
    return e


def serves(engine, reference, prompts) -> bool:
    return all(same(a, b) for a, b in zip(engine.generate(prompts, PARAMS), reference.generate(prompts, PARAMS)))


def test_directory_round_trip_is_exact_safetensors_and_keeps_the_last_k(tmp_path, states, sharp_model, prompts):
    from safetensors import safe_open

    t = DirectoryTransport(tmp_path / "w", keep=2)
    extra = {"bf16": torch.randn(5).bfloat16(), "ids": torch.arange(3), "flag": torch.tensor(True)}
    for v in (1, 2, 3):
        t.send({**states[v % 2], **extra} if v == 3 else states[v % 2], v)
    assert t.versions() == [2, 3] and not (tmp_path / "w" / "v1").exists()
    got = t.receive()
    assert got.version == 3 and set(got.seconds) == {"transfer", "verify"}
    want = {**states[1], **extra}
    assert got.state.keys() == want.keys() and all(torch.equal(got.state[k], want[k]) for k in want)
    with safe_open(str(tmp_path / "w" / "v3" / "model.safetensors"), "pt") as f:
        assert all(torch.equal(f.get_tensor(k), want[k]) for k in f.keys())
    engine = engine_at(sharp_model)
    receive_and_swap(engine, t, 2)
    assert engine.version == 2 and serves(engine, engine_at(sharp_model, states[0]), prompts)


SENDER = r"""
import sys, time, torch
from posttrain.engine import weight_sync
state, out = torch.load(sys.argv[1]), sys.argv[2]
calls = [0]
def half_then_hang(f, buf):
    calls[0] += 1
    if calls[0] == 3:  # the third tensor: half of it reaches the file, then the sender hangs
        f.write(buf[: len(buf) // 2]); f.flush()
        print("half", flush=True); time.sleep(120)
    f.write(buf)
weight_sync._write_buffer = half_then_hang
weight_sync.DirectoryTransport(out).send(state, 2)
"""


def test_a_sender_killed_half_way_leaves_the_engine_on_the_old_version(tmp_path, states, sharp_model, prompts):
    t = DirectoryTransport(tmp_path / "w")
    t.send(states[0], 1)
    engine = engine_at(sharp_model)
    receive_and_swap(engine, t)
    assert engine.version == 1
    torch.save(states[1], tmp_path / "v2.pt")
    proc = subprocess.Popen([sys.executable, "-c", SENDER, str(tmp_path / "v2.pt"), str(tmp_path / "w")],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "half"
        size = (tmp_path / "w" / "v2.tmp" / "model.safetensors").stat().st_size
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and size > 0
    with pytest.raises(WeightSyncError, match=r"^weight sync v2: .*v2 was never committed \(its sender stopped"):
        receive_and_swap(engine, t, 2)
    assert t.receive().version == 1  # the newest committed version is still the old one
    assert engine.version == 1 and serves(engine, engine_at(sharp_model, states[0]), prompts)
    t.send(states[1], 2)  # a new sender of v2 starts over
    receive_and_swap(engine, t, 2)
    assert engine.version == 2 and serves(engine, engine_at(sharp_model, states[1]), prompts)


def _offsets(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return 8 + n, json.loads(raw[8 : 8 + n])


def _v2_on_disk(tmp_path, states, sharp_model, name):
    """An engine serving v1, v2 sent through a directory: (transport, engine, file, offset of the middle of `name`)."""
    t = DirectoryTransport(tmp_path / "w")
    engine = engine_at(sharp_model, states[0], 1)
    t.send(states[1], 2)
    path = tmp_path / "w" / "v2" / "model.safetensors"
    base, header = _offsets(path)
    start, end = header[name]["data_offsets"]
    return t, engine, path, base + (start + end) // 2


def test_a_truncated_file_names_the_cut_off_tensor(tmp_path, states, sharp_model, prompts):
    name = "model.layers.1.mlp.up_proj.weight"
    t, engine, path, middle = _v2_on_disk(tmp_path, states, sharp_model, name)
    os.truncate(path, middle)
    with pytest.raises(WeightSyncError, match=rf"^weight sync v2: tensor {name} is cut off: .*truncated"):
        receive_and_swap(engine, t)
    assert engine.version == 1 and serves(engine, engine_at(sharp_model, states[0]), prompts)


def test_a_corrupted_byte_fails_the_checksum_of_its_tensor(tmp_path, states, sharp_model, prompts):
    name = "model.layers.0.self_attn.k_proj.weight"
    t, engine, path, middle = _v2_on_disk(tmp_path, states, sharp_model, name)
    with open(path, "r+b") as f:
        f.seek(middle)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(WeightSyncError, match=rf"^weight sync v2: tensor {name} fails its checksum"):
        receive_and_swap(engine, t)
    assert engine.version == 1 and serves(engine, engine_at(sharp_model, states[0]), prompts)


def test_in_process_is_verified_and_a_missing_version_is_named(states, sharp_model):
    t = InProcessTransport()
    with pytest.raises(WeightSyncError, match="v1: not sent"):
        t.receive(1)
    state = {k: v.clone() for k, v in states[0].items()}
    t.send(state, 1)
    engine = engine_at(sharp_model)
    assert receive_and_swap(engine, t).version == 1 and engine.version == 1
    state["model.norm.weight"][0] += 1.0  # changed after send (e.g. the trainer stepped meanwhile)
    with pytest.raises(WeightSyncError, match=r"v1: tensor model.norm.weight fails its checksum"):
        receive_and_swap(engine, t)
    m = make_manifest(states[0], 4)
    with pytest.raises(WeightSyncError, match="v4: tensor model.norm.weight is missing"):
        verify(m, {k: v for k, v in states[0].items() if k != "model.norm.weight"})
    with pytest.raises(WeightSyncError, match="v9: not sent .*holds v1"):
        t.receive(9)
    with pytest.raises(WeightSyncError, match="v5: .* does not exist"):
        DirectoryTransport(Path("/nonexistent") / "w").receive(5)
