"""Exact resume of the RL recipe: N steps == N/2 steps + kill -9 + resume + N/2 steps.

Everything logged must be identical (rewards, losses, grad norms, advantages' effects,
buffer size, eval pass@1, temperature, ...) except wall-clock timings. This exercises the
checkpoint's policy, optimizer, scheduler, replay buffer, mixture cursors and RNG states,
and the (seed, step, attempt)-derived sampling seeds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from posttrain.checkpoint import list_checkpoints
from posttrain.telemetry.metrics import read_metrics
from tests.recipes.rl_toy import overrides, write_tasks

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
SCRIPT = str(REPO / "tests" / "recipes" / "rl_toy.py")
STEPS = 12


def _without_clock(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith("time/")} for r in rows]


def test_kill9_mid_run_then_resume_equals_uninterrupted_run(tmp_path, tiny_model_dir):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    common = {"train.steps": STEPS, "train.save_every": 2, "train.eval_every": 4, "optim.lr": 1e-2,
              "algo.kl_coef": 0.05, "algo.recompute_old_logprobs": "true", "train.updates_per_step": 2}
    whole = subprocess.run([sys.executable, SCRIPT, *overrides(tiny_model_dir, tasks, tmp_path / "whole", **common)],
                           cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr

    args = [sys.executable, SCRIPT, *overrides(tiny_model_dir, tasks, tmp_path / "killed", **common)]
    proc = subprocess.Popen(args, cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if any(step >= STEPS // 2 for step, _ in list_checkpoints(tmp_path / "killed")):
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    logged = [r["step"] for r in read_metrics(tmp_path / "killed" / "metrics.jsonl")]
    assert STEPS // 2 <= max(logged) < STEPS, "the run must die mid-way for this test to mean anything"

    resumed = subprocess.run([*args, "--resume"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    want = _without_clock(read_metrics(tmp_path / "whole" / "metrics.jsonl"))
    got = _without_clock(read_metrics(tmp_path / "killed" / "metrics.jsonl"))
    assert [r["step"] for r in got] == list(range(STEPS + 1))
    assert any(r.get("replay_groups", 0) > 0 for r in got[STEPS // 2 + 1 :])  # the restored buffer was used
    assert any(r.get("kl", 0) > 0 for r in got)
    for w, g in zip(want, got):
        assert w == g, f"step {w['step']} differs: " + str({k: (w.get(k), g.get(k)) for k in w if w.get(k) != g.get(k)})
