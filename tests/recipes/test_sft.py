"""SFT end to end on the tiny fixture model: loss goes down, kill -9 + resume reproduces an
uninterrupted run step for step, bad input gives exit code 2 and a one-line message, LoRA
changes only the adapted layers, a non-finite loss skips the update."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posttrain.checkpoint import list_checkpoints
from posttrain.config.base import load_config
from posttrain.config.sft import SFTConfig
from posttrain.core.errors import ConfigError
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_model, load_model_and_tokenizer

REPO = Path(__file__).resolve().parents[2]
# one intra-op thread per subprocess: on a shared 2-core machine, 2-thread torch ops can stall badly
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def write_chats(path: Path, n: int, seed: int = 0, bad: dict[int, str] | None = None) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(json.dumps({"messages": [
            {"role": "user", "content": f"Calculate {a} + {b}."},
            {"role": "assistant", "content": f"We add {a} and {b} to get {a + b}.\nAnswer: {a + b}"},
        ]}))
    for line_no, text in (bad or {}).items():
        lines.insert(line_no - 1, text)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def overrides(model_dir: str, data: str, out: Path, **extra) -> list[str]:
    base = {
        "model.path": model_dir, "data.train": data, "out_dir": str(out),
        "data.eval_fraction": 0.1, "train.row_tokens": 256, "train.max_tokens_per_microbatch": 512,
        "optim.lr": 3e-3, "optim.warmup_steps": 2, "logging.tensorboard": False, "logging.progress": False,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300, **kw)


def step_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r}


def test_sft_lowers_eval_loss_and_exports_a_loadable_model(tmp_path, tiny_model_dir):
    from posttrain.recipes import sft

    data = write_chats(tmp_path / "data.jsonl", 120)
    cfg = load_config(SFTConfig, None, overrides(tiny_model_dir, data, tmp_path / "run", **{"train.epochs": 3}))
    final = sft.run(cfg)
    assert final == tmp_path / "run" / "final"
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
    assert evals[0][0] == 0 and evals[-1][0] == records[-1]["step"]
    assert evals[-1][1] < 0.6 * evals[0][1], evals
    steps = [r for r in records if "loss" in r]
    assert all(k in steps[0] for k in ("loss", "lr", "grad_norm", "tokens", "tokens_per_s"))
    assert records[0]["bad_lines"] == 0
    assert (tmp_path / "run" / "config.yaml").is_file()
    model, tok = load_model_and_tokenizer(str(final))
    assert tok.chat_template and model.config.num_hidden_layers == 2
    with pytest.raises(ConfigError, match="already holds checkpoints"):  # never clobber a run by accident
        sft.run(cfg)


def test_kill9_then_resume_equals_uninterrupted_run(tmp_path, tiny_model_dir):
    data = write_chats(tmp_path / "data.jsonl", 200)
    # ~18 micro-batches per epoch: 60 steps cross epoch boundaries, which the resume must get right too
    common = {"train.max_steps": 60, "train.save_every": 4, "train.eval_every": 10, "train.keep_last": 2}
    whole = cli("sft", *overrides(tiny_model_dir, data, tmp_path / "whole", **common))
    assert whole.returncode == 0, whole.stderr

    args = ["sft", *overrides(tiny_model_dir, data, tmp_path / "killed", **common)]
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", *args], cwd=REPO, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if any(step >= 8 for step, _ in list_checkpoints(tmp_path / "killed")):
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = max(step_losses(tmp_path / "killed"))
    assert 8 <= killed_at < 60, "the run must die mid-way for this test to mean anything"
    assert not (tmp_path / "killed" / "final").exists()

    resumed = cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    want, got = step_losses(tmp_path / "whole"), step_losses(tmp_path / "killed")
    assert sorted(got) == sorted(want) == list(range(1, 61))
    assert max(abs(want[s] - got[s]) for s in want) <= 1e-6
    steps = [r["step"] for r in read_metrics(tmp_path / "killed" / "metrics.jsonl")]
    assert steps == sorted(set(steps)), "a resumed run must not duplicate metric lines"


def test_bad_json_line_exits_2_with_file_and_line(tmp_path, tiny_model_dir):
    data = write_chats(tmp_path / "data.jsonl", 10, bad={3: "{oops"})
    res = cli("sft", *overrides(tiny_model_dir, data, tmp_path / "run"))
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: {data}:3: not valid JSON"), res.stderr
    assert "Traceback" not in res.stderr


def test_skip_bad_lines_reports_count(tmp_path, tiny_model_dir):
    data = write_chats(tmp_path / "data.jsonl", 20, bad={3: "{oops", 5: json.dumps({"messages": []})})
    res = cli("sft", *overrides(tiny_model_dir, data, tmp_path / "run", **{"train.max_steps": 2}), "--skip-bad-lines")
    assert res.returncode == 0, res.stderr
    assert f"2 bad lines skipped in {data} (lines 3, 5)" in res.stderr
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[0]["bad_lines"] == 2


def test_missing_model_path_is_a_clear_error(tmp_path):
    data = write_chats(tmp_path / "data.jsonl", 5)
    res = cli("sft", *overrides(str(tmp_path / "no_model"), data, tmp_path / "run"))
    assert res.returncode == 2
    assert "no_model' does not exist" in res.stderr and "Traceback" not in res.stderr


def test_lora_changes_only_adapted_layers_and_merges(tmp_path, tiny_model_dir):
    from posttrain.recipes import sft

    data = write_chats(tmp_path / "data.jsonl", 60)
    extra = {"model.lora.r": 4, "model.lora.target_modules": "[q_proj, v_proj]", "train.max_steps": 6}
    cfg = load_config(SFTConfig, None, overrides(tiny_model_dir, data, tmp_path / "run", **extra))
    final = sft.run(cfg)
    first = read_metrics(tmp_path / "run" / "metrics.jsonl")[0]
    assert 0 < first["trainable_params"] < first["total_params"] / 10
    ckpt_model = list_checkpoints(tmp_path / "run")[-1][1] / "model"
    assert (ckpt_model / "adapter_model.safetensors").is_file()  # checkpoints hold the adapters

    base = load_model(tiny_model_dir, device=torch.device("cpu")).state_dict()
    tuned = load_model(str(final), device=torch.device("cpu")).state_dict()  # plain HF dir, merged
    assert set(base) == set(tuned)
    changed = {k for k in base if not torch.equal(base[k], tuned[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed), sorted(changed)


def test_nonfinite_loss_skips_the_update(tiny_model_dir, tiny_tokenizer):
    from posttrain.config.common import OptimConfig
    from posttrain.recipes.sft import train_step
    from posttrain.train.optim import build_optimizer
    from posttrain.train.packing import build_microbatches, tokenize_examples

    model = load_model(tiny_model_dir, device=torch.device("cpu"))
    chats = [[{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}]]
    examples, _ = tokenize_examples(tiny_tokenizer, chats, 64)
    mbs = build_microbatches(examples, packing=True, row_tokens=64, max_tokens_per_microbatch=64,
                             pad_id=tiny_tokenizer.pad_token_id, seed=0)
    opt = build_optimizer(model, OptimConfig())
    embedding = model.get_input_embeddings().weight
    poisoned = int(examples[0].input_ids[0])
    with torch.no_grad():
        embedding[poisoned] = float("nan")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = train_step(model, opt, mbs, grad_clip=1.0, device=torch.device("cpu"), dtype=torch.float32)
    assert result["skipped"] == "loss is nan"
    for k, v in model.state_dict().items():
        # every weight bit-for-bit as before the step (NaN compared equal to NaN) ...
        torch.testing.assert_close(v, before[k], rtol=0, atol=0, equal_nan=True, msg=f"{k} changed")
        # ... and the only NaNs are the poisoned embedding row (also the tied lm_head's)
        nan_at = torch.isnan(v).nonzero().tolist()
        if v.data_ptr() == embedding.data_ptr():
            assert nan_at == [[poisoned, j] for j in range(v.shape[1])], k
        else:
            assert nan_at == [], k
    assert not opt.state  # AdamW never stepped
    assert all(p.grad is None for p in model.parameters())


def test_gradient_checkpointing_keeps_the_losses(tmp_path, tiny_model_dir):
    """Gradient checkpointing changes memory, not math: the same per-step losses (with accumulation)."""
    from posttrain.recipes import sft

    data = write_chats(tmp_path / "data.jsonl", 40)
    runs = {
        "plain": {},
        "ckpt": {"model.gradient_checkpointing": True},
    }
    losses = {}
    for name, extra in runs.items():
        cfg = load_config(SFTConfig, None, overrides(tiny_model_dir, data, tmp_path / name,
                                                     **{"train.max_steps": 3, "train.microbatches_per_step": 2,
                                                        **extra}))
        sft.run(cfg)
        losses[name] = step_losses(tmp_path / name)
    assert losses["plain"].keys() == losses["ckpt"].keys() == {1, 2, 3}
    assert max(abs(losses["plain"][s] - losses["ckpt"][s]) for s in losses["plain"]) < 1e-5
