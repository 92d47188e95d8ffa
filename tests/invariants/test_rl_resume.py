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
