"""One RL run mixing a text domain with the SQL, document, CAD and terminal environments on the tiny
model is sound and resumes exactly, the scheduler's state (quota, pass-rate estimates, a
curriculum level) included: N steps == N/2 steps + kill -9 + resume + N/2 steps (every
logged value but clocks and the sampler-vs-trainer mismatch diagnostics), each environment domain logs its episode metrics every step (stop
reasons summing to 1, tool-call error rates, turns), its in-loop eval scores its held-out seeds,
and its rewards are the env's own scores in [0, 1]."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.telemetry.metrics import read_metrics
from tests.recipes.rl_toy import kill9_after_checkpoint, overrides, without_clock, write_tasks

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
SCRIPT = str(REPO / "tests" / "recipes" / "rl_toy.py")
STEPS = 4
ENVS = ("sql", "document", "cad", "terminal")


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory, tiny_tokenizer):
    """The tiny 2-layer model with 4096 positions: the environments' prompts (schema, table of contents,
    spec) take 2-3k tokens of the tiny tokenizer, past the default tiny model's 1024."""
    from posttrain.train.tiny import make_tiny_model, save_model

    model = make_tiny_model(tiny_tokenizer, family="qwen2", seed=0, max_position_embeddings=4096)
    return str(save_model(model, tiny_tokenizer, tmp_path_factory.mktemp("tiny_long") / "model"))


def test_mixed_environment_run_is_sound_and_resumes_exactly(tmp_path, long_model_dir):
    tasks = write_tasks(tmp_path / "toy.jsonl")
    # the scheduler's state is part of what resumes: a quota, pass-rate estimates steering the draws,
    # and a curriculum that moves sql down from level 2 (the random model solves nothing)
    domains = [{"name": "toy", "path": tasks, "eval_tasks": 4, "weight": 2, "quota": 4},
               {"name": "sql", "eval_tasks": 2, "curriculum": {"start": 2, "window": 1, "max_level": 3}},
               {"name": "document", "options": {"level": 1}, "eval_tasks": 2},
               {"name": "cad", "options": {"level": 1}, "eval_tasks": 1},
               {"name": "terminal", "eval_tasks": 1}]
    common = {"train.steps": STEPS, "train.save_every": 2, "train.eval_every": 2, "rollout.prompts_per_step": 6,
              "rollout.samples_per_prompt": 2, "rollout.max_tokens": 8,
              # the update from the trainer's own logprobs: episodes reach the engine as their envs start
              # (a sandbox, a render), so its batches, and the float rounding of the sampler's logprobs
              # (~1e-7), differ from run to run; the tokens sampled do not
              "algo.recompute_old_logprobs": "true", "algo.tis_cap": "null"}

    def args(name):
        base = [a for a in overrides(long_model_dir, tasks, tmp_path / name, **common) if not a.startswith("tasks=")]
        return [sys.executable, SCRIPT, *base, f"tasks={json.dumps(domains)}"]

    whole = subprocess.run(args("whole"), cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert whole.returncode == 0, whole.stderr[-3000:]
    rows = read_metrics(tmp_path / "whole" / "metrics.jsonl")
    trained = [r for r in rows if r["step"] > 0]
    assert len(trained) == STEPS
    seen = set()
    for r in trained:
        for d in ENVS:
            stops = {k: v for k, v in r.items() if k.startswith(f"episode/{d}/stop/")}
            if not stops:
                continue
            seen.add(d)
            assert abs(sum(stops.values()) - 1.0) < 1e-9, (d, stops)
            assert r[f"episode/{d}/turns"] >= 1, {k: v for k, v in r.items() if k.startswith("episode")}
            assert f"episode/{d}/tool_error_rate/malformed" in r
            assert 0.0 <= r[f"pass_rate/{d}"] <= 1.0
    assert seen == set(ENVS), seen  # every environment domain was drawn and ran in some step
    levels = [r["level/sql"] for r in trained]
    assert levels[0] == 2 or levels[0] == 1 and levels[-1] == 1, levels
    assert 1.0 in levels, levels  # sql's pass rate of 0 moved it down a level
    assert all(r.get("sched/trained/toy", 0) <= 4 for r in trained)  # the quota
    assert all(r["episodes/env_error"] == 0 and r["episodes/infra_error"] == 0 for r in trained)
    for d in ENVS:  # the in-loop eval scored each domain's held-out tasks at step 0
        assert f"pass@1/{d}" in rows[0], sorted(k for k in rows[0] if k.startswith("pass@1"))
    logged = [json.loads(x) for x in (tmp_path / "whole" / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert {r["domain"] for r in logged} - {"toy"} and all("stop_reason" in r for r in logged)

    killed = args("killed")
    steps = kill9_after_checkpoint(killed, tmp_path / "killed", STEPS // 2, cwd=REPO, env=ENV, timeout=600)
    assert STEPS // 2 <= max(steps) < STEPS, "the run must die mid-way for this test to mean anything"
    resumed = subprocess.run([*killed, "--resume"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    def exact(rows):  # mismatch/*: the sampler's rounding against the trainer's (see above)
        return [{k: v for k, v in r.items() if not k.startswith("mismatch/")} for r in without_clock(rows)]

    want = exact(rows)
    got = exact(read_metrics(tmp_path / "killed" / "metrics.jsonl"))
    assert [r["step"] for r in got] == list(range(STEPS + 1))
    for w, g in zip(want, got):
        assert w == g, f"step {w['step']} differs: " + str({k: (w.get(k), g.get(k)) for k in w if w.get(k) != g.get(k)})
