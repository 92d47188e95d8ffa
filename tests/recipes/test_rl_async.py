"""Asynchronous RL (`scheduler.max_staleness`): 0 is the plain synchronous loop bit for bit; 1 overlaps
the next step's rollout with the update, its tokens one version stale and corrected off-policy, and it
still learns; a run killed with SIGKILL resumes with every drawn item trained at most once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from posttrain.algos.temperature import temperature_at
from posttrain.rl.buffer import ReplayBuffer
from posttrain.config.base import load_config
from posttrain.config.rl import RLConfig
from posttrain.eval.run import stop_ids
from posttrain.recipes import rl
from posttrain.engine.registry import ENGINES
from posttrain.engine.options import engine_options
from posttrain.rl.collect import Collector
from posttrain.rl.plan import Planner, make_curricula
from posttrain.rl.scoring import StepContext
from posttrain.tasks.mixture import build_mixture
from posttrain.telemetry.metrics import read_metrics
from posttrain.core.hf import load_model, load_tokenizer
from posttrain.train.optim import build_optimizer, build_scheduler
from posttrain.train.run import seed_everything
from posttrain.train.step import train_step
from posttrain.train.weights import engine_state_dict
from tests.invariants.test_sched_ledger import _check_ledger, _rows
from tests.recipes.rl_toy import kill9_after_checkpoint, overrides, write_tasks

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def cfg_for(tmp_path, model_dir, name="run", **extra) -> RLConfig:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    return load_config(RLConfig, None, overrides(model_dir, tasks, tmp_path / name, **extra))


def synchronous_loop(cfg: RLConfig) -> tuple[list[dict], dict]:
    """The RL loop as it was before asynchronous RL: roll out, train, sync, in turn (no eval, no logs)."""
    t = cfg.train
    seed_everything(t.seed)
    mixture = build_mixture(cfg.tasks, task_seed=t.task_seed, seed=t.seed)
    tokenizer = load_tokenizer(cfg.model.path)
    policy = load_model(cfg.model.path, dtype="float32", device=torch.device("cpu"))
    engine = ENGINES[cfg.rollout.engine](cfg.model.path, tokenizer, **engine_options(cfg.rollout, dtype=cfg.model.dtype, device=torch.device("cpu")))
    optimizer = build_optimizer(policy, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, t.steps * t.updates_per_step)
    b = cfg.buffer
    buffer = ReplayBuffer(b.capacity, b.per_domain_quota, b.min_score)
    ctx = StepContext(cfg, engine, tokenizer, mixture, buffer, stop_ids=tuple(stop_ids(tokenizer)), version=0)
    out = []
    schedule = cfg.rollout.temperature
    steps_per_epoch = schedule.steps_per_epoch or max(1, -(-t.steps // 10))
    planner = Planner(ctx, make_curricula(cfg.tasks, mixture))
    with Collector(ctx, planner) as collector:
        for step in range(t.steps):
            temperature = temperature_at(step, steps_per_epoch=steps_per_epoch, total_steps=t.steps,
                                         start=schedule.start, end=schedule.end, schedule=schedule.schedule)
            batch = collector.collect(planner.plan(step), temperature)
            out.append(train_step(policy, ref=None, optimizer=optimizer, scheduler=scheduler, groups=batch.kept,
                                  cfg=cfg, pad_id=tokenizer.pad_token_id))
            engine.update_weights(engine_state_dict(policy), step + 1)
            ctx.version = step + 1
    return out, {n: p.detach().clone() for n, p in policy.named_parameters()}


def test_staleness_zero_is_the_synchronous_loop_bit_for_bit(tmp_path, tiny_model_dir):
    extra = {"train.steps": 5, "train.eval_every": 100, "train.save_every": 100, "scheduler.max_staleness": 0}
    final = rl.run(cfg_for(tmp_path, tiny_model_dir, **extra))
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    want, weights = synchronous_loop(cfg_for(tmp_path, tiny_model_dir, name="hand", **extra))
    for key in ("loss", "grad_norm", "entropy", "pg_loss"):
        assert [r[key] for r in rows] == [m[key] for m in want], key
    assert all(r["async/staleness_max"] == 0 for r in rows)  # every trained token sampled by the weights trained
    got = load_model(str(final)).state_dict()
    assert all(torch.equal(got[n], w) for n, w in weights.items())


def test_staleness_one_overlaps_trains_stale_tokens_with_correction_and_learns(tmp_path, tiny_model_dir):
    cfg = cfg_for(tmp_path, tiny_model_dir, **{"train.steps": 16, "train.eval_every": 8, "train.save_every": 8,
                                                "optim.lr": 1e-2, "rollout.samples_per_prompt": 8,
                                                "scheduler.max_staleness": 1, "cluster.weight_sync.pause": "finish"})
    rl.run(cfg)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == list(range(1, 17))
    assert rows[0]["async/staleness_max"] == 0  # the first batch is rolled out before any update
    # every later batch was rolled out while the update before it ran: its first round by the old weights
    # ("finish": requests in flight at the swap end on the weights that started them)
    assert all(r["async/staleness_max"] == 1 for r in rows[1:])
    assert all(0 < r["async/staleness_mean"] <= 1 for r in rows[1:])
    overlapped = [r for r in rows[:-1]]  # the last step has no next rollout to overlap
    assert all(r["async/overlap_fraction"] > 0 for r in overlapped)
    assert all(0 < r["off_policy/ess"] <= 1 for r in rows[1:])  # stale tokens carried a correction weight
    first = sum(r["score"] for r in rows[:3]) / 3
    last = sum(r["score"] for r in rows[-3:]) / 3
    print("scores", [round(r["score"], 3) for r in rows])
    assert first < 0.75 and last > first + 0.1, (first, last)  # a random policy is right half the time


def test_async_run_killed_with_sigkill_resumes_with_nothing_lost_or_trained_twice(tmp_path, tiny_model_dir):
    steps = 8
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    args = [sys.executable, str(REPO / "tests" / "recipes" / "rl_toy.py"),
            *overrides(tiny_model_dir, tasks, tmp_path / "run", **{"train.steps": steps, "train.save_every": 2,
                                                                    "train.eval_every": 4, "scheduler.max_staleness": 1,
                                                                    "rollout.max_tokens": 12})]
    logged = kill9_after_checkpoint(args, tmp_path / "run", 4, cwd=REPO, env=ENV, timeout=300)
    assert 4 <= max(logged) < steps, "the run must die mid-way for this test to mean anything"
    ckpts = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert (ckpts[-1] / "scheduler" / "prefetched.pkl").exists()  # the next step's batch, rolled out, untrained
    resumed = subprocess.run([*args, "--resume"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = _rows(tmp_path / "run")
    assert [r["step"] for r in rows if not r.get("drained")] == list(range(1, steps + 1))
    _check_ledger(rows)
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in metrics if r["step"] > 0] == list(range(1, steps + 1))
