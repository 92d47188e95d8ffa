"""The RL recipe end to end on the tiny fixture model and a toy verifier it can learn:
reward rises, every phase is timed, checkpoints hold the replay buffer and cursors, a raising
verifier is counted and skipped, non-finite losses stop the run with the last checkpoint
intact, no reference model is loaded when kl_coef is 0, and bad configs are one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posttrain.rl.buffer import ReplayBuffer
from posttrain.checkpoint import latest_checkpoint, list_checkpoints
from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.core.errors import ConfigError, TrainingError
from posttrain.recipes import rl
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_model
from posttrain.core.types import Score
from posttrain.verifiers import VERIFIERS, register
from tests.recipes.rl_toy import overrides, write_tasks

REPO = Path(__file__).resolve().parents[2]


def cfg_for(tmp_path, model_dir, **extra) -> RLConfig:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    return load_config(RLConfig, None, overrides(model_dir, tasks, tmp_path / "run", **extra))


def test_rl_raises_reward_and_logs_every_phase(tmp_path, tiny_model_dir):
    cfg = cfg_for(tmp_path, tiny_model_dir, **{"train.steps": 16, "train.eval_every": 8, "train.save_every": 8,
                                                  "optim.lr": 1e-2, "rollout.samples_per_prompt": 8})
    final = rl.run(cfg)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == list(range(1, 17))
    first = sum(r["score"] for r in steps[:3]) / 3
    last = sum(r["score"] for r in steps[-3:]) / 3
    assert first < 0.75 and last > first + 0.15, (first, last)  # a random policy is right half the time
    for key in ("time/rollout", "time/verify", "time/update", "time/sync", "time/step", "temperature",
                "pass_rate/toy", "zero_variance_frac/toy", "completion_len/toy", "reward/toy",
                "filtered_groups", "buffer/size", "grad_norm", "clip_frac"):
        assert key in steps[0], key
    temps = [r["temperature"] for r in steps]
    assert temps[0] == 1.0 and temps[-1] == pytest.approx(0.3) and temps == sorted(temps, reverse=True)
    assert [r["step"] for r in rows if "pass@1/toy" in r] == [0, 8, 16]
    assert load_model(str(final)).config.num_hidden_layers == 2
    ckpt = latest_checkpoint(tmp_path / "run")
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == 16 and state["mixture"]["toy"]["cursor"] >= 16 and state["reference"] is None
    buf = ReplayBuffer.load(ckpt / "replay")
    assert len(buf) == steps[-1]["buffer/size"] > 0
    assert any(r["replay_groups"] > 0 for r in steps[1:])
    assert steps[0]["replay/share_trajectories"] == steps[0]["replay/mean_age"] == 0  # step 1: empty buffer
    assert all(0 <= r["replay/share_trajectories"] <= 0.5 for r in steps)


def test_replay_is_a_share_of_trained_trajectories(tmp_path, tiny_model_dir):
    """replay_ratio 0.5 with groups of 8: up to 4 stored successes + 4 fresh samples per replay group,
    so about half of what is trained is replayed (one stored success per group would give 1/8)."""
    cfg = cfg_for(tmp_path, tiny_model_dir, **{"train.steps": 6, "rollout.samples_per_prompt": 8,
                                                  "buffer.replay_ratio": 0.5, "train.eval_every": 6})
    rl.run(cfg)
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    shares = [r["replay/share_trajectories"] for r in steps]
    assert shares[0] == 0 and all(0 <= x <= 0.5 for x in shares)
    assert max(shares[2:]) > 0.3, shares  # well above the 1/8 a single stored success per group gives
    assert all(r["replay/mean_age"] >= 1 for r in steps[2:] if r["replay/share_trajectories"] > 0)
    assert all(0 < r["replay/share_tokens"] <= 1 for r in steps[2:] if r["replay/share_trajectories"] > 0)


def test_raising_verifier_is_counted_and_the_step_goes_on(tmp_path, tiny_model_dir):
    calls = {"n": 0}

    def flaky(task, traj):
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise RuntimeError("verifier crashed")
        return Score(float(traj.token_ids[traj.prompt_len] % 2 == 0), "flaky")

    if "flaky_test" not in VERIFIERS:
        register("flaky_test")(lambda task, traj: flaky(task, traj))
    VERIFIERS["flaky_test"] = flaky
    tasks = write_tasks(tmp_path / "flaky.jsonl", verifier="flaky_test")
    cfg = load_config(RLConfig, None, overrides(tiny_model_dir, tasks, tmp_path / "run", **{"train.steps": 2}))
    rl.run(cfg)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    assert len(rows) == 2 and all(r["verifier_errors"] > 0 for r in rows)
    assert all(r["unscored_samples"] > 0 and r["samples"] + r["unscored_samples"] <= 16 for r in rows)


def test_nonfinite_losses_stop_the_run_with_the_last_checkpoint_intact(tmp_path, tiny_model_dir, monkeypatch):
    import posttrain.train.rl_update as upd
    import posttrain.train.step as train_step

    real, calls = upd.token_logits, {"n": 0}

    def poisoned(model, mb):
        logits = real(model, mb)
        calls["n"] += 1
        return logits * float("nan") if step_now["value"] >= 2 else logits

    step_now = {"value": 0}
    real_update = upd.update_policy

    def counting_update(*a, **kw):
        out = real_update(*a, **kw)
        step_now["value"] += 1
        return out

    monkeypatch.setattr(upd, "token_logits", poisoned)
    monkeypatch.setattr(train_step, "update_policy", counting_update)
    cfg = cfg_for(tmp_path, tiny_model_dir, **{"train.steps": 10, "train.max_bad_steps": 3})
    with pytest.raises(TrainingError, match="3 steps in a row had a non-finite"):
        rl.run(cfg)
    saved = dict(list_checkpoints(tmp_path / "run"))
    assert sorted(saved) == [2, 4]  # step 4 was saved mid-streak: its updates were skipped, so ...
    before, latest = (load_model(str(saved[s] / "model")).state_dict() for s in (2, 4))
    assert all(torch.equal(before[k], latest[k]) for k in before)  # ... it holds the step-2 weights
    assert all(torch.isfinite(v).all() for v in latest.values())
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 2]
    assert [r["skip_reason"] for r in rows] == ["non-finite loss"] * 3


def test_no_reference_model_without_kl_and_kl_logged_with_it(tmp_path, tiny_model_dir, monkeypatch):
    from posttrain.train import policy as model_mod
    loads = []
    real = model_mod.load_model
    monkeypatch.setattr(model_mod, "load_model", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    rl.run(cfg_for(tmp_path / "a", tiny_model_dir, **{"train.steps": 1}) if (tmp_path / "a").mkdir() is None else None)
    assert len(loads) == 1
    loads.clear()
    cfg = cfg_for(tmp_path / "b", tiny_model_dir, **{"train.steps": 2, "algo.kl_coef": 0.1}) \
        if (tmp_path / "b").mkdir() is None else None
    rl.run(cfg)
    assert len(loads) == 2
    rows = [r for r in read_metrics(tmp_path / "b" / "run" / "metrics.jsonl") if r["step"] > 0]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-5)  # policy == reference before the first update
    assert rows[1]["kl"] > 0
    state = json.loads((latest_checkpoint(tmp_path / "b" / "run") / "state.json").read_text())
    assert state["reference"].startswith("model:")


@pytest.mark.parametrize("override, message", [
    (["tasks=[]"], "the mixture is empty"),
    (["rollout.prompts_per_step=0"], "rollout.prompts_per_step"),
    (["rollout.samples_per_prompt=1"], "group-relative estimator 'grpo'"),
    (["buffer.replay_ratio=0.6"], "buffer.replay_ratio"),
    (['tasks=[{"name": "basic_arithmetc"}]', "train.steps=1"], "did you mean basic_arithmetic"),
])
def test_bad_config_is_a_one_line_error(tmp_path, tiny_model_dir, override, message):
    proc = subprocess.run([sys.executable, "-m", "posttrain.cli", "rl", f"model.path={tiny_model_dir}",
                           f"out_dir={tmp_path / 'run'}", *override], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_paged_engine_gives_the_same_run_as_the_hf_engine(tmp_path, tiny_model_dir):
    # same per-request seeds and the same sampler: the built-in engine is a drop-in for the reference
    scores = {}
    for engine in ("hf", "paged"):
        cfg = cfg_for(tmp_path, tiny_model_dir, **{"train.steps": 4, "rollout.engine": engine, "out_dir": str(tmp_path / engine)})
        rl.run(cfg)
        rows = [r for r in read_metrics(tmp_path / engine / "metrics.jsonl") if r["step"] > 0]
        scores[engine] = [v for r in rows for v in (r["score"], r["completion_len"], r["loss"])]
    assert len(scores["paged"]) == 12
    assert scores["paged"] == pytest.approx(scores["hf"], rel=1e-4, abs=1e-7)
