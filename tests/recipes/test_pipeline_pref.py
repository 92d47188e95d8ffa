"""The full pipeline's chaining on the tiny fixture model: sft -> rm -> dpo -> rl (rewarded by the
reward model trained here) -> eval, each stage from the previous stage's output, and a re-run
with --resume that skips the finished stages and continues the one that stopped."""

from __future__ import annotations

import json
import shutil

import yaml

from posttrain.checkpoint import list_checkpoints
from posttrain.config.base import load_config
from posttrain.config.pipeline import PipelineConfig
from posttrain.recipes import pipeline
from posttrain.telemetry.metrics import read_metrics
from tests.recipes.rl_toy import write_tasks  # noqa: F401  (registers the toy verifier)

QUIET = {"logging": {"tensorboard": False, "progress": False}}


def pipeline_cfg(tmp_path, model_dir) -> PipelineConfig:
    small = {"pairs_per_step": 8, "max_steps": 4, "eval_every": 4, "save_every": 2}
    pref = {"train": "pref:gym_chain_sum:48", "eval_fraction": 0.25}
    tree = {
        "run_dir": str(tmp_path / "p"), "stages": ["sft", "rm", "dpo", "rl", "eval"],
        "task_options": {"chain_sum": {"max_terms": 3, "max_digits": 1}},
        "sft": {"model": {"path": model_dir}, "data": {"train": "gym:chain_sum:64"},
                "train": {"max_steps": 3, "eval_every": 3, "save_every": 3}, **QUIET},
        "rm": {"data": pref, "train": small, "optim": {"lr": 1e-3}, **QUIET},
        "dpo": {"data": pref, "train": small, "optim": {"lr": 1e-3}, "reference_cache": str(tmp_path / "ref"), **QUIET},
        "rl": {"tasks": [{"name": "chain_sum", "eval_tasks": 4, "verifiers": ["numeric", "reward_model"],
                          "combine": "weights", "verifier_weights": {"numeric": 0.5, "reward_model": 0.5}}],
               "rollout": {"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8},
               "train": {"steps": 2, "eval_every": 2, "save_every": 2}, **QUIET},
        "eval": {"suites": {"held_out": {"tasks": ["chain_sum"], "n": 4}}, "in_loop": []},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_config(PipelineConfig, path)


def test_each_stage_starts_from_the_last_and_resume_continues_the_stopped_one(tmp_path, tiny_model_dir):
    cfg = pipeline_cfg(tmp_path, tiny_model_dir)
    pipeline.run(cfg)
    run = tmp_path / "p"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["rm"]["model"]["path"] == saved["dpo"]["model"]["path"] == str(run / "sft" / "final")
    assert saved["rl"]["model"]["path"] == str(run / "dpo" / "final")
    assert saved["rl"]["tasks"][0]["verifier_options"]["reward_model"]["path"] == str(run / "rm" / "final")
    assert (run / "rm" / "final" / "reward_stats.json").is_file()
    rl_rows = [r for r in read_metrics(run / "rl" / "metrics.jsonl") if r["step"] > 0]
    assert all("verifier/reward_model" in r and "verifier/numeric" in r for r in rl_rows)
    held = json.loads((run / "eval" / "held_out" / "compare.json").read_text())
    assert [m["label"] for m in held["models"]] == ["start", "sft", "dpo", "rl"]

    # dpo stopped after its step-2 checkpoint; rl never ran: --resume skips sft and rm, continues dpo
    shutil.rmtree(run / "dpo" / "final")
    shutil.rmtree(list_checkpoints(run / "dpo")[-1][1])
    shutil.rmtree(run / "rl")
    before = len(read_metrics(run / "sft" / "metrics.jsonl"))
    pipeline.run(cfg, resume=True)
    assert len(read_metrics(run / "sft" / "metrics.jsonl")) == before  # skipped: not one more line
    dpo_steps = [r["step"] for r in read_metrics(run / "dpo" / "metrics.jsonl")]
    assert dpo_steps[-2:] == [3, 4] and (run / "dpo" / "final").is_dir() and (run / "rl" / "final").is_dir()
