"""Exact resume of the RL recipe: N steps == N/2 steps + kill -9 + resume + N/2 steps.

Everything logged must be identical (rewards, losses, grad norms, advantages' effects,
buffer size, eval pass@1, temperature, ...) except wall-clock timings. This exercises the
checkpoint's policy, optimizer, scheduler, replay buffer, mixture cursors and RNG states,
and the (seed, step, attempt)-derived sampling seeds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from posttrain.telemetry.metrics import read_metrics
from tests.recipes.rl_toy import kill9_after_checkpoint, overrides, without_clock, write_tasks

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
SCRIPT = str(REPO / "tests" / "recipes" / "rl_toy.py")
STEPS = 12


def test_kill9_mid_run_then_resume_equals_uninterrupted_run(tmp_path, tiny_model_dir):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    common = {"train.steps": STEPS, "train.save_every": 2, "train.eval_every": 4, "optim.lr": 1e-2,
              "algo.kl_coef": 0.05, "algo.recompute_old_logprobs": "true", "train.updates_per_step": 2}
    whole = subprocess.run([sys.executable, SCRIPT, *overrides(tiny_model_dir, tasks, tmp_path / "whole", **common)],
                           cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr

    args = [sys.executable, SCRIPT, *overrides(tiny_model_dir, tasks, tmp_path / "killed", **common)]
    logged = kill9_after_checkpoint(args, tmp_path / "killed", STEPS // 2, cwd=REPO, env=ENV, timeout=300)
    assert STEPS // 2 <= max(logged) < STEPS, "the run must die mid-way for this test to mean anything"

    resumed = subprocess.run([*args, "--resume"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    want = without_clock(read_metrics(tmp_path / "whole" / "metrics.jsonl"))
    got = without_clock(read_metrics(tmp_path / "killed" / "metrics.jsonl"))
    assert [r["step"] for r in got] == list(range(STEPS + 1))
    assert any(r.get("replay_groups", 0) > 0 for r in got[STEPS // 2 + 1 :])  # the restored buffer was used
    assert any(r.get("kl", 0) > 0 for r in got)
    for w, g in zip(want, got):
        assert w == g, f"step {w['step']} differs: " + str({k: (w.get(k), g.get(k)) for k in w if w.get(k) != g.get(k)})


def test_resume_at_a_data_epoch_boundary_trains_the_remaining_steps(tmp_path, tiny_model_dir):
    """16 tasks, 8 held out: one pass over the 8 training tasks is about 2 steps of 4 prompts (no
    backfill, no replay); the run is resumed from a checkpoint whose cursor sits exactly on a pass
    boundary: it reshuffles the next pass as the uninterrupted run does and trains the remaining steps
    the same."""
    import json
    import shutil

    from posttrain.config.base import load_config
    from posttrain.config.rl import RLConfig
    from posttrain.recipes import rl

    steps, train_tasks = 6, 8
    tasks = write_tasks(tmp_path / "tasks.jsonl", n=16)
    common = {"train.steps": steps, "train.save_every": 1, "train.keep_last": steps, "train.eval_every": 100,
              "optim.lr": 1e-2, "dynamic_sampling.enabled": "false", "buffer.replay_ratio": 0.0}
    rl.run(load_config(RLConfig, None, overrides(tiny_model_dir, tasks, tmp_path / "whole", **common)))
    ckpts = tmp_path / "whole" / "checkpoints"
    cursor = {s: json.loads((ckpts / f"step-{s:08d}" / "state.json").read_text())["mixture"]["toy"]["cursor"]
              for s in range(1, steps)}
    boundary = [s for s in range(2, steps) if cursor[s] % train_tasks == 0]
    assert boundary, f"no checkpoint on a pass boundary: cursors {cursor}"
    at = boundary[-1]
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")  # what a run killed after that checkpoint leaves
    shutil.rmtree(tmp_path / "cut" / "final")
    for s in range(at + 1, steps + 1):
        shutil.rmtree(tmp_path / "cut" / "checkpoints" / f"step-{s:08d}")
    rl.run(load_config(RLConfig, None, overrides(tiny_model_dir, tasks, tmp_path / "cut", **common)), resume=True)
    want = without_clock(read_metrics(tmp_path / "whole" / "metrics.jsonl"))
    got = without_clock(read_metrics(tmp_path / "cut" / "metrics.jsonl"))
    assert [r["step"] for r in got] == list(range(steps + 1))
    assert got == want
